"""Bulk actions from the grid (issue 36) in a real headless Chromium against a real server on a real SQLite log.

No Spark and no orchestrator: the log says January's dailies 6..31 failed (one permanently failed run),
January 1..5 and February built, and February 10 failed (another run). On the grid a writer selects January
(a click on its first day, a shift-click on its last), asks to retry, sees the count the server's dry run
reports (26 of the 31 selected), confirms, and the page goes back to the grid where those 26 cells left the
failed state; the log holds exactly one new event, a want naming exactly those 26 refs; a run then builds
them (as an orchestrator would) and the page follows them to Live. `browserkit` fails
the test on any console error, uncaught exception or CSP violation (no inline scripts). While cells are
selected a want lands and the live refresh redraws the grid: the selection stays.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import expect

from partbuild.api.models.wants import WantRequest
from partbuild.api.service import Service
from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.database import Database
from partbuild.state.log.events import envelope, from_job_run, manual

from browserkit import Tab, visit
from gridkit import grid_graph
from serverkit import ApiServer, serve_service

pytestmark = pytest.mark.browser
pytest_plugins = ["browserkit"]  # the `browser` and `open_tab` fixtures

DAYS = [dt.date(2026, 1, 1) + dt.timedelta(days=n) for n in range(59)]  # January and February 2026
LATE_FAILURE = dt.date(2026, 2, 10)


def daily(day: dt.date) -> str:
    return f"agg/daily_clicks/site=0/date={day.isoformat()}"


def raw(day: dt.date) -> str:
    return f"raw/clicks/site=0/date={day.isoformat()}"


def january_failed() -> list[str]:
    return [daily(day) for day in DAYS if day.month == 1 and day.day > 5]


@dataclass
class World:
    api: ApiServer
    service: Service


def _append(service: Service, payloads: list[Any], source: pb.EventSource | None = None) -> None:
    events = [envelope(p, source=source or manual("test"), timestamp_ms=service.clock()) for p in payloads]
    service.log.append(events)
    service.refresh()


def _run(service: Service, run_id: str, days: list[dt.date], failed: bool) -> None:
    """A job run of the dailies of `days`, succeeded or permanently failed."""
    uuids = [service.state.canonical[daily(day)] for day in days]
    _append(service, [pb.JobRunBuffer(job_run_id=run_id, job_label="daily_clicks", instance_uuids=uuids)])
    if failed:
        end: Any = pb.JobRunFailure(job_run_id=run_id, error_class=pb.ERROR_CLASS_PERMANENT, message="bad input")
    else:
        inputs = [service.state.canonical[raw(day)] for day in days]
        end = pb.JobRunSuccess(job_run_id=run_id, input_instance_uuids=inputs)
    _append(service, [end], from_job_run(run_id))


def build_history(service: Service) -> None:
    """Raw days observed, every daily wanted, then three runs: built, January 6..31 failed, February 10 failed."""
    _append(service, [pb.PartitionObserved(partition_ref=raw(day), location=f"/data/{day}") for day in DAYS])
    service.create_want(WantRequest(refs=[daily(day) for day in DAYS], want_id="want-all"))
    built = [day for day in DAYS if (day.month == 1 and day.day <= 5) or (day.month == 2 and day != LATE_FAILURE)]
    _run(service, "run-built", built, failed=False)
    _run(service, "run-january", [day for day in DAYS if day.month == 1 and day.day > 5], failed=True)
    _run(service, "run-late", [LATE_FAILURE], failed=True)


@pytest.fixture(scope="module")
def world(browser: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    folder: Path = tmp_path_factory.mktemp("bulk-browser")
    with Database.open(f"sqlite:///{folder / 'partbuild.db'}", auto_upgrade=True) as db:
        service = Service(db, graph=grid_graph())
        build_history(service)
        with serve_service(service) as api:
            yield World(api, service)
        service.stop()


def _states(tab: Tab) -> dict[str, str]:
    cells = tab.page.locator("[data-testid=grid-months] [data-testid=grid-cell][data-ref]")
    return dict(cells.evaluate_all("(els) => els.map((e) => [e.dataset.ref, e.dataset.state])"))


def test_retry_a_month_of_failed_cells_in_one_action_after_confirming_the_count(
    world: World, open_tab: Callable[[str], Tab]
) -> None:
    tab = open_tab(world.api.url)
    page = tab.page
    visit(tab, "/jobs/daily_clicks")
    before = _states(tab)
    assert [ref for ref, state in before.items() if state == "failed"] == [*january_failed(), daily(LATE_FAILURE)]

    page.locator("[data-testid=bulk-select-mode]").check()
    page.locator("[data-testid=grid-cell][data-day='2026-01-01']").click()
    page.locator("[data-testid=grid-cell][data-day='2026-01-31']").click(modifiers=["Shift"])
    expect(page.locator("[data-testid=bulk-count]")).to_have_attribute("data-count", "31")
    expect(page.locator("#grid .cell.selected")).to_have_count(31)
    assert page.url.endswith("/jobs/daily_clicks")  # the clicks selected cells, not followed their links
    # A want of March 1st: the live refresh swaps the grid for one with a March row; the selection stays.
    world.service.create_want(WantRequest(refs=[daily(dt.date(2026, 3, 1))], want_id="want-march"))
    expect(page.locator("[data-testid=grid-month][data-month='3']")).to_have_count(1)
    expect(page.locator("#grid .cell.selected")).to_have_count(31)
    page.locator("[data-testid=bulk-action]").select_option("retry")
    page.locator("[data-testid=bulk-reason]").fill("January's bad input is fixed")
    head = world.service.log.head()
    page.locator("[data-testid=bulk-review]").click()

    preview = page.locator("[data-testid=bulk-preview]")
    expect(preview).to_have_attribute("data-selected", "31")
    expect(preview).to_have_attribute("data-acted-on", "26")  # the 5 Live days of January are left alone
    assert world.service.log.head() == head  # a dry run: nothing recorded yet
    page.locator("[data-testid=bulk-confirm]").click()

    expect(page.locator("[data-testid=bulk-done]")).to_have_attribute("data-acted-on", "26")
    assert "/jobs/daily_clicks?" in page.url
    after = _states(tab)
    assert {after[ref] for ref in january_failed()} == {"missing"}
    assert after[daily(LATE_FAILURE)] == "failed"
    assert {ref: state for ref, state in after.items() if ref in before and ref not in january_failed()} == {
        ref: state for ref, state in before.items() if ref not in january_failed()
    }
    rows = world.service.log.read(head, 100)
    assert [row.event_type for row in rows] == ["want_create"]
    want_id = page.locator("[data-testid=bulk-done] [data-testid=want-link]").text_content()
    want = world.api.client.get(f"/api/v1/wants/{want_id}").json()
    assert sorted(want["refs"]) == january_failed() and want["comment"] == "January's bad input is fixed"
    # What an orchestrator does next: a run builds the 26 fresh instances; the page follows them to Live.
    _run(world.service, "run-retried", [day for day in DAYS if day.month == 1 and day.day > 5], failed=False)
    expect(page.locator("[data-testid=grid-cell][data-day='2026-01-31']")).to_have_attribute(
        "data-state", "live", timeout=15_000
    )
    assert {ref: state for ref, state in _states(tab).items() if "2026-01-" in ref} == dict.fromkeys(
        [daily(day) for day in DAYS if day.month == 1], "live"
    )
