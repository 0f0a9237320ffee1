"""The job graph of a flights-like example on an empty database, in a real headless Chromium (issue 36, item 3).

No Spark, no run: the graph is examples/flights (a source, a daily job per carrier, a monthly job over its
month's dailies) with checks, reactions and a schedule declared, served over a fresh SQLite log. The page draws
every declared edge (dashed: no partition shows it yet), each job's checks and reactions on its node, and lists
the schedule; without a graph, the W1 history's jobs and edges are drawn from the log. `browserkit` fails a test
on any console error or CSP violation.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import expect

from partbuild.api.service import Service
from partbuild.orchestrator.checks import Check, CheckOutcome, row_count_at_least
from partbuild.orchestrator.graph import Graph
from partbuild.orchestrator.reactions import on_code_change, on_upstream_change
from partbuild.orchestrator.schedules import Schedule
from partbuild.state.database import Database

from browserkit import Tab, visit
from gridkit import write_history
from serverkit import ApiServer, graphless_api_server, serve_service

pytestmark = pytest.mark.browser
pytest_plugins = ["browserkit"]  # the `browser` and `open_tab` fixtures


def _flights_like(root: Path) -> Graph:
    from examples.flights.pipeline import build_graph

    flights = build_graph(root)
    split, monthly = flights.jobs["split_by_carrier"], flights.jobs["monthly_delays"]
    warns = Check("on_time_share", lambda _: CheckOutcome(True, "fine"), blocking=False)
    jobs = [
        replace(split, checks=[row_count_at_least(1)], reactions=[on_upstream_change(dt.timedelta(seconds=30))]),
        replace(monthly, checks=[warns], reactions=[on_code_change()]),
    ]
    return Graph(jobs, flights.sources.values(), [Schedule("nightly_months", lambda tick: [], cron="0 3 * * *")])


@pytest.fixture(scope="module")
def empty_flights(browser: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApiServer]:
    folder: Path = tmp_path_factory.mktemp("job-graph-browser")
    url = f"sqlite:///{folder / 'partbuild.db'}"
    with Database.open(url, auto_upgrade=True) as db, serve_service(Service(db, graph=_flights_like(folder))) as api:
        yield api


def _drawn(tab: Tab) -> tuple[dict[str, dict[str, str]], dict[tuple[str, str], tuple[str, str]]]:
    """The nodes (name -> their data attributes) and edges ((input, output) -> (declared, in log)) drawn."""
    expect(tab.page.locator("#lineage-status")).to_have_attribute("data-state", "drawn")
    nodes = tab.page.locator("#lineage-graph [data-testid=lineage-node]").evaluate_all(
        "(els) => els.map((e) => [e.dataset.uuid, Object.assign({}, e.dataset)])"
    )
    edges = tab.page.locator("#lineage-graph [data-testid=lineage-edge]").evaluate_all(
        "(els) => els.map((e) => [e.dataset.input, e.dataset.output, e.dataset.declared, e.dataset.inLog])"
    )
    return dict(nodes), {(a, b): (declared, in_log) for a, b, declared, in_log in edges}


def test_the_empty_flights_graph_shows_every_declared_edge_check_reaction_and_schedule(
    empty_flights: ApiServer, open_tab: Callable[[str], Tab]
) -> None:
    tab = open_tab(empty_flights.url)
    visit(tab, "/")
    tab.page.locator("[data-testid=nav-jobs]").click()
    nodes, edges = _drawn(tab)
    assert sorted(nodes) == ["monthly_delays", "raw_flights", "split_by_carrier"]
    assert edges == {
        ("raw_flights", "split_by_carrier"): ("true", "false"),
        ("split_by_carrier", "monthly_delays"): ("true", "false"),
    }
    dashed = tab.page.locator("#lineage-graph [data-testid=lineage-edge][stroke-dasharray]")
    expect(dashed).to_have_count(2)
    assert nodes["split_by_carrier"]["checks"] == "row_count_at_least_1"
    assert nodes["split_by_carrier"]["reactions"] == "upstream change 30s"
    assert nodes["monthly_delays"]["checks"] == "on_time_share (warn)"
    assert nodes["monthly_delays"]["reactions"] == "code change"
    assert (nodes["split_by_carrier"]["stale"], nodes["raw_flights"]["stale"]) == ("0", "")
    declarations = tab.page.locator("[data-uuid=monthly_delays] [data-testid=job-declarations]")
    expect(declarations).to_have_text("checks: on_time_share (warn) · reacts: code change")
    schedule = tab.page.locator("[data-testid=graph-schedule][data-name=nightly_months]")
    expect(schedule).to_contain_text("cron 0 3 * * * UTC")
    tab.page.locator("#lineage-graph [data-testid=lineage-node][data-uuid=monthly_delays] a").click()
    expect(tab.page.locator("[data-testid=grid-legend]")).to_be_attached()
    assert tab.page.url.endswith("/jobs/monthly_delays")


def test_without_a_graph_the_log_draws_the_jobs_and_edges(
    browser: Any, tmp_path: Path, open_tab: Callable[[str], Tab]
) -> None:
    url = f"sqlite:///{tmp_path / 'partbuild.db'}"
    write_history(url)
    with graphless_api_server(url) as api:
        tab = open_tab(api.url)
        visit(tab, "/jobs")
        expect(tab.page.locator("[data-testid=no-graph-served]")).to_be_visible()
        nodes, edges = _drawn(tab)
        assert sorted(nodes) == ["daily", "raw/clicks", "weekly"]
        assert edges == {("raw/clicks", "daily"): ("false", "true"), ("daily", "weekly"): ("false", "true")}
        tab.page.locator("#lineage-graph [data-testid=lineage-node][data-uuid=weekly] a").click()
        expect(tab.page.locator("[data-testid=grid-legend]")).to_be_attached()
        assert tab.page.url.endswith("/jobs/weekly")
