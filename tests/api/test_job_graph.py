"""The job graph drawn from the graph's declarations and, with no graph served, from the log (issue 36, item 3).

Real SQLite logs served by a real uvicorn (`serverkit`), the web pages through the same app:
- on an empty log, a flights-like graph (a source, a daily job per carrier, a monthly job over its month's
  dailies; checks, reactions, a schedule) and the W1 example (`examples/clicks/pipeline.py`, its weekly's
  isoweek a registered field type, its inputs bound to a day range) give every declared edge, check, reaction
  and schedule, and the page lists them;
- with no graph, the W1 history of `gridkit` gives the jobs its runs name, the data they read and the edges,
  as of any seq (checked against the runs and partitions the API lists), and `/jobs/NAME` answers 200;
- each job node counts its stale Live instances as `GET /jobs/{job}/stale` does, now and as of a seq.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import pytest

from partbuild.api.service import Service
from partbuild.orchestrator.checks import Check, CheckOutcome, row_count_at_least
from partbuild.orchestrator.graph import Graph, Job, Partition, load_graph
from partbuild.orchestrator.loop import Orchestrator
from partbuild.orchestrator.reactions import on_code_change, on_upstream_change
from partbuild.orchestrator.schedules import Schedule
from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.database import Database
from partbuild.state.log.events import envelope, manual

from gridkit import grid_graph, write_history
from httpkit import ok, problem, walk
from serverkit import ApiServer, graphless_api_server, serve_service

GRAPH_FILE = Path(__file__).resolve().parents[1] / "data" / "graphs" / "versioned.py"


def flights_like(root: Path) -> Graph:
    """examples/flights with checks, reactions and two schedules declared."""
    from examples.flights.pipeline import build_graph

    flights = build_graph(root)
    split, monthly = flights.jobs["split_by_carrier"], flights.jobs["monthly_delays"]
    on_time = Check("on_time_share", lambda _: CheckOutcome(True, "fine"), blocking=False)
    jobs = [
        replace(split, checks=[row_count_at_least(1)], reactions=[on_upstream_change(dt.timedelta(seconds=30))]),
        replace(monthly, checks=[row_count_at_least(1, name="not_empty"), on_time], reactions=[on_code_change()]),
    ]
    schedules = [
        Schedule("nightly_months", lambda tick: [], cron="0 3 * * *", timezone="Europe/Paris"),
        Schedule("often", lambda tick: [], every=dt.timedelta(minutes=5)),
    ]
    return Graph(jobs, flights.sources.values(), schedules)


@pytest.fixture
def empty_flights(sqlite_url: str, tmp_path: Path) -> Iterator[ApiServer]:
    with (
        Database.open(sqlite_url, auto_upgrade=True) as db,
        serve_service(Service(db, graph=flights_like(tmp_path))) as api,
    ):
        yield api


def pairs(graph: dict[str, Any]) -> dict[tuple[str, str], tuple[bool, bool]]:
    return {(e["input"], e["output"]): (e["declared"], e["in_log"]) for e in graph["edges"]}


def test_an_empty_log_shows_every_declared_edge_check_reaction_and_schedule(empty_flights: ApiServer) -> None:
    client = empty_flights.client
    graph = ok(client.get("/api/v1/graph"))
    assert graph["graph_served"] is True and graph["as_of_seq"] == 0
    nodes = {n["name"]: (n["kind"], n["total"], n["stale"]) for n in graph["nodes"]}
    assert nodes == {
        "raw_flights": ("source", 0, None),
        "split_by_carrier": ("job", 0, 0),
        "monthly_delays": ("job", 0, 0),
    }
    assert pairs(graph) == {
        ("raw_flights", "split_by_carrier"): (True, False),
        ("split_by_carrier", "monthly_delays"): (True, False),
    }
    assert [(c["job"], c["name"], c["blocking"]) for c in graph["checks"]] == [
        ("split_by_carrier", "row_count_at_least_1", True),
        ("monthly_delays", "not_empty", True),
        ("monthly_delays", "on_time_share", False),
    ]
    assert [(r["job"], r["kind"], r["debounce_ms"]) for r in graph["reactions"]] == [
        ("split_by_carrier", "on_upstream_change", 30_000),
        ("monthly_delays", "on_code_change", 0),
    ]
    assert [(s["name"], s["when"], s["declared"], s["ticks"]) for s in graph["schedules"]] == [
        ("nightly_months", "cron 0 3 * * * Europe/Paris", True, 0),
        ("often", "every 0:05:00", True, 0),
    ]
    # The page lists the same; its drawing reads the same answer.
    page = client.get("/jobs")
    assert page.status_code == 200 and 'data-testid="no-graph-served"' not in page.text
    shown = set(
        re.findall(r'data-testid="job-edge" data-input="(\w+)" data-output="(\w+)" data-declared="true"', page.text)
    )
    assert shown == set(pairs(graph))
    assert re.findall(r'data-testid="node-check" data-name="(\w+)" data-blocking="(\w+)"', page.text) == [
        ("row_count_at_least_1", "true"),
        ("not_empty", "true"),
        ("on_time_share", "false"),
    ]
    assert re.findall(r'data-testid="node-reaction" data-kind="(\w+)"', page.text) == [
        "on_upstream_change",
        "on_code_change",
    ]
    assert re.findall(r'data-testid="graph-schedule" data-name="(\w+)"', page.text) == ["nightly_months", "often"]
    assert re.findall(r'data-testid="node-stale" data-stale="(\d+)"', page.text) == ["0", "0"]


def test_the_w1_example_on_an_empty_log_has_both_edges(sqlite_url: str, tmp_path: Path) -> None:
    """Its weekly's inputs name only days of the graph's range: the sample week is taken from the range's start
    the inputs function holds (today is outside it), and its isoweek field from the week's rendering."""
    from examples.clicks.pipeline import build_graph

    graph = build_graph(tmp_path, days=28, schedule=True)
    with Database.open(sqlite_url, auto_upgrade=True) as db, serve_service(Service(db, graph=graph)) as api:
        found = ok(api.client.get("/api/v1/graph"))
    assert pairs(found) == {
        ("raw_clicks", "daily_clicks"): (True, False),
        ("daily_clicks", "weekly_clicks"): (True, False),
    }
    assert {(c["job"], c["name"]) for c in found["checks"]} == {
        ("daily_clicks", "daily_not_empty"),
        ("weekly_clicks", "weekly_total_matches_dailies"),
    }
    assert [(r["job"], r["kind"], r["debounce_ms"]) for r in found["reactions"]] == [
        ("daily_clicks", "on_upstream_change", 10_000),
        ("weekly_clicks", "on_upstream_change", 10_000),
    ]
    assert [(s["name"], s["when"]) for s in found["schedules"]] == [("nightly_weeklies", "cron 30 2 * * * UTC")]


