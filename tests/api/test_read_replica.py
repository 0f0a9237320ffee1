"""A read replica (`Service(replica=True)`, what `serve --replica` serves) over a real SQLite file.

It folds nothing: it reads the state store a folding server projected. Its web pages list what the
folding server's list (the same links, from the store's index); a write is refused with a 503 that says
where to send it, and nothing is written; a read whose `min_seq` the log has but the store has not yet
waits, then says to try again (503, Retry-After), and answers once the store gets there; its metrics are
the store's counts. (Every API read as of every seq: tests/api/test_time_travel.py.)
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from partbuild.api.app import create_app
from partbuild.api.errors import ApiError, Conflict
from partbuild.api.models.jobs import JobGraphOut
from partbuild.api.service import Service, jobs
from partbuild.api.service.jobs import GridFilters, GridView
from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.database import Database
from partbuild.state.fold.build_state import BuildState
from partbuild.state.fold.view import StateView
from partbuild.state.log.events import envelope
from partbuild.state.rules.check_results import check_result_name
from partbuild.state.rules.grid import run_starts
from partbuild.state.store import stored
from partbuild.state.store.projector import Projector
from partbuild.state.store.reader import ReadReplica, StoreReader
from partbuild.state.store.stored import StoredRecords

from golden_log import GOLDEN_LOGS, read_events
from timetravelkit import SMALL_PLAN, check, w1_history

PAGES = ["/", "/wants", "/runs", "/partitions", "/jobs", "/changes?from=0", "/events", "/automation", "/system"]
LINK = re.compile(r'href="(/(?:wants|runs|instances|partition|jobs)[^"#]*)"')


@dataclass
class Sides:
    db: Database
    primary: Service
    replica: Service
    folding: TestClient
    reading: TestClient


@pytest.fixture
def sides(tmp_path: Path) -> Iterator[Sides]:
    with Database.open(f"sqlite:///{tmp_path / 'r.db'}", auto_upgrade=True) as db:
        db.log.append(w1_history(SMALL_PLAN))
        primary = Service(db, past_from_store=False)  # its grids of the past from its memory: the reference
        assert Projector(primary.live, db.changes).project() == db.log.head()
        replica = Service(db, replica=True)
        with TestClient(create_app(primary)) as folding, TestClient(create_app(replica)) as reading:
            yield Sides(db, primary, replica, folding, reading)


def links(client: TestClient, page: str) -> list[str]:
    answer = client.get(page)
    assert answer.status_code == 200, (page, answer.text[:300])
    return LINK.findall(answer.text)


def test_every_page_links_what_the_folding_servers_page_links(sides: Sides) -> None:
    found = 0
    for page in PAGES:
        listed = links(sides.reading, page)
        assert listed == links(sides.folding, page), page
        found += len(listed)
        for link in listed[:3]:  # the pages of the records listed render too, as the folding server's
            assert sides.reading.get(link).status_code == 200, link
    assert found > 20  # the pages list records: the comparison compared something


def answer(read: Callable[..., object], *args: object, **kwargs: object) -> object:
    """What a read answers: its model, or its error (class and message)."""
    try:
        return read(*args, **kwargs)
    except ApiError as exc:
        return (type(exc).__name__, str(exc))


def test_the_job_graph_grids_and_summaries_are_the_folding_servers_now_and_as_of_a_seq(sides: Sides) -> None:
    head = sides.db.log.head()
    primary, replica = sides.primary, sides.replica
    cells = 0
    for seq in (None, head // 3, 2 * head // 3, head):
        graph = answer(primary.job_graph, as_of_seq=seq)
        assert answer(replica.job_graph, as_of_seq=seq) == graph
        for node in graph.nodes if isinstance(graph, JobGraphOut) else []:
            grid = answer(primary.partitions_grid, node.name, as_of_seq=seq)
            assert answer(replica.partitions_grid, node.name, as_of_seq=seq) == grid, (node.name, seq)
            summary = answer(primary.partitions_summary, node.name, as_of_seq=seq)
            assert answer(replica.partitions_summary, node.name, as_of_seq=seq) == summary, (node.name, seq)
            cells += len(grid.cells) if isinstance(grid, GridView) else 0
    assert cells > 100  # grids of cells were compared, not only errors


def test_a_write_is_refused_with_a_503_and_nothing_is_written(sides: Sides) -> None:
    head = sides.db.log.head()
    answer = sides.reading.post("/api/v1/wants", json={"refs": ["agg/x/1"]})
    assert answer.status_code == 503 and answer.json()["detail"] == str(ReadReplica())
    assert "Retry-After" not in answer.headers  # it will not work here later either
    with pytest.raises(ReadReplica):
        sides.replica.cancel_want("w")
    assert sides.db.log.head() == head


def test_a_read_of_a_seq_the_store_has_not_reached_waits_then_says_try_again(sides: Sides) -> None:
    reader = sides.replica.reads
    assert isinstance(reader, StoreReader)
    reader.wait_s = 0.2
    written = sides.db.log.append([envelope(pb.WantCreate(want_id="late", partition_refs=["agg/late/1"]))])
    seq = written.last_seq
    behind = sides.reading.get("/api/v1/wants/late", params={"min_seq": seq})
    assert behind.status_code == 503 and behind.headers["Retry-After"] == "1", behind.text
    assert f"min_seq {seq} is in the log, but the state store" in behind.json()["detail"]
    ahead = sides.reading.get("/api/v1/wants/late", params={"min_seq": seq + 1})
    assert ahead.status_code == 409 and "after the log head" in ahead.json()["detail"]
    sides.primary.refresh()
    Projector(sides.primary.live, sides.db.changes).project()
    answer = sides.reading.get("/api/v1/wants/late", params={"min_seq": seq})
    assert answer.status_code == 200 and answer.json()["want_id"] == "late"


def test_its_metrics_are_the_store_counts(sides: Sides) -> None:
    def gauges(client: TestClient) -> list[str]:
        lines = client.get("/metrics").text.splitlines()
        return sorted(line for line in lines if line.startswith(("partbuild_wants{", "partbuild_instances{")))

    said = gauges(sides.reading)
    assert said == gauges(sides.folding)
    assert any(not line.endswith(" 0.0") for line in said)


def test_a_jobs_cells_are_looked_up_once_per_watermark_and_again_when_it_moves(
    sides: Sides, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every read of a replica is a state of its own: its summary of a job takes each of the job's refs' cells
    from the store's cells by one range scan (no ref is looked up in its records' rows) and is kept for the
    watermark it was read at; once the store moves, only the refs its changes name since are read again (their
    cells, by key), and the counts are the folding server's; a summary and a grid as of a seq are made from
    the cells kept, with no scan, and so is one filtered by a check, now or then (the checks are kept with the
    cells)."""
    graph = sides.primary.job_graph()
    node = max(graph.nodes, key=lambda node: answer(sides.primary.partitions_summary, node.name).total)
    read: list[int] = []  # how many refs each look-up in the records' rows was of
    for module in (jobs, stored):
        monkeypatch.setattr(module, "cell_states", _counting(module.cell_states, read))
    scans, by_key = [], []
    scan, keyed = StoredRecords.cells_between, StoredRecords.cells_of
    monkeypatch.setattr(StoredRecords, "cells_between", lambda self, a, b: scans.append((a, b)) or scan(self, a, b))
    monkeypatch.setattr(StoredRecords, "cells_of", lambda self, refs: by_key.append(len(refs)) or keyed(self, refs))
    first = sides.replica.partitions_summary(node.name)
    assert read == [] and len(scans) == 1, "the first summary reads the store's cells, one range scan"
    assert first == sides.primary.partitions_summary(node.name)
    assert sides.replica.partitions_summary(node.name) == first and not read
    head = first.as_of_seq
    check_filters = _check_filters(sides.primary.state)
    assert check_filters
    for seq in (head // 2, 3 * head // 4, head):  # the first a 410 on both: retention dropped a ref's instance
        for read_as_of in ("partitions_summary", "partitions_grid"):
            said = answer(getattr(sides.replica, read_as_of), node.name, as_of_seq=seq)
            assert said == answer(getattr(sides.primary, read_as_of), node.name, as_of_seq=seq), (read_as_of, seq)
        for filters in check_filters:
            said = answer(sides.replica.partitions_grid, node.name, as_of_seq=seq, filters=filters)
            assert said == answer(sides.primary.partitions_grid, node.name, as_of_seq=seq, filters=filters)
    for filters in check_filters:  # and now
        said = answer(sides.replica.partitions_grid, node.name, filters=filters)
        assert said == answer(sides.primary.partitions_grid, node.name, filters=filters)
    assert len(scans) == 1 and not by_key
    grid = sides.primary.partitions_grid(node.name)
    assert isinstance(grid, GridView)
    live = next(cell.first for cell in grid.cells if cell.state == "live")
    sides.db.log.append([envelope(pb.PartitionTaint(partition_ref=live, reason="t", only_this_ref=True))])
    sides.primary.refresh()
    Projector(sides.primary.live, sides.db.changes).project()
    sides.replica.refresh()
    moved = sides.replica.partitions_summary(node.name)
    assert by_key == [1] and len(scans) == 1 and moved.as_of_seq > first.as_of_seq  # the tainted ref alone
    assert moved.counts["live"] == first.counts["live"] - 1
    assert moved == sides.primary.partitions_summary(node.name)


def test_a_folding_servers_summary_of_the_past_from_its_store_still_honours_min_seq(sides: Sides) -> None:
    """A folding server answers a summary as of a seq from its store (`_store_twin`), but a `min_seq` the log has
    not reached is still a 409, and one another process wrote is caught up to first: never ignored."""
    folding = Service(sides.db)
    try:
        name = max(sides.primary.job_graph().nodes, key=lambda node: node.name).name
        head = folding.live.head_seq
        expected = sides.primary.partitions_summary(name, as_of_seq=head // 2)
        assert folding.partitions_summary(name, as_of_seq=head // 2) == expected
        with pytest.raises(Conflict, match="min_seq"):
            folding.partitions_summary(name, as_of_seq=head // 2, min_seq=head + 5)
        sides.db.log.append([envelope(pb.WantCreate(want_id="later", partition_refs=["x/y=1"]))])
        assert folding.partitions_summary(name, as_of_seq=head // 2, min_seq=head + 1) == expected
        assert folding.live.head_seq == head + 1  # caught up to it first
    finally:
        folding.stop()


def _counting(
    looked_up: Callable[[StateView, Iterable[str]], list[tuple[str, str]]], read: list[int]
) -> Callable[[StateView, Iterable[str]], list[tuple[str, str]]]:
    """`looked_up`, which appends to `read` how many refs each call was of."""

    def counted(state: StateView, refs: Iterable[str]) -> list[tuple[str, str]]:
        refs = list(refs)
        read.append(len(refs))
        return looked_up(state, refs)

    return counted


def test_a_replicas_grids_follow_the_store_as_it_moves(tmp_path: Path) -> None:
    """A history projected a slice at a time, then a Live daily's checks answered again (warning), the daily
    tainted and its tainted instance dropped by retention: after each, every job's summary and grid on the
    replica, kept from the last watermark and brought forward by the store's changes, are the folding
    server's, now and as of a few seqs before."""
    events = w1_history(SMALL_PLAN)
    with Database.open(f"sqlite:///{tmp_path / 'm.db'}", auto_upgrade=True) as db:
        db.log.append(events[: len(events) // 4])
        primary = Service(db)
        projector = Projector(primary.live, db.changes)
        projector.project()
        replica = Service(db, replica=True)
        compared = 0

        def moved(appended: list[pb.Event]) -> None:
            nonlocal compared
            db.log.append(appended)
            primary.refresh()
            projector.project()
            replica.refresh()
            for node in primary.job_graph().nodes:
                summary = answer(primary.partitions_summary, node.name)
                assert answer(replica.partitions_summary, node.name) == summary, (node.name, replica.reads.head_seq)
                grid = answer(primary.partitions_grid, node.name)
                assert answer(replica.partitions_grid, node.name) == grid, (node.name, replica.reads.head_seq)
                compared += isinstance(grid, GridView) and len(grid.cells) > 0
                kept = replica.__dict__.get("_cells_cache", {}).get(node.name)  # brought forward around the moves
                assert kept is None or kept.starts == run_starts(kept.cells), node.name
                head = replica.reads.head_seq
                for seq in (head - 1, head - 8, head - 50):  # from the cells kept, brought forward: as of seqs
                    past = answer(primary.partitions_grid, node.name, as_of_seq=seq)
                    assert answer(replica.partitions_grid, node.name, as_of_seq=seq) == past, (node.name, head, seq)

        for start in range(len(events) // 4, len(events), 7):
            moved(events[start : start + 7])
        state = primary.state
        live = next(
            ref
            for ref, uuid in state.canonical.items()
            if ref.startswith("agg/daily") and state.instances[uuid].state.name == "LIVE"
        )
        uuid = state.canonical[live]
        warned = pb.InstanceChecks(instance_uuid=uuid, results=[check("late_rows", False, blocking=False, late=4)])
        moved([envelope(pb.ChecksRequest(request_id="again", instance_uuid=uuid))])
        moved([envelope(pb.ChecksRerun(request_id="again", checks=warned))])
        nodes = primary.job_graph().nodes
        assert any(primary.partitions_summary(node.name).counts.get("warning") for node in nodes)
        moved([envelope(pb.PartitionTaint(partition_ref=live, reason="bad", only_this_ref=True))])
        # Its tainted instance dropped while a ref that sorts before it is wanted: the cell, found at its index
        # moved by the fresh ref spliced in, is looked up again.
        early = re.sub(r"date=[0-9-]+", "date=2000-01-01", live)
        drop = pb.InstanceRetention(drop_superseded_created_before_seq=db.log.head() + 2)
        moved([envelope(pb.WantCreate(want_id="early", partition_refs=[early])), envelope(drop)])
        assert compared > 50


def _w1_with_a_recheck_and_a_taint(retained: bool) -> list[pb.Event]:
    """The small W1 history, then a Live daily's checks answered again (warning: it stays canonical), another
    one tainted and, when `retained`, its tainted instance dropped: every kind of cell, each way one changes."""
    events = w1_history(SMALL_PLAN)
    state = BuildState()
    for seq, event in enumerate(events, start=1):
        state.apply(seq, event)
    rechecked, tainted = [
        ref
        for ref, uuid in state.canonical.items()
        if ref.startswith("agg/daily") and state.instances[uuid].state.name == "LIVE"
    ][:2]
    uuid = state.canonical[rechecked]
    warned = pb.InstanceChecks(instance_uuid=uuid, results=[check("late_rows", False, blocking=False, late=4)])
    return [
        *events,
        envelope(pb.ChecksRequest(request_id="again", instance_uuid=uuid)),
        envelope(pb.ChecksRerun(request_id="again", checks=warned)),
        envelope(pb.PartitionTaint(partition_ref=tainted, reason="bad", only_this_ref=True)),
        *([envelope(pb.InstanceRetention(drop_superseded_created_before_seq=len(events) + 4))] if retained else []),
    ]


def _check_filters(state: BuildState) -> list[GridFilters]:
    """A grid's check filters that find something in `state`: by each result its checks have, by a check's name,
    by both (none: it holds no checks)."""
    pairs = sorted(
        {
            (row[0], check_result_name(row[1], row[2], row[3]))
            for entries in state.check_results.values()
            for row in entries[-1][1]
        }
    )
    if not pairs:
        return []
    name, result = pairs[0]
    results = sorted({result for _, result in pairs})
    return [
        *(GridFilters(check_result=one) for one in results),
        GridFilters(check=name),
        GridFilters(check=name, check_result=result),
    ]


@pytest.mark.parametrize("name", [*(log.name for log in GOLDEN_LOGS), "w1", "w1 retained"])
def test_a_replicas_grids_as_of_every_seq_are_the_folding_servers(
    tmp_path: Path, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every job's grid and summary on a replica, as of every seq of the log, is the folding server's, and so is
    every grid filtered by a check; a cell and its checks come from the store's cells wherever its row says
    they held then, so only the refs whose cell changed after the seq asked are looked up in their records'
    rows (none as of the head)."""
    events = _w1_with_a_recheck_and_a_taint(name == "w1 retained") if name.startswith("w1") else read_events(name)
    looked_up: list[int] = []  # how many refs each look-up of a replica's in its records' rows was of
    counted, uncounted = _counting(stored.cell_states, looked_up), stored.cell_states
    monkeypatch.setattr(
        stored, "cell_states", lambda state, refs: (counted if stored.stored_of(state) else uncounted)(state, refs)
    )
    with Database.open(f"sqlite:///{tmp_path / 'g.db'}", auto_upgrade=True) as db:
        db.log.append(events)
        primary = Service(db, past_from_store=False)  # from its memory: the reference
        head = Projector(primary.live, db.changes).project()
        replica = Service(db, replica=True)
        folding = Service(db)  # a folding server that reads them from its store (the replica's code) once it can
        from_memory: list[int] = []  # the seqs it read as of in its memory
        in_memory = folding.live.read_as_of
        monkeypatch.setattr(folding.live, "read_as_of", lambda seq: from_memory.append(seq) or in_memory(seq))
        cells, filtered, seen = 0, 0, set()
        check_filters = _check_filters(primary.state)
        checks_read: list[str] = []  # the instances whose checks a filter looked up
        looked = jobs.checked
        monkeypatch.setattr(
            jobs, "checked", lambda results, uuid, *asked: checks_read.append(uuid) or looked(results, uuid, *asked)
        )
        for seq in range(head, -1, -1):
            graph = answer(primary.job_graph, as_of_seq=seq)
            assert answer(replica.job_graph, as_of_seq=seq) == graph, seq
            for node in graph.nodes if isinstance(graph, JobGraphOut) else []:
                grid = answer(primary.partitions_grid, node.name, as_of_seq=seq)
                assert answer(replica.partitions_grid, node.name, as_of_seq=seq) == grid, (node.name, seq)
                assert answer(folding.partitions_grid, node.name, as_of_seq=seq) == grid, (node.name, seq)
                summary = answer(primary.partitions_summary, node.name, as_of_seq=seq)
                assert answer(replica.partitions_summary, node.name, as_of_seq=seq) == summary, (node.name, seq)
                assert answer(folding.partitions_summary, node.name, as_of_seq=seq) == summary, (node.name, seq)
                if isinstance(grid, GridView):
                    cells += 2 * len(grid.cells)
                    seen.update(cell.state for cell in grid.cells)
                for filters in check_filters:
                    grid = answer(primary.partitions_grid, node.name, as_of_seq=seq, filters=filters)
                    checks_read.clear()
                    assert answer(replica.partitions_grid, node.name, as_of_seq=seq, filters=filters) == grid, (
                        node.name,
                        seq,
                        filters,
                    )
                    assert seq < head or not checks_read, "as of the head every check filter reads the store's cells"
                    assert answer(folding.partitions_grid, node.name, as_of_seq=seq, filters=filters) == grid
                    filtered += len(grid.cells) if isinstance(grid, GridView) else 0
            if seq == head:
                assert looked_up == [], "as of the head every cell is the store's"
                for node in graph.nodes if isinstance(graph, JobGraphOut) else []:
                    for filters in check_filters:  # and now
                        now = answer(primary.partitions_grid, node.name, filters=filters)
                        assert answer(folding.partitions_grid, node.name, filters=filters) == now
    assert not from_memory, "a folding server's grids of the past come from its store once it has their seq"
    if name in ("v1", "w1", "w1 retained"):  # long histories: most cells held from a seq before the one asked
        assert cells > 1000 and sum(looked_up) < cells / 2
    assert filtered > 0 or not check_filters
    if name == "w1":  # retention drops the tainted instance: then its successor is plain Missing at every seq
        assert {"live", "missing", "warning", "tainted"} <= seen


def test_a_replicas_check_filters_follow_what_each_ref_serves(tmp_path: Path) -> None:
    """The outcomes log (a daily checked, then stale and still serving while its successor is Missing, then
    withdrawn; a stale one serving while its successor fails, then goes Live) projected one event at a time:
    at each watermark, the replica's grids filtered by each check result, as of every seq up to it, are the
    folding server's (a filter reads the instance readers get, so a cell's row holds the served one's checks)."""
    events = read_events("outcomes")
    filters = [GridFilters(check_result=result) for result in ("passed", "failed", "warning")]
    with Database.open(f"sqlite:///{tmp_path / 'o.db'}", auto_upgrade=True) as db:
        primary = Service(db)
        projector = Projector(primary.live, db.changes)
        replica = Service(db, replica=True)
        served_with_checks = 0
        for event in events:
            db.log.append([event])
            primary.refresh()
            head = projector.project()
            replica.refresh()
            state = primary.state
            served_with_checks += any(uuid in state.check_results for uuid in state.serving.values())
            for seq in range(head, -1, -1):
                graph = answer(primary.job_graph, as_of_seq=seq)
                for node in graph.nodes if isinstance(graph, JobGraphOut) else []:
                    for one in filters:
                        grid = answer(primary.partitions_grid, node.name, as_of_seq=seq, filters=one)
                        said = answer(replica.partitions_grid, node.name, as_of_seq=seq, filters=one)
                        assert said == grid, (head, seq, node.name, one)
        assert served_with_checks > 0
