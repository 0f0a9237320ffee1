"""A read replica (`Service(replica=True)`, what `serve --replica` serves) over a real SQLite file.

It folds nothing: it reads the state store a folding server projected. Its web pages list what the
folding server's list (the same links, from the store's index); a write is refused with a 503 that says
where to send it, and nothing is written; a read whose `min_seq` the log has but the store has not yet
waits, then says to try again (503, Retry-After), and answers once the store gets there; its metrics are
the store's counts. (Every API read as of every seq: tests/api/test_time_travel.py.)
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from partbuild.api.app import create_app
from partbuild.api.errors import ApiError
from partbuild.api.models.jobs import JobGraphOut
from partbuild.api.service import Service, jobs
from partbuild.api.service.jobs import GridView
from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.database import Database
from partbuild.state.log.events import envelope
from partbuild.state.store.projector import Projector
from partbuild.state.store.reader import ReadReplica, StoreReader

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
        primary = Service(db)
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
    """Every read of a replica is a state of its own: its summary of a job, which looks up each of the job's
    refs (a row each, beyond what one watermark's reads share), is kept for the watermark it was read at (a
    second summary looks up nothing); once the store moves, only the refs its changes name since are looked
    up again, and the counts are the folding server's."""
    graph = sides.primary.job_graph()
    node = max(graph.nodes, key=lambda node: answer(sides.primary.partitions_summary, node.name).total)
    read: list[int] = []  # how many refs each look-up was of
    looked_up = jobs.cell_states
    monkeypatch.setattr(jobs, "cell_states", lambda state, refs: read.append(len(refs)) or looked_up(state, refs))
    first = sides.replica.partitions_summary(node.name)
    assert read == [first.total], "the first summary looks every ref up"
    read.clear()
    assert sides.replica.partitions_summary(node.name) == first and not read
    grid = sides.primary.partitions_grid(node.name)
    assert isinstance(grid, GridView)
    live = next(cell.first for cell in grid.cells if cell.state == "live")
    sides.db.log.append([envelope(pb.PartitionTaint(partition_ref=live, reason="t", only_this_ref=True))])
    sides.primary.refresh()
    Projector(sides.primary.live, sides.db.changes).project()
    sides.replica.refresh()
    moved = sides.replica.partitions_summary(node.name)
    assert read == [1] and moved.as_of_seq > first.as_of_seq  # the tainted ref alone
    assert moved.counts["live"] == first.counts["live"] - 1
    assert moved == sides.primary.partitions_summary(node.name)


def test_a_replicas_grids_follow_the_store_as_it_moves(tmp_path: Path) -> None:
    """A history projected a slice at a time, then a Live daily's checks answered again (warning), the daily
    tainted and its tainted instance dropped by retention: after each, every job's summary and grid on the
    replica, kept from the last watermark and brought forward by the store's changes, are the folding
    server's."""
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
        moved([envelope(pb.InstanceRetention(drop_superseded_created_before_seq=db.log.head() + 1))])
        assert compared > 50
