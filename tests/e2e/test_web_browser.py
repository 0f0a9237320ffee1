"""The web UI in a real headless Chromium against a real server building workload W1.

One module-scoped world: uvicorn on a free port serving a real SQLite file, the real orchestrator
building W1 over 6 days of clicks with the shared SparkSession. Set-up: want the weekly partition of
2026-W01 (4 dailies come as derivative wants), taint one daily, want the weekly again (rebuilt, new
instances), observe a partition whose ref holds `<script>`. The weekly job is gated, so the test of
live refresh sees the build in flight and then done, whatever the machine's speed. A second server,
over a database with tokens, tests sign-in and roles. The time-travel tests pick their seqs from the
log (a want's creation, its derivative wants, a run's buffer, heartbeat and success, the taint) and
compare each page to the API's answer as of the same seq. Every page a test opens fails the test on a
console error, an uncaught exception, a CSP violation or a dialog (tests/kits/browserkit.py).
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from datetime import date
from itertools import pairwise
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

import pytest
from playwright.sync_api import expect

from examples.clicks.pipeline import build_graph, daily_ref, weekly_ref, weeks_in_range
from partbuild.api.models.partitions import ObserveRequest, TaintRequest
from partbuild.api.models.wants import WantRequest
from partbuild.api.service import Service
from partbuild.examples.clicks.isoweek import IsoWeek
from partbuild.orchestrator.graph import Graph
from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.database import Database
from partbuild.state.log.events import envelope, manual
from partbuild.state.ops.tokens import Role

from browserkit import Tab, mark_document, same_document, visit
from serverkit import ApiServer, graphless_api_server, orchestrated_api
from sparkkit import CLICKS_START

pytestmark = pytest.mark.browser

DAYS = 6  # 2026-01-01..06: week 2026-W01 has 4 days, 2026-W02 has 2
WEEK_1, WEEK_2 = (weekly_ref(week) for week in weeks_in_range(DAYS, CLICKS_START))
TAINTED_DAILY = daily_ref(CLICKS_START)
LATER_WEEK = weekly_ref(IsoWeek.parse("2026-W09"))  # wanted only by a want that expires on arrival
EVIL = "evil/<script>alert(1)</script>"
BUILD_TIMEOUT_S = 120
PENDING, SHARED = "x/pending", "raw/shared"  # the access-control server's refs
pytest_plugins = ["browserkit"]  # the `browser` and `open_tab` fixtures


class Gate:
    """Holds the weekly job's runs while closed, so a test can watch a build in flight."""

    def __init__(self) -> None:
        self._open = threading.Event()
        self._open.set()

    def close(self) -> None:
        self._open.clear()

    def open(self) -> None:
        self._open.set()

    def wrap(self, run: Callable[[Any], None]) -> Callable[[Any], None]:
        def gated(ctx: Any) -> None:
            if not self._open.wait(timeout=BUILD_TIMEOUT_S):
                raise RuntimeError("the test never opened the gate")
            run(ctx)

        return gated


@dataclass
class World:
    api: ApiServer
    gate: Gate
    before_taint: int  # the last seq before the taint
    taint_seq: int
    old_weekly: str  # WEEK_1's instance before the taint
    new_weekly: str  # and after

    @property
    def url(self) -> str:
        return self.api.url

    def get(self, path: str, **params: Any) -> Any:
        response = self.api.client.get(path, params=params)
        assert response.status_code == 200, response.text
        return response.json()


def _gated_w1(clicks_root: Path, gate: Gate) -> Graph:
    graph = build_graph(clicks_root, days=DAYS, start=CLICKS_START)
    jobs = [
        replace(job, run=gate.wrap(job.run)) if job.label == "weekly_clicks" else job for job in graph.jobs.values()
    ]
    return Graph(jobs, graph.sources.values())


def wait_live(service: Service, ref: str, not_uuid: str = "") -> str:
    """The uuid of `ref`'s canonical instance once it is Live (and not `not_uuid`)."""
    deadline = time.monotonic() + BUILD_TIMEOUT_S
    while time.monotonic() < deadline:
        service.refresh()
        uuid = service.state.canonical.get(ref)
        if uuid and uuid != not_uuid and service.instance(uuid).state == "live":
            return uuid
        time.sleep(0.05)
    raise AssertionError(f"{ref} not Live within {BUILD_TIMEOUT_S} s")


