"""Quality check results in the web UI (issue 24), in a real headless Chromium against a real server.

No Spark: the log is the checks golden log's events (a daily d/1 Live with a warning at seq 5, d/2's errored
check at seq 7 then its blocking failure at seq 11, d/3 passed at seq 17) plus a weekly built from d/1 and
d/3 whose check passed. The lineage graph badges each node with the worst result of its checks, the
instance page has a checks table, the run page the checks its outcome recorded; time travel applies to
each, and each agrees with the API's answer as of the same seq.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import expect

from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.log.events import envelope, from_job_run, manual, system
from partbuild.state.rules.ids import instance_uuid

from browserkit import Tab, visit
from golden_log import check_events
from serverkit import ApiServer, graphless_api_server

pytestmark = pytest.mark.browser
pytest_plugins = ["browserkit"]  # the `browser` and `open_tab` fixtures

WARNED_AT, ERRORED_AT, FAILED_AT = 5, 7, 11  # the golden log's outcomes with checks (d/3 passes at 17)


@dataclass
class World:
    api: ApiServer
    d1: str
    d2: str
    d3: str
    weekly: str
    weekly_seq: int  # the weekly's success

    def get(self, path: str, **params: Any) -> Any:
        response = self.api.client.get(path, params=params)
        assert response.status_code == 200, response.text
        return response.json()


def _add_weekly(api: ApiServer, d1: str, d3: str) -> tuple[str, int]:
    """A weekly built from d/1 (warned) and d/3 (passed), its own check passed; its uuid and success seq."""

    def append(payload: object, source: pb.EventSource) -> int:
        return api.log.append([envelope(payload, source=source)]).first_seq  # type: ignore[arg-type]

    wanted = append(pb.WantCreate(want_id="wk", partition_refs=["wk/1"]), manual("ann"))
    weekly = instance_uuid(wanted, "wk/1")
    append(pb.JobRunBuffer(job_run_id="r5", job_label="wk", instance_uuids=[weekly]), system("orchestrator"))
    total = pb.CheckResult(name="weekly_total_matches_dailies", passed=True, blocking=True, description="12 = 5 + 7")
    checked = pb.InstanceChecks(instance_uuid=weekly, results=[total])
    success = pb.JobRunSuccess(job_run_id="r5", input_instance_uuids=[d1, d3], checks=[checked])
    return weekly, append(success, from_job_run("r5"))


@pytest.fixture(scope="module")
def world(browser: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    # `browser` first: without Chromium the tests skip before anything is built.
    folder: Path = tmp_path_factory.mktemp("checks-browser")
    with graphless_api_server(f"sqlite:///{folder / 'partbuild.db'}") as api:
        api.log.append(check_events())
        api.service.refresh()
        state = api.service.state
        d1, d2, d3 = (state.canonical[ref] for ref in ("d/1", "d/2", "d/3"))
        weekly, weekly_seq = _add_weekly(api, d1, d3)
        api.service.refresh()
        yield World(api, d1, d2, d3, weekly, weekly_seq)


def _drawn_badges(tab: Tab) -> dict[str, str]:
    """Each drawn node's `data-check` (its worst check result, "" for none), once lineage.js is done."""
    expect(tab.page.locator("#lineage-status")).to_have_attribute("data-state", "drawn")
    found = tab.page.locator("#lineage-graph [data-testid=lineage-node]").evaluate_all(
        "(els) => els.map((e) => [e.dataset.uuid, e.dataset.check])"
    )
    badges = tab.page.locator("#lineage-graph [data-testid=lineage-node]:has([data-testid=lineage-check])")
    with_badge = badges.evaluate_all(
        "(els) => els.map((e) => [e.dataset.uuid, e.querySelector('.badge').dataset.result])"
    )
    assert {uuid: check for uuid, check in found if check} == dict(with_badge), "a badge for each node with checks"
    return dict(found)


def _api_badges(world: World, uuid: str, as_of: int | None = None) -> dict[str, str]:
    """The API's `check_result` of each node of the lineage the instance page draws (upstream, depth 2)."""
    params: dict[str, Any] = {"direction": "upstream", "depth": 2}
    if as_of is not None:
        params["as_of_seq"] = as_of
    body = world.get(f"/api/v1/instances/{uuid}/lineage", **params)
    return {node["uuid"]: node["check_result"] or "" for node in body["nodes"]}