def test_an_inputs_function_that_raises_draws_no_edge_and_breaks_nothing(sqlite_url: str) -> None:
    def refuses(partition: Partition) -> list[str]:
        raise RuntimeError(f"no inputs for {partition.ref}")

    def reads_a(partition: Partition) -> list[str]:
        return [f"a/n={partition['n']}", "nobody/makes/this"]

    jobs = [
        Job("a", ["a/n={n:int}"], run=lambda ctx: None, code_version="1"),
        Job("b", ["b/n={n:int}"], run=lambda ctx: None, inputs=reads_a, code_version="1"),
        Job("c", ["c/n={n:int}"], run=lambda ctx: None, inputs=refuses, code_version="1"),
    ]
    with Database.open(sqlite_url, auto_upgrade=True) as db, serve_service(Service(db, graph=Graph(jobs))) as api:
        found = ok(api.client.get("/api/v1/graph"))
    assert pairs(found) == {("a", "b"): (True, False)}
    assert [n["name"] for n in found["nodes"]] == ["a", "b", "c"]


@pytest.fixture
def history(sqlite_url: str) -> Iterator[tuple[ApiServer, int]]:
    head = write_history(sqlite_url)
    with graphless_api_server(sqlite_url) as api:
        yield api, head


def runs_by_job(client: httpx.Client) -> dict[str, list[dict[str, Any]]]:
    """Every job run the API lists, by job label."""
    found: dict[str, list[dict[str, Any]]] = {}
    for run in (item for page in walk(client, "/api/v1/job-runs", 1000) for item in page):
        found.setdefault(run["job_label"], []).append(run)
    return found