def _story(service: Service) -> tuple[int, int, str, str]:
    """Build the world's state; returns the seqs before and of the taint, the weekly's old and new uuids."""
    service.create_want(WantRequest(refs=[WEEK_1], want_id="weekly-w01", comment="W1 weekly"))
    old = wait_live(service, WEEK_1)
    before_taint = service.live.head_seq
    taint = service.taint(TaintRequest(ref=TAINTED_DAILY, reason="late clicks"))
    service.create_want(WantRequest(refs=[WEEK_1], want_id="weekly-w01-again"))
    new = wait_live(service, WEEK_1, not_uuid=old)
    # No job or source produces this ref, so the service refuses it; the log takes any observation.
    observed = pb.PartitionObserved(partition_ref=EVIL, location="/nowhere")
    service.log.append([envelope(observed, source=manual("test"), timestamp_ms=service.clock())])
    service.refresh()
    return before_taint, taint.seq, old, new


@pytest.fixture(scope="module")
def world(browser: Any, spark: Any, clicks_root: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    # `browser` first: without Chromium the tests skip before W1 is built.
    folder = tmp_path_factory.mktemp("browser-w1")
    gate = Gate()
    graph = _gated_w1(clicks_root, gate)
    url = f"sqlite:///{folder / 'partbuild.db'}"
    with (
        Database.open(url, auto_upgrade=True) as db,
        orchestrated_api(db, graph, folder / "warehouse", spark, stop_timeout_s=BUILD_TIMEOUT_S) as api,
    ):
        try:
            yield World(api, gate, *_story(api.service))
        finally:
            gate.open()  # a run held at the gate must finish before the orchestrator is stopped


def _attrs(tab: Tab, selector: str, *names: str) -> set[tuple[str, ...]]:
    """The values of attributes `names` of every element matching `selector`, as a set of tuples."""
    values = tab.page.locator(selector).evaluate_all(
        "(els, names) => els.map((e) => names.map((n) => e.getAttribute(n)))", list(names)
    )
    return {tuple(v) for v in values}


def _api_lineage_body(world: World, tab: Tab, as_of: int | None = None) -> Any:
    """The API's answer for the lineage graph shown on `tab` (same uuid, direction, depth, seq)."""
    box = tab.page.locator("#lineage")
    params = {"direction": box.get_attribute("data-direction"), "depth": box.get_attribute("data-depth")}
    if as_of is not None:
        params["as_of_seq"] = str(as_of)
    uuid = box.get_attribute("data-uuid")
    return world.get(f"/api/v1/instances/{uuid}/lineage", **params)


def _api_lineage(world: World, tab: Tab, as_of: int | None = None) -> tuple[set[str], set[tuple[str, str]]]:
    """The nodes and edges of the lineage the API gives for the graph shown on `tab`."""
    body = _api_lineage_body(world, tab, as_of)
    return {node["uuid"] for node in body["nodes"]}, {(edge["input"], edge["output"]) for edge in body["edges"]}


def _drawn_lineage(tab: Tab) -> tuple[set[str], set[tuple[str, str]]]:
    """The nodes and edges lineage.js drew, once it says it is done."""
    status = tab.page.locator("#lineage-status")
    expect(status).to_have_attribute("data-state", "drawn")
    nodes = {uuid for (uuid,) in _attrs(tab, "#lineage-graph [data-testid=lineage-node]", "data-uuid")}
    edges = _attrs(tab, "#lineage-graph [data-testid=lineage-edge]", "data-input", "data-output")
    assert status.get_attribute("data-nodes") == str(len(nodes)) and status.get_attribute("data-edges") == str(
        len(edges)
    )
    return nodes, edges  # type: ignore[return-value]


def _tree(node: dict[str, Any]) -> set[tuple[str, str, str]]:
    """A want tree as (parent, want, state) triples."""
    found = {("", node["want_id"], node["state"])}
    for child in node["children"]:
        found |= {(parent or node["want_id"], want, state) for parent, want, state in _tree(child)}
    return found


def _shown_tree(tab: Tab) -> set[tuple[str, str, str]]:
    """The want tree the page draws, as `_tree`'s triples (read from each node's data attributes)."""
    shown = tab.page.locator("[data-testid=want-tree-node]").evaluate_all(
        """(els) => els.map((e) => {
             const parent = e.parentElement.closest('[data-testid=want-tree-node]');
             return [parent ? parent.dataset.wantId : '', e.dataset.wantId, e.dataset.state];
           })"""
    )
    return {(parent, want, state) for parent, want, state in shown}


# --- pages render what the API says -----------------------------------------------------------------------


def test_the_overview_counts_what_the_api_lists(world: World, open_tab: Callable[[str], Tab]) -> None:
    tab = open_tab(world.url)
    visit(tab, "/")
    for kind, path, state in [("wants", "/api/v1/wants", "successful"), ("job_runs", "/api/v1/job-runs", "succeeded")]:
        listed = len(world.get(path, state=state, limit=1000)["items"])
        expect(tab.page.locator(f"[data-testid=count][data-kind={kind}][data-state={state}] td.num")).to_have_text(
            str(listed)
        )
    expect(tab.page.locator("[data-testid=counts-instances]")).to_contain_text("tainted")
    expect(tab.page.locator("[data-testid=in-flight]")).to_be_visible()
    # A want that expired on arrival leaves its Missing instance: counted apart, and linked to its list.
    world.api.service.create_want(WantRequest(refs=[LATER_WEEK], data_timestamp_ms=1, ttl_seconds=1))
    unwanted = world.get("/api/v1/counts")["waiting"]["missing"]["unwanted"]
    visit(tab, "/")
    link = tab.page.locator("[data-testid=unwanted][data-state=missing] a")
    expect(link).to_have_text(f"{unwanted} not wanted by any active want")
    link.click()
    expect(tab.page.locator(f"[data-testid=partition-row][data-ref='{LATER_WEEK}']")).to_be_visible()


def test_a_wants_page_draws_its_derivative_tree(world: World, open_tab: Callable[[str], Tab]) -> None:
    tab = open_tab(world.url)
    visit(tab, "/wants/weekly-w01")
    expect(tab.page.locator("[data-testid=want-state] .state")).to_have_attribute("data-state", "successful")
    api = _tree(world.get("/api/v1/wants/weekly-w01")["tree"])
    assert _shown_tree(tab) == api
    parents = {parent for parent, _, _ in api}
    assert len(api) >= 3 and len(parents - {"", "weekly-w01"}) >= 1, "the dailies' want, and the raws' under it"
    tab.page.locator("[data-testid=want-tree-node] [data-testid=want-tree-node] a").first.click()
    expect(tab.page).to_have_url(re.compile(r"/wants/[^/]+$"))
    expect(tab.page.locator("[data-testid=want-tree]")).to_be_visible()


def test_an_instances_lineage_graph_has_the_apis_nodes_and_edges(world: World, open_tab: Callable[[str], Tab]) -> None:
    tab = open_tab(world.url)
    visit(tab, f"/instances/{world.new_weekly}")
    nodes, edges = _drawn_lineage(tab)
    assert (nodes, edges) == _api_lineage(world, tab)
    assert world.new_weekly in nodes and len(nodes) == 9, "the weekly, its 4 dailies and their 4 raw partitions"
    # One hop only: the weekly and its dailies, drawn again without a reload.
    mark_document(tab.page)
    tab.page.locator("[data-testid=lineage-depth]").fill("1")
    tab.page.locator("[data-testid=lineage-depth]").dispatch_event("change")
    expect(tab.page.locator("#lineage")).to_have_attribute("data-depth", "1")
    expect(tab.page.locator("#lineage-status")).to_have_attribute("data-nodes", "5")
    shallow = _drawn_lineage(tab)
    assert shallow == _api_lineage(world, tab) and same_document(tab.page)
    # The browser's own change event when the field loses focus (to a click on a node) changes nothing: no
    # redraw, which would replace the node under the click (a redraw says "pending" before it fetches).
    state_right_after = """() => {
        document.querySelector("[data-testid=lineage-depth]").dispatchEvent(new Event("change", {bubbles: true}));
        return document.querySelector("#lineage-status").getAttribute("data-state");
    }"""
    assert tab.page.evaluate(state_right_after) == "drawn"
    # Each node links to its instance page.
    daily = next(uuid for uuid, output in edges if output == world.new_weekly)
    tab.page.locator(f"[data-testid=lineage-node][data-uuid='{daily}'] a").click()
    expect(tab.page.locator("[data-testid=instance-uuid]")).to_have_text(daily)


def test_a_runs_page_shows_what_it_built_and_read(world: World, open_tab: Callable[[str], Tab]) -> None:
    run_id = world.get(f"/api/v1/instances/{world.new_weekly}")["built_by"]
    run = world.get(f"/api/v1/job-runs/{quote(run_id, safe='')}")
    tab = open_tab(world.url)
    visit(tab, "/runs")
    tab.page.locator(f"[data-testid=run-row][data-run-id='{run_id}'] a[href^='/runs/']").first.click()
    expect(tab.page.locator("[data-testid=run-id]")).to_have_text(run_id)
    expect(tab.page.locator("[data-testid=run-state] .state")).to_have_attribute("data-state", "succeeded")
    assert _attrs(tab, "[data-testid=output-row]", "data-uuid") == {(world.new_weekly,)}
    inputs = tab.page.locator("[data-testid=run-inputs] a").evaluate_all("(els) => els.map((e) => e.textContent)")
    assert run["inputs"] and {text.strip() for text in inputs} == set(run["inputs"])
    timeline = tab.page.locator("[data-testid=run-timeline] [data-testid=timeline-item]")
    expect(timeline.first).to_have_attribute("data-state", "queued")
    expect(timeline.last).to_have_attribute("data-state", "succeeded")


def test_the_event_log_filters_by_type_and_links_what_each_event_touched(
    world: World, open_tab: Callable[[str], Tab]
) -> None:
    tab = open_tab(world.url)
    visit(tab, "/events")
    expect(tab.page.locator("[data-testid=event-row]").first).to_be_visible()
    tab.page.locator("[data-testid=events-type]").select_option("partition_taint")
    tab.page.locator("[data-testid=events-filter] button[type=submit]").click()
    expect(tab.page).to_have_url(re.compile(r"type=partition_taint"))
    rows = tab.page.locator("[data-testid=event-row]")
    expect(rows).to_have_count(1)
    assert rows.get_attribute("data-seq") == str(world.taint_seq)
    rows.locator("[data-testid=ref-link]", has_text=TAINTED_DAILY).click()
    expect(tab.page.locator("[data-testid=ref-name]")).to_have_text(TAINTED_DAILY)


def test_every_page_of_the_navigation_loads_without_a_console_error(
    world: World, open_tab: Callable[[str], Tab]
) -> None:
    tab = open_tab(world.url)
    visit(tab, f"/?as_of={world.before_taint}")
    for name, title in [
        ("wants", "Wants"),
        ("partitions", "Partitions"),
        ("runs", "Job runs"),
        ("events", "Event log"),
        ("automation", "Automation"),
    ]:
        tab.page.locator(f"[data-testid=nav-{name}]").click()
        expect(tab.page).to_have_title(re.compile(f"^{title} ·"))
        expect(tab.page.locator("[data-testid=time-travel-banner]")).to_have_attribute(
            "data-as-of", str(world.before_taint)
        )  # every link keeps the time travel
    tab.page.locator("[data-testid=time-travel-now]").click()
    expect(tab.page.locator("body")).to_have_attribute("data-live", "on")
    for name, title in [("audit", "Audit"), ("system", "System"), ("overview", "Overview")]:
        tab.page.locator(f"[data-testid=nav-{name}]").click()
        expect(tab.page).to_have_title(re.compile(f"^{title} ·"))
    visit(tab, "/audit?replay=1")
    expect(tab.page.locator("[data-testid=audit-digest]")).to_be_visible()


# --- forms, live refresh, time travel ---------------------------------------------------------------------


def test_wanting_a_weekly_through_the_form_builds_it_and_the_page_follows_without_reload(
    world: World, open_tab: Callable[[str], Tab]
) -> None:
    tab = open_tab(world.url)
    world.gate.close()  # the weekly's run waits until the page has shown the build in flight
    try:
        visit(tab, "/wants")
        tab.page.locator("[data-testid=want-ref]").fill(WEEK_2)
        tab.page.locator("[data-testid=want-submit]").click()
        expect(tab.page).to_have_url(re.compile(r"/wants/[^/?]+$"))
        state = tab.page.locator(f"[data-testid=ref-status][data-ref='{WEEK_2}'] > .state")
        expect(state).to_have_attribute("data-state", re.compile(r"^(missing|building|upstream_building)$"))
        mark_document(tab.page)
    finally:
        world.gate.open()
    expect(state).to_have_attribute("data-state", "live", timeout=BUILD_TIMEOUT_S * 1000)
    expect(tab.page.locator("[data-testid=want-state] .state")).to_have_attribute("data-state", "successful")
    assert same_document(tab.page), "the page reloaded instead of refreshing in place"


def test_the_want_forms_range_mode_previews_a_backfill_without_wanting(
    world: World, open_tab: Callable[[str], Tab]
) -> None:
    tab = open_tab(world.url)
    visit(tab, "/wants")
    form = tab.page.locator("#want-form")
    expect(form.locator("[data-testid=want-pattern]")).to_be_hidden()  # forms.js shows one mode's fields
    form.locator("input[name=mode][value=range]").check()
    expect(form.locator("[data-testid=want-ref]")).to_be_hidden()
    head = world.api.service.log.head()
    form.locator("[data-testid=want-pattern]").fill("agg/daily_clicks/date={date:date}")
    form.locator("[data-testid=want-start]").fill("2026-01-02")
    form.locator("[data-testid=want-end]").fill("2026-01-04")
    form.locator("[data-testid=want-preview-button]").click()
    preview = tab.page.locator("[data-testid=want-preview]")
    expect(preview).to_have_attribute("data-count", "3")
    expect(preview).to_contain_text(daily_ref(date(2026, 1, 4)))
    expect(tab.page.locator("#want-form [data-testid=want-pattern]")).to_be_visible()  # still in range mode
    # The shared orchestrator may still be appending (a run of the test before): no want is what counts.
    appended = [pb.Event.FromString(payload) for _, payload in world.api.service.log.iter_payloads(after_seq=head)]
    assert [event for event in appended if event.WhichOneof("payload") == "want_create"] == [], "a preview wants"


def test_time_travel_before_the_taint_shows_the_old_instance_and_its_lineage(
    world: World, open_tab: Callable[[str], Tab]
) -> None:
    tab = open_tab(world.url)
    visit(tab, "/partition?" + urlencode({"ref": WEEK_1}))
    expect(tab.page.locator("[data-testid=canonical-instance]")).to_have_attribute("data-uuid", world.new_weekly)
    tab.page.locator("[data-testid=as-of-input]").fill(str(world.before_taint))
    tab.page.locator("#time-travel button[type=submit]").click()
    banner = tab.page.locator("[data-testid=time-travel-banner]")
    expect(banner).to_have_attribute("data-as-of", str(world.before_taint))
    canonical = tab.page.locator("[data-testid=canonical-instance]")
    expect(canonical).to_have_attribute("data-uuid", world.old_weekly)
    expect(canonical.locator(".state")).to_have_attribute("data-state", "live")
    expect(tab.page.locator("body")).to_have_attribute("data-live", "off")
    canonical.locator("a").first.click()  # the link keeps the time travel
    expect(banner).to_have_attribute("data-as-of", str(world.before_taint))
    nodes, edges = _drawn_lineage(tab)
    assert (nodes, edges) == _api_lineage(world, tab, as_of=world.before_taint)
    assert world.old_weekly in nodes and world.new_weekly not in nodes
    assert _attrs(tab, "[data-testid=lineage-node]", "data-state") == {("live",)}
    hrefs = tab.page.locator("[data-testid=lineage-node] a").evaluate_all(
        "(els) => els.map((e) => e.getAttribute('href'))"
    )
    assert hrefs and all(href.endswith(f"?as_of={world.before_taint}") for href in hrefs), hrefs
    now_nodes, _ = _api_lineage(world, tab)
    states_now = {node["state"] for node in world.get(f"/api/v1/instances/{world.old_weekly}/lineage")["nodes"]}
    assert now_nodes == nodes and "tainted" in states_now, "at the head the same instances, the old weekly tainted"


def test_the_banner_links_to_what_changed_since_the_taint(world: World, open_tab: Callable[[str], Tab]) -> None:
    tab = open_tab(world.url)
    visit(tab, f"/?as_of={world.before_taint}")
    tab.page.locator("[data-testid=time-travel-changes]").click()
    rows = tab.page.locator("[data-testid=change-row]")
    expect(rows.first).to_be_visible()
    found = _attrs(tab, "[data-testid=change-row]", "data-seq", "data-kind", "data-id")
    taint = str(world.taint_seq)
    assert {(taint, "instance_state", world.old_weekly), (taint, "canonical_moved", WEEK_1)} <= found
    created = {(seq, uuid) for seq, kind, uuid in found if kind == "instance_created"}
    assert (taint, world.new_weekly) in created  # the taint made its new instance, Missing
    states: dict[str, list[tuple[str | None, ...]]] = {world.old_weekly: [], world.new_weekly: []}
    for row in rows.all():
        uuid = row.get_attribute("data-id")
        if row.get_attribute("data-kind") == "instance_state" and uuid in states:
            states[uuid].append(tuple(s.get_attribute("data-state") for s in row.locator(".state").all()))
    assert states[world.old_weekly] == [("live", "tainted")]
    # Rebuilt: from Missing (it may wait for its tainted daily first) to Building, then Live.
    assert states[world.new_weekly][0][0] == "missing" and states[world.new_weekly][-1] == ("building", "live")
    assert min(int(seq) for seq, _, _ in found) > world.before_taint


# --- time travel through the story, seq by seq ---------------------------------------------------------
# Each test picks its seqs from the log (what happened when), opens a page as of each and compares what it
# shows to the API's answer as of the same seq. The states expected at each seq say the seqs were picked
# right, so the pages must also differ where the log says something changed.


@dataclass(frozen=True)
class Logged:
    """One event of the world's log: its seq, its payload's kind (`want_create`, ...) and the payload."""

    seq: int
    kind: str
    body: Any


def _story_log(world: World) -> list[Logged]:
    """The world's log, in seq order: where the time-travel tests pick their seqs."""
    found = []
    for row in world.api.service.log.read(0, 1_000):
        event = row.to_event()
        kind = event.WhichOneof("payload")
        assert kind is not None, row.seq
        found.append(Logged(row.seq, kind, getattr(event, kind)))
    return found


def _first_seq(log: list[Logged], kind: str, after: int = 0, **fields: str) -> int:
    """The seq of the first event of `kind` after seq `after` whose payload has these field values."""
    for event in log:
        if event.seq > after and event.kind == kind and all(getattr(event.body, k) == v for k, v in fields.items()):
            return event.seq
    raise AssertionError(f"no {kind} {fields} after seq {after} in the log")


def _run_seqs(log: list[Logged], run_id: str) -> tuple[int, int, int]:
    """When the log says `run_id` was buffered (queued), started (its first heartbeat) and succeeded."""
    queued = _first_seq(log, "job_run_buffer", job_run_id=run_id)
    running = _first_seq(log, "job_run_heartbeat", job_run_id=run_id)
    return queued, running, _first_seq(log, "job_run_success", job_run_id=run_id)


def _built_by(world: World, uuid: str) -> str:
    return str(world.get(f"/api/v1/instances/{uuid}")["built_by"])


def _travel(tab: Tab, seq: int) -> None:
    """Travel to `seq` with the header's form, as a person would, and wait until the page is there."""
    tab.page.locator("[data-testid=as-of-input]").fill(str(seq))
    tab.page.locator("#time-travel button[type=submit]").click()
    expect(tab.page.locator("[data-testid=time-travel-banner]")).to_have_attribute("data-as-of", str(seq))


@pytest.mark.parametrize("want_id", ["weekly-w01", "weekly-w01-again"])
def test_a_wants_tree_at_each_step_of_its_build_is_the_apis_as_of_then(
    world: World, open_tab: Callable[[str], Tab], want_id: str
) -> None:
    log = _story_log(world)
    created = derived = _first_seq(log, "want_create", want_id=want_id)
    family = {want_id}  # the want and its derivative wants, each created in the log under its parent
    for event in log:
        if event.kind == "want_create" and event.body.parent_want_id in family:
            family.add(event.body.want_id)
            derived = event.seq
    weekly_run = next(
        e.body.job_run_id
        for e in log
        if e.seq > created and e.kind == "job_run_buffer" and e.body.job_label == "weekly_clicks"
    )
    _, running, succeeded = _run_seqs(log, weekly_run)
    rebuilt = _run_seqs(log, _built_by(world, world.new_weekly))[2]
    steps = [
        ("created", created, "idle"),
        ("derived", derived, "upstream_building"),
        ("running", running, "building"),
        ("succeeded", succeeded, "successful"),
    ]
    if rebuilt != succeeded:  # the taint and the rebuild leave a successful want as it was
        steps.append(("rebuilt", rebuilt, "successful"))
    tab = open_tab(world.url)
    visit(tab, f"/wants/{want_id}")
    trees: dict[str, set[tuple[str, str, str]]] = {}
    for name, seq, state in steps:
        _travel(tab, seq)
        api = world.get(f"/api/v1/wants/{want_id}", as_of_seq=seq)
        assert (api["as_of_seq"], api["state"]) == (seq, state), name
        expect(tab.page.locator("[data-testid=want-state] .state")).to_have_attribute("data-state", state)
        trees[name] = _shown_tree(tab)
        assert trees[name] == _tree(api["tree"]), name
    assert trees["created"] == {("", want_id, "idle")}, "no derivative wants yet"
    assert {want for _, want, _ in trees["derived"]} == family and len(family) > 1
    assert {state for _, _, state in trees["succeeded"]} == {"successful"}
    changed = [(a, b) for (a, _, _), (b, _, _) in pairwise(steps) if trees[a] != trees[b]]
    assert changed == [("created", "derived"), ("derived", "running"), ("running", "succeeded")]


def test_a_weekly_runs_page_while_queued_running_succeeded_and_tainted_is_the_apis_as_of_then(
    world: World, open_tab: Callable[[str], Tab]
) -> None:
    run_id = _built_by(world, world.old_weekly)
    queued, running, succeeded = _run_seqs(_story_log(world), run_id)
    quoted = quote(run_id, safe="")
    tab = open_tab(world.url)
    seen = []
    for seq in (queued, running, succeeded, world.taint_seq):
        visit(tab, f"/runs/{quoted}?as_of={seq}")
        expect(tab.page.locator("[data-testid=time-travel-banner]")).to_have_attribute("data-as-of", str(seq))
        run = world.get(f"/api/v1/job-runs/{quoted}", as_of_seq=seq)
        expect(tab.page.locator("[data-testid=run-state] .state")).to_have_attribute("data-state", run["state"])
        timeline = tab.page.locator("[data-testid=run-timeline] [data-testid=timeline-item]")
        expect(timeline.last).to_have_attribute("data-state", run["state"])
        outputs = {
            (uuid, world.get(f"/api/v1/instances/{uuid}", as_of_seq=seq)["state"]) for uuid in run["instance_uuids"]
        }
        assert _attrs(tab, "[data-testid=output-row]", "data-uuid", "data-state") == outputs, seq
        inputs = tab.page.locator("[data-testid=run-inputs] a").evaluate_all("(els) => els.map((e) => e.textContent)")
        assert {text.strip() for text in inputs} == set(run["inputs"]), seq
        seen.append((run["state"], {state for _, state in outputs}, len(inputs)))
    # Queued and running: the weekly Building, no inputs recorded yet; then Live from its 4 dailies; Tainted.
    assert seen == [
        ("queued", {"building"}, 0),
        ("running", {"building"}, 0),
        ("succeeded", {"live"}, 4),
        ("succeeded", {"tainted"}, 4),
    ]


def test_the_rebuilt_weeklys_lineage_before_and_after_its_build_is_the_apis_as_of_then(
    world: World, open_tab: Callable[[str], Tab]
) -> None:
    _, running, rebuilt = _run_seqs(_story_log(world), _built_by(world, world.new_weekly))
    tab = open_tab(world.url)
    seen = []
    for seq in (world.taint_seq, running, rebuilt):  # the taint created it, Missing
        visit(tab, f"/instances/{world.new_weekly}?as_of={seq}")
        nodes, edges = _drawn_lineage(tab)
        api = _api_lineage_body(world, tab, as_of=seq)
        assert api["as_of_seq"] == seq and (nodes, edges) == _api_lineage(world, tab, as_of=seq)
        states = {(node["uuid"], node["state"]) for node in api["nodes"]}
        assert _attrs(tab, "[data-testid=lineage-node]", "data-uuid", "data-state") == states, seq
        state = world.get(f"/api/v1/instances/{world.new_weekly}", as_of_seq=seq)["state"]
        expect(tab.page.locator("[data-testid=instance-state] .state")).to_have_attribute("data-state", state)
        seen.append((state, len(nodes), len(edges), {node_state for _, node_state in states}))
    # Before its build it has no inputs: a graph of itself; after, its 4 dailies and their raws, all Live
    # (the tainted daily's old instance not among them).
    assert seen == [("missing", 1, 0, {"missing"}), ("building", 1, 0, {"building"}), ("live", 9, 8, {"live"})]


# --- escaping and refusals ----------------------------------------------------------------------------------


def test_a_ref_holding_a_script_tag_renders_as_text(world: World, open_tab: Callable[[str], Tab]) -> None:
    tab = open_tab(world.url)
    visit(tab, "/partitions?" + urlencode({"prefix": "evil/"}))
    row = tab.page.locator("[data-testid=partition-row]")
    expect(row).to_have_attribute("data-ref", EVIL)
    expect(row).to_contain_text(EVIL)
    row.locator("[data-testid=ref-link]").click()
    expect(tab.page.locator("[data-testid=ref-name]")).to_have_text(EVIL)
    tab.page.locator("[data-testid=canonical-instance] a").first.click()  # its lineage graph: an SVG label
    expect(tab.page.locator("#lineage-status")).to_have_attribute("data-state", "drawn")
    expect(tab.page.locator("[data-testid=lineage-node] text").first).to_have_text(EVIL)
    assert tab.page.locator("script:not([src])").count() == 0
    # The want form's error echoes the ref it refuses: as text too.
    visit(tab, "/wants")
    tab.watch.expect(r"status of 422")
    tab.page.locator("[data-testid=want-ref]").fill(EVIL)
    tab.page.locator("[data-testid=want-submit]").click()
    expect(tab.page.locator("[data-testid=form-error]")).to_contain_text(EVIL)
    assert tab.page.locator("script:not([src])").count() == 0 and tab.watch.dialogs == []


def test_a_form_without_its_csrf_token_is_refused(world: World, open_tab: Callable[[str], Tab]) -> None:
    tab = open_tab(world.url)
    visit(tab, "/wants")
    head = world.api.service.log.head()
    tab.watch.expect(r"status of 403")
    tab.page.locator("#want-form input[name=csrf]").evaluate("(input) => input.remove()")
    tab.page.locator("[data-testid=want-ref]").fill(daily_ref(date(2026, 1, 5)))
    tab.page.locator("[data-testid=want-submit]").click()
    expect(tab.page.locator("[data-testid=error-status]")).to_contain_text("403")
    assert world.api.service.log.head() == head, "nothing appended"


def test_the_watch_catches_an_inline_script(world: World, open_tab: Callable[[str], Tab]) -> None:
    """The CSP blocks an injected inline script, and the watch that fails tests on it sees it."""
    tab = open_tab(world.url)
    visit(tab, "/")
    with tab.page.expect_console_message(lambda message: "csp-violation" in message.text):
        tab.page.evaluate(
            "() => { const s = document.createElement('script'); s.textContent = 'window.ran = 1';"
            " document.body.appendChild(s); }"
        )
    assert tab.page.evaluate("window.ran") is None
    assert tab.watch.csp_violations and tab.watch.problems()
    tab.watch.console_errors.clear()  # seen: this test's page is otherwise clean


# --- access control -----------------------------------------------------------------------------------------


@dataclass
class Guarded:
    """A server over a database with tokens: its URL, its service, and a token per name."""

    api: ApiServer
    tokens: dict[str, str]


@pytest.fixture(scope="module")
def guarded(browser: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Guarded]:
    url = f"sqlite:///{tmp_path_factory.mktemp('browser-auth') / 'partbuild.db'}"
    with Database.open(url, auto_upgrade=True) as db:
        tokens = {
            name: db.tokens.add(name, role, now_ms=1) for name, role in [("rita", Role.READER), ("wes", Role.WRITER)]
        }
    with graphless_api_server(url) as api:
        # Something to write on: an active want (cancelable) and a Live ref (taintable).
        api.service.create_want(WantRequest(refs=[PENDING], want_id="w-open"))
        api.service.observe(ObserveRequest(ref=SHARED, location="/data/raw"))
        api.service.refresh()
        yield Guarded(api, tokens)


def sign_in(tab: Tab, token: str, path: str) -> None:
    """Ask for `path`, get sent to the sign-in form, sign in there, and land on `path`."""
    visit(tab, path)
    expect(tab.page).to_have_url(re.compile(r"/signin\?next="))
    tab.page.locator("[data-testid=signin-token]").fill(token)
    tab.page.locator("[data-testid=signin-submit]").click()
    expect(tab.page).to_have_url(re.compile(re.escape(path) + "$"))


def test_signing_in_through_the_form_gives_a_writer_the_forms(guarded: Guarded, open_tab: Callable[[str], Tab]) -> None:
    tab = open_tab(guarded.api.url)
    tab.watch.expect(r"status of 401")
    visit(tab, "/signin")
    tab.page.locator("[data-testid=signin-token]").fill("pbt_" + "A" * 43)
    tab.page.locator("[data-testid=signin-submit]").click()
    expect(tab.page.locator("[data-testid=form-error]")).to_be_visible()
    sign_in(tab, guarded.tokens["wes"], "/wants")
    expect(tab.page.locator("[data-testid=identity]")).to_have_text("wes (writer)")
    expect(tab.page.locator("#want-form")).to_be_visible()
    visit(tab, "/wants/w-open")
    expect(tab.page.locator("#cancel-want-form")).to_be_visible()
    visit(tab, "/partition?" + urlencode({"ref": SHARED}))
    expect(tab.page.locator("#taint-form")).to_be_visible()
    tab.page.locator("[data-testid=signout]").click()
    expect(tab.page).to_have_url(re.compile(r"/signin$"))
    visit(tab, "/wants")
    expect(tab.page).to_have_url(re.compile(r"/signin\?next="))


def test_a_reader_gets_no_forms_and_a_forced_post_is_refused(guarded: Guarded, open_tab: Callable[[str], Tab]) -> None:
    tab = open_tab(guarded.api.url)
    sign_in(tab, guarded.tokens["rita"], "/wants")
    expect(tab.page.locator("[data-testid=identity]")).to_have_text("rita (reader)")
    for path in ["/wants", "/wants/w-open", "/partition?" + urlencode({"ref": SHARED})]:
        visit(tab, path)
        expect(tab.page.locator("#main h1")).to_be_visible()
        assert tab.page.locator("form[action^='/actions/']").count() == 0, path
    head = guarded.api.service.log.head()
    tab.watch.expect(r"status of 403")
    # A hand-made form with a valid CSRF token (the sign-out form's), posted by the browser.
    tab.page.evaluate(
        """(ref) => {
          const form = document.createElement('form');
          form.method = 'post';
          form.action = '/actions/want';
          const fields = { csrf: document.querySelector('#signout-form input[name=csrf]').value,
                           mode: 'one', ref: ref, action: 'want' };
          for (const [name, value] of Object.entries(fields)) {
            const input = document.createElement('input');
            input.type = 'hidden'; input.name = name; input.value = value;
            form.appendChild(input);
          }
          document.body.appendChild(form);
          form.submit();
        }""",
        "some/ref",
    )
    expect(tab.page.locator("[data-testid=error-status]")).to_contain_text("403")
    expect(tab.page.locator("[data-testid=form-error]")).to_contain_text("rita (reader) may not change anything")
    assert guarded.api.service.log.head() == head, "nothing appended"
    # Reads work with the session alone: lineage.js fetches the API with the cookie, no bearer token.
    shared = guarded.api.service.state.canonical[SHARED]
    visit(tab, f"/instances/{shared}")
    assert _drawn_lineage(tab)[0] == {shared}