def _table(tab: Tab) -> list[tuple[str, str, str]]:
    """The checks table's rows as (name, result, seq)."""
    rows = tab.page.locator("[data-testid=instance-checks] [data-testid=check-row]")
    return [
        tuple(row)
        for row in rows.evaluate_all("(els) => els.map((e) => [e.dataset.name, e.dataset.result, e.dataset.seq])")
    ]


def test_the_lineage_graph_badges_each_checked_node_with_its_worst_result(
    world: World, open_tab: Callable[[str], Tab]
) -> None:
    tab = open_tab(world.api.url)
    visit(tab, f"/instances/{world.weekly}")
    badges = _drawn_badges(tab)
    assert badges == _api_badges(world, world.weekly)
    raw = world.api.service.state.canonical["raw/a"]
    assert badges == {world.weekly: "passed", world.d1: "warning", world.d3: "passed", raw: ""}
    warning = tab.page.locator(f"[data-testid=lineage-node][data-uuid='{world.d1}'] [data-testid=lineage-check]")
    expect(warning).to_have_attribute("data-result", "warning")
    expect(warning).to_be_visible()
    assert _table(tab) == [("weekly_total_matches_dailies", "passed", str(world.weekly_seq))]


def test_a_warning_stays_visible_on_a_live_instance_and_time_travel_shows_it_from_its_seq(
    world: World, open_tab: Callable[[str], Tab]
) -> None:
    """The Done-when's web part: d/1 is Live with its warning, on its page and its run's, as of seq 5 and after;
    as of seq 4 (the run still going) there is neither badge nor table."""
    tab = open_tab(world.api.url)
    visit(tab, f"/instances/{world.d1}")
    expect(tab.page.locator("[data-testid=instance-state] .state")).to_have_attribute("data-state", "live")
    assert _table(tab) == [("rows_nonzero", "passed", str(WARNED_AT)), ("url_not_null", "warning", str(WARNED_AT))]
    row = tab.page.locator("[data-testid=check-row][data-name=url_not_null]")
    expect(row.locator(".check")).to_have_text("warning")
    expect(row).to_contain_text("nulls=2")
    assert _drawn_badges(tab)[world.d1] == "warning"

    visit(tab, f"/instances/{world.d1}?as_of={WARNED_AT}")
    expect(tab.page.locator("[data-testid=time-travel-banner]")).to_have_attribute("data-as-of", str(WARNED_AT))
    assert _table(tab) == [("rows_nonzero", "passed", str(WARNED_AT)), ("url_not_null", "warning", str(WARNED_AT))]
    assert _drawn_badges(tab) == _api_badges(world, world.d1, WARNED_AT) and _drawn_badges(tab)[world.d1] == "warning"

    visit(tab, f"/instances/{world.d1}?as_of={WARNED_AT - 1}")
    expect(tab.page.locator("[data-testid=no-checks]")).to_have_text(f"No checks recorded as of seq {WARNED_AT - 1}.")
    assert _table(tab) == [] and _drawn_badges(tab) == {world.d1: ""} == _api_badges(world, world.d1, WARNED_AT - 1)
    expect(tab.page.locator("[data-testid=lineage-check]")).to_have_count(0)

    visit(tab, "/runs/r1")
    checks = tab.page.locator("[data-testid=run-checks] [data-testid=check-row]")
    expect(checks).to_have_count(2)
    expect(tab.page.locator("[data-testid=run-checks] [data-name=url_not_null]")).to_have_attribute(
        "data-result", "warning"
    )


def test_an_instance_checked_twice_shows_each_outcomes_checks_at_its_seq(
    world: World, open_tab: Callable[[str], Tab]
) -> None:
    """d/2: its first run's check errored (seq 7), its retry's blocking check failed (seq 11)."""
    tab = open_tab(world.api.url)
    visit(tab, f"/instances/{world.d2}?as_of={ERRORED_AT}")
    assert _table(tab) == [("rows_nonzero", "errored", str(ERRORED_AT))]
    assert _drawn_badges(tab) == {world.d2: "errored"}
    visit(tab, f"/instances/{world.d2}")
    expect(tab.page.locator("[data-testid=instance-state] .state")).to_have_attribute("data-state", "failed")
    assert _table(tab) == [("rows_nonzero", "failed", str(FAILED_AT)), ("url_not_null", "passed", str(FAILED_AT))]
    assert _drawn_badges(tab) == {world.d2: "failed"} == _api_badges(world, world.d2)
