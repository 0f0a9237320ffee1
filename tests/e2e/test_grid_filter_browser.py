"""The grid filtered by a failed check, in a real headless Chromium against a real server on a real SQLite log
(issue 36): the filter form narrows the grid to the cells whose latest checks failed that check, then to those
whose note holds an error's text; `browserkit` fails the test on any console error or CSP violation."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import expect

from partbuild.api.service import Service
from partbuild.orchestrator.context import JobContext
from partbuild.orchestrator.graph import Graph, Job
from partbuild.state.database import Database

from browserkit import Tab, visit
from golden_outcomes import outcome_events
from serverkit import ApiServer, serve_service

pytestmark = pytest.mark.browser
pytest_plugins = ["browserkit"]  # the `browser` and `open_tab` fixtures


def noop(ctx: JobContext) -> None:
    """Never run."""


@pytest.fixture(scope="module")
def api(browser: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApiServer]:
    folder: Path = tmp_path_factory.mktemp("grid-filter-browser")
    with Database.open(f"sqlite:///{folder / 'partbuild.db'}", auto_upgrade=True) as db:
        db.log.append(outcome_events())  # issue 34's golden log: d/3 failed its check `rows`, d/4's file was bad
        service = Service(db, graph=Graph([Job("d", ["d/{n:int}"], noop)]))
        with serve_service(service) as served:
            yield served
        service.stop()


def shown(tab: Tab) -> list[str]:
    cells = tab.page.locator("#grid [data-testid=grid-cell][data-ref]")
    return list(cells.evaluate_all("(els) => els.map((e) => e.dataset.ref)"))


def test_the_grid_filtered_by_a_failed_check_shows_only_those_cells(
    api: ApiServer, open_tab: Callable[[str], Tab]
) -> None:
    tab = open_tab(api.url)
    page = tab.page
    visit(tab, "/jobs/d")
    assert len(shown(tab)) == 7
    page.get_by_test_id("grid-check").fill("rows")
    page.get_by_test_id("grid-check-result").select_option("failed")
    page.locator("[data-testid=grid-filter] button[type=submit]").click()
    expect(page.get_by_test_id("grid-shown")).to_have_attribute("data-count", "1")
    assert shown(tab) == ["d/3"] and "check=rows" in page.url
    page.get_by_test_id("grid-check").fill("")
    page.get_by_test_id("grid-check-result").select_option("")
    page.get_by_test_id("grid-error").fill("footer")
    page.locator("[data-testid=grid-filter] button[type=submit]").click()
    expect(page.get_by_test_id("grid-shown")).to_have_attribute("data-count", "1")
    assert shown(tab) == ["d/4"]
    expect(page.locator("[data-testid=cell-label]")).to_have_text(["4"])  # each cell says which it is