def test_without_a_graph_the_log_gives_the_jobs_and_edges(history: tuple[ApiServer, int]) -> None:
    api, _ = history
    client = api.client
    graph = ok(client.get("/api/v1/graph"))
    assert graph["graph_served"] is False and graph["checks"] == graph["reactions"] == []
    runs = runs_by_job(client)
    jobs = {n["name"] for n in graph["nodes"] if n["kind"] == "job"}
    assert jobs == set(runs) == {"daily", "weekly"}
    assert {n["name"] for n in graph["nodes"] if n["kind"] == "source"} == {"raw/clicks"}
    assert pairs(graph) == {("raw/clicks", "daily"): (False, True), ("daily", "weekly"): (False, True)}
    for node in graph["nodes"]:
        assert node["note"] and "no graph is served" in node["note"] and node["stale"] is None
        if node["kind"] == "job":  # reachable by name, as on the page; its counts are its runs' refs
            assert ok(client.get(f"/api/v1/jobs/{node['name']}/partitions/summary")) == node
    daily_refs = {ref for run in runs["daily"] for ref in run["refs"]}
    assert graph["nodes"][[n["name"] for n in graph["nodes"]].index("daily")]["total"] == len(daily_refs)
    problem(client.get("/api/v1/jobs/nope/partitions/summary"), 404, "serves no graph")
    # The pages: the grid of a job the log knows, and the graph page saying no graph is served.
    page = client.get("/jobs/daily")
    assert page.status_code == 200 and page.text.count('data-testid="grid-cell"') >= len(daily_refs)
    graph_page = client.get("/jobs")
    assert 'data-testid="no-graph-served"' in graph_page.text
    assert 'data-testid="job-edge" data-input="raw/clicks" data-output="daily"' in graph_page.text
    assert client.get("/jobs/nope").status_code == 404


def test_without_a_graph_as_of_a_seq_lists_what_the_log_knew_then(history: tuple[ApiServer, int]) -> None:
    api, head = history
    client = api.client
    first_weekly = min(run["created_seq"] for run in runs_by_job(client)["weekly"])
    succeeded = sorted(r["updated_seq"] for r in runs_by_job(client)["weekly"] if r["state"] == "succeeded")
    before = ok(client.get("/api/v1/graph", params={"as_of_seq": first_weekly - 1}))
    assert before["as_of_seq"] == first_weekly - 1
    assert "weekly" not in {n["name"] for n in before["nodes"]}
    problem(client.get("/api/v1/jobs/weekly/partitions/summary", params={"as_of_seq": first_weekly - 1}), 404)
    known = ok(client.get("/api/v1/graph", params={"as_of_seq": first_weekly}))
    assert "weekly" in {n["name"] for n in known["nodes"]}
    assert ("daily", "weekly") not in pairs(ok(client.get("/api/v1/graph", params={"as_of_seq": succeeded[0] - 1})))
    assert ("daily", "weekly") in pairs(ok(client.get("/api/v1/graph", params={"as_of_seq": succeeded[0]})))
    # Each node's counts as of a seq are those of its summary then; the grid page follows.
    for node in known["nodes"]:
        if node["kind"] == "job":
            then = ok(client.get(f"/api/v1/jobs/{node['name']}/partitions/summary", params={"as_of_seq": first_weekly}))
            assert then == node
    assert client.get("/jobs/weekly", params={"as_of": first_weekly}).status_code == 200
    problem(client.get("/api/v1/graph", params={"as_of_seq": head + 10}), 409)


