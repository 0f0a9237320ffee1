"""Jobs of the served graph over HTTP and the service's grid: partition counts by state, the job graph.

The log is the W1 history of `timetravelkit.w1_history` (taints, permanent failures, check warnings),
served with `gridkit.grid_graph()` (site 0's raw, daily and weekly patterns) by a real uvicorn. Counts
are checked against what `GET /api/v1/partitions` reports of each ref, now and as of earlier seqs.
"""

from __future__ import annotations

import re
from bisect import bisect_left
from collections import Counter
from collections.abc import Iterable, Iterator
from typing import Any

import httpx
import pytest

from partbuild.api.service import jobs as jobs_module
from partbuild.api.service.jobs import _counted_cells, _refreshed
from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.database import Database
from partbuild.state.fold import touched as touched_module
from partbuild.state.fold.build_state import BuildState
from partbuild.state.fold.touched import Touched, changed_after
from partbuild.state.log.events import envelope, manual
from partbuild.state.queries.cells import cell_state
from partbuild.state.queries.listing import ListingIndex

from gridkit import DAILY, TAINTED, grid_graph, grid_service, write_history
from httpkit import ok, problem
from serverkit import ApiServer, serve_service
from timetravelkit import PLAN, check, w1_history

DAILY_PREFIX = "agg/daily_clicks/site=0/"


@pytest.fixture
def served(sqlite_url: str) -> Iterator[ApiServer]:
    write_history(sqlite_url)
    from partbuild.api.service import Service

    with Database.open(sqlite_url, auto_upgrade=True) as db, serve_service(Service(db, graph=grid_graph())) as api:
        yield api


def listed_states(client: httpx.Client, prefix: str, **params: Any) -> dict[str, str]:
    """Each ref under `prefix` and its canonical instance's state, as the partitions list reports them."""
    body = ok(client.get("/api/v1/partitions", params={"prefix": prefix, "limit": 1000, **params}))
    assert body["next_cursor"] is None
    return {item["ref"]: item["state"] for item in body["items"]}


def expected_counts(items: dict[str, str], warned: set[str], tainted: set[str]) -> dict[str, int]:
    """The grid's states of what the partitions list reports (`warned`: their checks warned; `tainted`: their
    Missing instance replaced a tainted one)."""
    return dict(
        Counter(
            "warning" if ref in warned and state == "live" else "tainted" if ref in tainted else state
            for ref, state in items.items()
        )
    )


def tainted_refs(client: httpx.Client, items: dict[str, str], **params: Any) -> set[str]:
    """Refs whose Missing canonical instance replaced a tainted one (their history says so)."""
    found = set()
    for ref, state in items.items():
        if state == "missing":
            history = ok(client.get(f"/api/v1/partitions/history/{ref}", params=params))
            if len(history) > 1 and history[1]["state"] == "tainted":
                found.add(ref)
    return found


def warned_refs(client: httpx.Client, prefix: str, **params: Any) -> set[str]:
    """Refs whose canonical instance is Live and whose latest checks warned (or errored)."""
    body = ok(client.get("/api/v1/partitions", params={"prefix": prefix, "limit": 1000, **params}))
    return {item["ref"] for item in body["items"] if any(c["result"] in ("warning", "errored") for c in item["checks"])}


def test_summary_counts_what_the_partitions_list_reports(served: ApiServer) -> None:
    client = served.client
    summary = ok(client.get("/api/v1/jobs/daily_clicks/partitions/summary"))
    states = listed_states(client, DAILY_PREFIX)
    assert summary["kind"] == "job" and summary["patterns"] == ["agg/daily_clicks/site=0/date={date:date}"]
    assert summary["total"] == len(states) > 56  # 8 weeks of dailies and more
    tainted = tainted_refs(client, states)
    assert tainted == {TAINTED}
    assert summary["counts"] == expected_counts(states, warned_refs(client, DAILY_PREFIX), tainted)
    assert {"live", "tainted", "failed", "upstream_building", "warning"} <= set(summary["counts"])
    # As of an earlier seq: the state replayed there, only the refs known then.
    half = summary["as_of_seq"] // 2
    past = ok(client.get("/api/v1/jobs/daily_clicks/partitions/summary", params={"as_of_seq": half}))
    then = listed_states(client, DAILY_PREFIX, as_of_seq=half)
    assert past["as_of_seq"] == half and past["total"] == len(then) < len(states)
    warned_then, tainted_then = (
        warned_refs(client, DAILY_PREFIX, as_of_seq=half),
        tainted_refs(client, then, as_of_seq=half),
    )
    assert past["counts"] == expected_counts(then, warned_then, tainted_then)
    source = ok(client.get("/api/v1/jobs/raw_clicks/partitions/summary"))
    assert source["kind"] == "source" and source["total"] == len(listed_states(client, "raw/clicks/site=0/"))
    problem(client.get("/api/v1/jobs/nope/partitions/summary"), 404, "no job or source dataset named 'nope'")
    problem(client.get("/api/v1/jobs/daily_clicks/partitions/summary", params={"as_of_seq": 10**9}), 409)


