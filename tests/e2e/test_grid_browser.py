"""The partition grid and the job graph (issue 26) in a real headless Chromium against a real server.

No Spark: the log is `gridkit`'s W1 history (`examples/clicks/simulate.py` plus failures, check warnings and
a taint), served with site 0's graph. The grid of the dailies shows, for every cell, the state the API
reports (a tainted and a failed one among them) and follows time travel; the job graph draws the three
nodes and two edges with their counts. `browserkit` fails a test on any console error or CSP violation.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import expect

from partbuild.api.service import Service
from partbuild.state.database import Database

from browserkit import Tab, visit
from gridkit import TAINTED, grid_graph, write_history
from serverkit import ApiServer, serve_service

pytestmark = pytest.mark.browser
pytest_plugins = ["browserkit"]  # the `browser` and `open_tab` fixtures


@dataclass
class World:
    api: ApiServer
    head: int

    def get(self, path: str, **params: Any) -> Any:
        response = self.api.client.get(path, params=params)
        assert response.status_code == 200, response.text
        return response.json()


@pytest.fixture(scope="module")
def world(browser: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    folder: Path = tmp_path_factory.mktemp("grid-browser")
    url = f"sqlite:///{folder / 'partbuild.db'}"
    head = write_history(url)
    with Database.open(url, auto_upgrade=True) as db, serve_service(Service(db, graph=grid_graph())) as api:
        yield World(api, head)


def _cells(tab: Tab) -> dict[str, str]:
    cells = tab.page.locator("[data-testid=grid-months] [data-testid=grid-cell][data-ref]")
    return dict(cells.evaluate_all("(els) => els.map((e) => [e.dataset.ref, e.dataset.state])"))


def _api_cells(world: World, as_of: int | None = None) -> dict[str, str]:
    """Each daily's state as the API reports it (the partitions list, its history for a re-wanted taint)."""
    params: dict[str, Any] = {"prefix": "agg/daily_clicks/site=0/", "limit": 1000}
    if as_of is not None:
        params["as_of_seq"] = as_of
    found = {}
    for item in world.get("/api/v1/partitions", **params)["items"]:
        state = item["state"]
        if state == "live" and any(c["result"] in ("warning", "errored") for c in item["checks"]):
            state = "warning"
        elif state == "missing" and item["previous_uuid"]:
            previous = world.get(
                f"/api/v1/instances/{item['previous_uuid']}", **{k: v for k, v in params.items() if k == "as_of_seq"}
            )
            state = "tainted" if previous["state"] == "tainted" else state
        found[item["ref"]] = state
    return found


def test_the_dailies_grid_shows_the_apis_states_and_follows_time_travel(
    world: World, open_tab: Callable[[str], Tab]
) -> None:
    tab = open_tab(world.api.url)
    visit(tab, "/jobs/daily_clicks")
    shown = _cells(tab)
    assert shown == _api_cells(world)
    assert shown[TAINTED] == "tainted" and "failed" in shown.values()
    legend = tab.page.locator("[data-testid=legend-item][data-count]")
    counts = dict(legend.evaluate_all("(els) => els.map((e) => [e.dataset.state, Number(e.dataset.count)])"))
    assert (
        counts == dict(Counter(shown.values())) == world.get("/api/v1/jobs/daily_clicks/partitions/summary")["counts"]
    )
    tab.page.locator(f"[data-testid=grid-cell][data-ref='{TAINTED}']").click()
    expect(tab.page.locator("[data-testid=timeline]")).to_be_visible()
    assert "/partition?ref=" in tab.page.url

    half = world.head // 2
    visit(tab, f"/jobs/daily_clicks?as_of={half}")
    expect(tab.page.locator("[data-testid=time-travel-banner]")).to_have_attribute("data-as-of", str(half))
    past = _cells(tab)
    assert past == _api_cells(world, half) and past[TAINTED] != "tainted" and len(past) < len(shown)


def test_the_job_graph_draws_three_nodes_and_two_edges_with_counts(
    world: World, open_tab: Callable[[str], Tab]
) -> None:
    tab = open_tab(world.api.url)
    visit(tab, "/")
    tab.page.locator("[data-testid=nav-jobs]").click()
    status = tab.page.locator("#lineage-status")
    expect(status).to_have_attribute("data-state", "drawn")
    expect(status).to_have_attribute("data-nodes", "3")
    expect(status).to_have_attribute("data-edges", "2")
    expect(status).to_contain_text("3 jobs and sources, 2 edges")
    nodes = tab.page.locator("#lineage-graph [data-testid=lineage-node]")
    drawn = dict(nodes.evaluate_all("(els) => els.map((e) => [e.dataset.uuid, e.dataset.counts])"))
    assert sorted(drawn) == ["daily_clicks", "raw_clicks", "weekly_clicks"]
    titles = nodes.evaluate_all("(els) => els.map((e) => e.querySelector('text').textContent)")
    assert sorted(titles) == sorted(drawn)  # each node's first line names it, even when its counts are longer
    daily = world.get("/api/v1/jobs/daily_clicks/partitions/summary")["counts"]
    assert drawn["daily_clicks"] == ",".join(f"{k.replace('_', ' ')} {n}" for k, n in daily.items())
    edges = tab.page.locator("#lineage-graph [data-testid=lineage-edge]")
    pairs = edges.evaluate_all("(els) => els.map((e) => [e.dataset.input, e.dataset.output])")
    assert sorted(map(tuple, pairs)) == [("daily_clicks", "weekly_clicks"), ("raw_clicks", "daily_clicks")]
    tab.page.locator("#lineage-graph [data-testid=lineage-node][data-uuid=daily_clicks] a").click()
    expect(tab.page.locator("[data-testid=grid-months]")).to_be_visible()
    assert tab.page.url.endswith("/jobs/daily_clicks")