def test_the_served_graph_as_of_a_seq_keeps_its_declarations(sqlite_url: str) -> None:
    head = write_history(sqlite_url)
    with Database.open(sqlite_url, auto_upgrade=True) as db, serve_service(Service(db, graph=grid_graph())) as api:
        now = ok(api.client.get("/api/v1/graph"))
        first = ok(api.client.get("/api/v1/graph", params={"as_of_seq": 1}))
        assert first["as_of_seq"] == 1 and now["as_of_seq"] == head
        assert set(pairs(first)) == set(pairs(now)) and all(flags == (True, False) for flags in pairs(first).values())
        assert all(flags == (True, True) for flags in pairs(now).values())
        assert sum(n["total"] for n in first["nodes"]) < sum(n["total"] for n in now["nodes"])


def versioned(monkeypatch: pytest.MonkeyPatch, version: str) -> Graph:
    monkeypatch.setenv("VERSIONED_CODE_VERSION", version)
    return load_graph(GRAPH_FILE)


def test_each_job_node_counts_its_stale_instances(
    sqlite_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Three weeklies built at v1, served at v2: the weekly node counts 3 stale, as the stale list does; after one
    is tainted, 2 now and still 3 as of before."""
    weeklies = [f"weekly/week={week}" for week in (1, 2, 3)]
    with Database.open(sqlite_url, auto_upgrade=True) as db:
        db.log.append([envelope(pb.WantCreate(want_id="w", partition_refs=weeklies), source=manual("ann"))])
        orchestrator = Orchestrator(db, versioned(monkeypatch, "v1"), warehouse=str(tmp_path / "wh"), spark=None)
        try:
            assert orchestrator.run_until_idle(timeout_s=60)
        finally:
            orchestrator.close()
        with serve_service(Service(db, graph=versioned(monkeypatch, "v2"))) as api:
            client = api.client
            stale = {n["name"]: n["stale"] for n in ok(client.get("/api/v1/graph"))["nodes"]}
            assert (
                stale
                == {"daily": 0, "weekly": ok(client.get("/api/v1/jobs/weekly/stale"))["stale_count"]}
                == {
                    "daily": 0,
                    "weekly": 3,
                }
            )
            assert ok(client.get("/api/v1/jobs/weekly/partitions/summary"))["stale"] == 3
            before = ok(client.get("/api/v1/graph"))["as_of_seq"]
            written = ok(client.post("/api/v1/partitions/taint", json={"ref": weeklies[0], "reason": "x"}), 201)
            after = {
                n["name"]: n["stale"]
                for n in ok(client.get("/api/v1/graph", params={"min_seq": written["seq"]}))["nodes"]
            }
            assert after == {"daily": 0, "weekly": 2}
            past = {
                n["name"]: n["stale"] for n in ok(client.get("/api/v1/graph", params={"as_of_seq": before}))["nodes"]
            }
            assert past == {"daily": 0, "weekly": 3}
            page = client.get("/jobs")
            assert re.findall(r'data-testid="node-stale" data-stale="(\d+)"', page.text) == ["0", "2"]


def test_graph_show_prints_the_declarations_and_says_when_no_graph_is_served(
    sqlite_url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from partbuild.api.cli import main

    write_history(sqlite_url)
    monkeypatch.setenv("VERSIONED_ON_CODE_CHANGE", "1")
    for extra in ([], ["--graph", str(GRAPH_FILE)]):
        with pytest.raises(SystemExit) as exited:
            main(["graph", "show", "--db", sqlite_url, *extra])
        assert exited.value.code in (0, None)
    note = "(no graph is served: jobs, sources and edges are what the log's runs show)\n"
    log_only, declared = capsys.readouterr().out.split(note)
    assert "raw/clicks -> daily" in log_only and "daily -> weekly" in log_only and "reaction:" not in log_only
    assert "daily -> weekly" in declared and "reaction: weekly: on_code_change (debounce 0 s)" in declared
    assert "raw/clicks" not in declared and "no graph is served" not in declared