def test_the_graph_has_three_nodes_two_edges_and_the_summaries_counts(served: ApiServer) -> None:
    client = served.client
    graph = ok(client.get("/api/v1/graph"))
    nodes = {node["name"]: node for node in graph["nodes"]}
    assert sorted(nodes) == ["daily_clicks", "raw_clicks", "weekly_clicks"]
    edges = {(edge["input"], edge["output"]) for edge in graph["edges"]}
    assert edges == {("raw_clicks", "daily_clicks"), ("daily_clicks", "weekly_clicks")}
    for name, node in nodes.items():
        assert node == ok(client.get(f"/api/v1/jobs/{name}/partitions/summary"))
    assert all(edge["declared"] and edge["in_log"] for edge in graph["edges"])
    early = ok(client.get("/api/v1/graph", params={"as_of_seq": 1}))  # the declared edges; none the log shows
    assert {(e["input"], e["output"], e["declared"], e["in_log"]) for e in early["edges"]} == {
        (a, b, True, False) for a, b in edges
    }
    assert all(node["total"] <= 1 for node in early["nodes"])


def test_a_server_without_a_graph_says_so(api_server: ApiServer) -> None:
    """Its job graph is the log's (empty here), and a job the log does not know is a 404 that says why."""
    assert ok(api_server.client.get("/api/v1/graph"))["graph_served"] is False
    problem(api_server.client.get("/api/v1/jobs/x/partitions/summary"), 404, "serves no graph")


def test_the_grid_shows_each_ref_in_its_state_by_day_and_follows_time_travel(sqlite_url: str) -> None:
    head = write_history(sqlite_url)
    with grid_service(sqlite_url) as service:
        view = service.partitions_grid("daily_clicks")
        days = [day for month in view.months or [] for day in month.days]
        with service.reading() as state:
            known = {ref: cell_state(state, ref) for ref in service.listing.refs() if ref.startswith(DAILY_PREFIX)}
        assert {ref: s for _, s, ref in days if ref} == known
        assert [day for day, _, _ in days] == sorted(day for day, _, _ in days)  # every day, in order
        assert {m.month for m in view.months or []} == {1, 2, 3}
        assert [c.first for c in view.cells] == sorted(known)  # they fit: one cell per ref
        assert view.summary.total == len(known) == sum(view.summary.counts.values())
        assert {"tainted", "failed"} <= set(view.summary.counts)
        # A key range and a state filter.
        first, last = sorted(known)[7], sorted(known)[13]
        ranged = service.partitions_grid("daily_clicks", first, last)
        assert [c.first for c in ranged.cells] == sorted(known)[7:14]
        live = service.partitions_grid("daily_clicks", state_filter="live")
        assert {c.state for c in live.cells} == {"live"} and live.months is None
        # As of an earlier seq the grid shows only what was known then, in its state then.
        past = service.partitions_grid("daily_clicks", as_of_seq=head // 2)
        with service.reading(head // 2) as state:
            then = {ref: cell_state(state, ref) for ref in known}
        assert {c.first: c.state for c in past.cells} == {ref: s for ref, s in then.items() if s is not None}
        with pytest.raises(Exception, match="state must be one of"):
            service.partitions_grid("daily_clicks", state_filter="nope")


# (what the fold touched is tracked, drained every n events, kept links, a grid brought forward every m events)
FOLLOWING = {
    "scanned": (False, 0, 0, 1),  # no record of what the fold touched: every ref's instance looked at
    "touched": (True, 3, 32, 5),  # a projector drains it; each refresh reads two or three kept records
    "chain cut": (True, 2, 1, 5),  # the kept records do not reach back: scanned, then touched again
}


@pytest.mark.parametrize("following", FOLLOWING, ids=list(FOLLOWING))
def test_the_live_cells_of_each_head_follow_from_the_last_ones_as_a_fresh_pass_finds_them(
    following: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Event by event through the W1 history (refs added, moves, taints, retention, check warnings) and a warning
    found by checks run again: the cells brought forward from the last head equal a fresh pass's, whether what
    moved is found from what the fold touched since or by a pass over every ref's instance."""
    tracked, drain_every, kept_links, follow_every = FOLLOWING[following]
    monkeypatch.setattr(touched_module, "KEPT_LINKS", kept_links)
    answered: Counter[bool] = Counter()

    def counted(touched: Touched | None, seq: int) -> tuple[set[str], set[str]] | None:
        found = changed_after(touched, seq)
        answered[found is not None] += 1
        return found

    monkeypatch.setattr(jobs_module, "changed_after", counted)
    graph, state, listing = grid_graph(), BuildState(strict=True), ListingIndex()
    if tracked:
        state.touched = Touched(0)
    patterns = [pattern for job in graph.jobs.values() for pattern in job.outputs]
    last: dict[str, Any] = {}
    refreshed = follows = 0

    def follow() -> None:
        nonlocal refreshed, follows
        follows += 1
        if follows % 2:  # the listing index lags a fold behind at times: refs come in after their first seq
            listing.update(state)
        for pattern in patterns:
            refs = listing.refs_matching(pattern.template, pattern.prefix, pattern.match)
            fresh = _counted_cells(state, refs)
            before = last.get(pattern.template)
            brought = None
            if before is not None:  # the refs added as the listing index knows them (or, unknown, compared)
                brought = _refreshed(before, state, refs, listing.added_to(pattern.template, before.refs))
            if brought is not None:
                refreshed += 1
                assert (brought.cells, brought.starts, brought.counts) == (fresh.cells, fresh.starts, fresh.counts)
            last[pattern.template] = brought or fresh

    def folded(events: Iterable[pb.Event], must_apply: bool = True) -> None:
        for event in events:
            seq = state.head_seq + 1
            reason = state.apply(seq, event)
            assert reason is None or not must_apply, reason
            if tracked and seq % drain_every == 0:  # a projector's pass
                state.touched = state.touched.after(seq, len(state.dropped_changes))  # type: ignore[union-attr]
            if seq % follow_every == 0:
                follow()

    folded(w1_history(PLAN), must_apply=False)
    follow()
    live = next(
        ref
        for ref, uuid in state.canonical.items()
        if ref.startswith(DAILY_PREFIX) and state.instances[uuid].state.name == "LIVE"
    )
    uuid = state.canonical[live]
    warned = pb.InstanceChecks(instance_uuid=uuid, results=[check("late_rows", False, blocking=False, late=4)])
    folded([envelope(pb.ChecksRequest(request_id="again", instance_uuid=uuid))])
    folded([envelope(pb.ChecksRerun(request_id="again", checks=warned))])
    follow()
    assert last[DAILY].cells[bisect_left(last[DAILY].refs, live)] == (live, "warning")
    # Tainted (its Missing successor not rebuilt), then its tainted instance dropped by retention.
    taint = pb.PartitionTaint(partition_ref=live, reason="bad", only_this_ref=True)
    dropped = pb.InstanceRetention(drop_superseded_created_before_seq=state.head_seq + 2)
    # The drop comes with a ref wanted that sorts before the tainted one: the tainted cell, found at its index
    # moved by the fresh ref spliced in, is looked up again.
    early = pb.WantCreate(want_id="early", partition_refs=[re.sub(r"date=[0-9-]+", "date=2000-01-01", live)])
    for payloads, shown in (([taint], "tainted"), ([early, dropped], "missing")):  # nothing says it was tainted
        folded([envelope(payload) for payload in payloads])
        follow()
        assert last[DAILY].cells[bisect_left(last[DAILY].refs, live)] == (live, shown)
    assert refreshed > len(patterns) * follows // 2  # most heads were brought forward, not passed afresh
    if tracked:  # what moved was found from what the fold touched (and, with the chain cut, by scans too)
        assert answered[True] > 0 and (answered[False] > 0) == (following == "chain cut")
    else:
        assert answered == Counter({False: answered[False]}) and answered[False] > 0


def test_a_served_grid_brings_its_cells_forward_over_the_listing_index_own_list(sqlite_url: str) -> None:
    head = write_history(sqlite_url)
    new_ref = "agg/daily_clicks/site=0/date=2027-01-01"
    with grid_service(sqlite_url) as service:
        service.partitions_summary("daily_clicks", min_seq=head)
        with Database.open(sqlite_url) as db:
            db.log.append([envelope(pb.WantCreate(want_id="later", partition_refs=[new_ref]), source=manual("ann"))])
        summary = service.partitions_summary("daily_clicks", min_seq=head + 1)
        cells = service.__dict__["_cells_cache"]["daily_clicks"]
        pattern = grid_graph().jobs["daily_clicks"].outputs[0]
        assert cells.refs is service.listing.refs_matching(pattern.template, pattern.prefix, pattern.match)
        assert (cells.seq, cells.cells[-1]) == (head + 1, (new_ref, "missing"))
        assert summary.counts["missing"] == sum(1 for _, found in cells.cells if found == "missing")
