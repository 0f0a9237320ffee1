"""Take the README's screenshots of the web UI (docs/screenshots/*.png) against a real W1 state.

Run: `make screenshots` (or `.venv/bin/python tests/kits/browser_screenshots.py [OUT_DIR]`). Builds W1 over
14 days of generated clicks in a temporary folder with local Spark and the real orchestrator (every
weekly wanted; one daily tainted and rebuilt; then one daily tainted and left so, and one day's raw
files lost so its daily's rebuild fails for good), serves it on a free port, and photographs, in the
distribution's headless Chromium (tests/kits/browserkit.py) at 1280x800: the lineage graph of week
2026-W02's instance, the want tree, the dailies' partition grid (and filtered by a check), the job graph,
the failed run's page
(its log: the job's lines and the traceback), and the overview while a weekly rebuild is held in
flight. Takes about a minute.
"""

from __future__ import annotations

import sys
import tempfile
import threading
from dataclasses import dataclass, replace
from datetime import date
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "kits")]  # run as a script: the examples and the test kits

from examples.clicks.generate import generate_raw  # noqa: E402
from examples.clicks.pipeline import build_graph, daily_ref, raw_ref, weekly_ref, weeks_in_range  # noqa: E402
from partbuild.api.models.partitions import TaintRequest  # noqa: E402
from partbuild.api.models.wants import WantRequest  # noqa: E402
from partbuild.api.service import Service  # noqa: E402
from partbuild.orchestrator.graph import Graph  # noqa: E402
from partbuild.orchestrator.spark import spark_session  # noqa: E402
from partbuild.state.database import Database  # noqa: E402

from browserkit import LAUNCH_ARGS, Tab, chromium_path, new_tab, visit  # noqa: E402
from serverkit import orchestrated_api  # noqa: E402
from sparkkit import TEST_SPARK_CONF  # noqa: E402
from waitkit import wait_for  # noqa: E402

DAYS = 14
START = date(2026, 1, 1)
WANT_ID = "weekly-clicks"
WEEKLIES = [weekly_ref(week) for week in weeks_in_range(DAYS, START)]
LATE_DAY = date(2026, 1, 2)  # its daily is tainted and not rebuilt: the grid shows it tainted
LOST_DAY = date(2026, 1, 3)  # its raw files are lost: its daily's rebuild fails, retried, then for good
BUILD_S = 300.0  # generous: W1's first build on a loaded 2-core machine


@dataclass
class W1:
    """The served W1 state the photographs are taken of, and what shapes it."""

    service: Service
    clicks: Path  # the raw data's root
    gate: threading.Event  # weekly runs wait while it is clear
    weekly_uuid: str = ""  # week 2026-W02's instance once built


def wait_live(service: Service, refs: list[str]) -> dict[str, str]:
    """Each ref's canonical uuid once all are Live."""

    def uuids() -> dict[str, str] | None:
        service.refresh()
        found = {ref: service.state.canonical.get(ref, "") for ref in refs}
        return found if all(u and service.instance(u).state == "live" for u in found.values()) else None

    return wait_for(f"{refs} to be Live", uuids, BUILD_S)  # type: ignore[no-any-return]


def held_weeklies(graph: Graph, gate: threading.Event) -> Graph:
    """The graph with the weekly job waiting for `gate`, so the overview can show a run in flight."""

    def wrap(run: Any) -> Any:
        def held(ctx: Any) -> None:
            gate.wait(timeout=300)
            run(ctx)

        return held

    jobs = [replace(job, run=wrap(job.run)) if job.label == "weekly_clicks" else job for job in graph.jobs.values()]
    return Graph(jobs, graph.sources.values())


def build_state(w1: W1) -> None:
    """Want every weekly, taint a daily and rebuild; keeps week 2026-W02's instance uuid."""
    service = w1.service
    service.create_want(WantRequest(refs=WEEKLIES, want_id=WANT_ID, comment="W1 weekly clicks"))
    wait_live(service, WEEKLIES)
    service.taint(TaintRequest(ref=daily_ref(date(2026, 1, 6)), reason="late clicks arrived"))
    service.create_want(WantRequest(refs=WEEKLIES, want_id="weekly-clicks-rebuild", comment="after the taint"))
    w1.weekly_uuid = wait_live(service, WEEKLIES)[WEEKLIES[1]]


def spoil(w1: W1) -> str:
    """Taint LATE_DAY's daily (and so week 1's weekly); lose LOST_DAY's raw parquet files (its `_SUCCESS`
    stays, so the source still looks Live) and want its daily again: Spark cannot read the day, the
    attempts fail and the daily ends failed. Returns the last failed run's id."""
    service = w1.service
    service.taint(TaintRequest(ref=daily_ref(LATE_DAY), reason="late clicks arrived"))
    for part in (w1.clicks / raw_ref(LOST_DAY)).glob("*.parquet"):
        part.unlink()
    lost = daily_ref(LOST_DAY)
    service.taint(TaintRequest(ref=lost, reason="its raw files were lost", only_this_ref=True))
    service.create_want(WantRequest(refs=[lost], want_id="daily-lost-day", comment="rebuild the lost day"))

    def failed_run() -> str | None:
        service.refresh()
        if service.instance(service.state.canonical[lost]).state != "failed":
            return None
        runs = service.job_runs(state_filter="failed", job="daily_clicks").items
        return max(runs, key=lambda run: run.updated_seq).job_run_id

    return wait_for(f"{lost} to fail", failed_run, BUILD_S)  # type: ignore[no-any-return]


def hold_a_rebuild(w1: W1) -> None:
    """Taint another daily and want its weekly again while weekly runs are held: one run stays in flight."""
    w1.gate.clear()
    w1.service.taint(TaintRequest(ref=daily_ref(date(2026, 1, 13)), reason="a late file"))
    w1.service.create_want(WantRequest(refs=[WEEKLIES[2]], want_id="weekly-w03-again", comment="after the taint"))

    def held_run() -> bool:
        runs = w1.service.job_runs(limit=1000).items
        return any(run.state in ("queued", "running") and run.job_label == "weekly_clicks" for run in runs)

    wait_for("the held weekly run to start", held_run, BUILD_S)


def photograph(url: str, w1: W1, out: Path) -> None:
    """Every screenshot, in the order the state is shaped: lineage and want tree of the built state, then
    grid, job graph and run log once spoiled, then the overview with a run held in flight."""
    from playwright.sync_api import expect, sync_playwright

    path = chromium_path()
    if path is None:
        raise SystemExit("no Chromium: apt-get install chromium (or set PARTBUILD_CHROMIUM)")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=path, headless=True, args=LAUNCH_ARGS)
        _, tab = new_tab(browser, url)  # 1280x800, watched like the tests' pages
        page = tab.page
        visit(tab, f"/instances/{w1.weekly_uuid}?direction=upstream&depth=2")
        expect(page.locator("#lineage-status")).to_have_attribute("data-state", "drawn")
        page.locator("#lineage").scroll_into_view_if_needed()
        page.screenshot(path=out / "lineage.png")
        visit(tab, f"/wants/{WANT_ID}")
        page.locator("#want-tree").scroll_into_view_if_needed()
        page.screenshot(path=out / "want-tree.png")
        photograph_jobs(tab, spoil(w1), out)
        hold_a_rebuild(w1)
        visit(tab, "/")
        expect(page.locator("[data-testid=in-flight] [data-testid=run-row]")).not_to_have_count(0)
        page.screenshot(path=out / "overview.png")
        w1.gate.set()
        browser.close()
    if tab.watch.problems():
        raise SystemExit("the browser reported problems: " + "; ".join(tab.watch.problems()))


def photograph_jobs(tab: Tab, failed_run_id: str, out: Path) -> None:
    """The dailies' grid (a tainted and a failed day among Live ones), the job graph, the failed run's log."""
    from playwright.sync_api import expect

    page = tab.page
    visit(tab, "/jobs/daily_clicks")
    expect(page.locator(f"[data-testid=grid-cell][data-ref='{daily_ref(LOST_DAY)}']")).to_have_attribute(
        "data-state", "failed"
    )
    photograph_down_to(page, "[data-testid=grid-months]", out / "grid.png")
    visit(tab, "/jobs/daily_clicks?check=daily_not_empty&check_result=passed")  # which dailies passed their check
    expect(page.get_by_test_id("grid-check")).to_have_value("daily_not_empty")
    photograph_down_to(page, "[data-testid=grid-cells]", out / "grid-filter.png")
    visit(tab, "/jobs")
    expect(page.locator("#lineage-status")).to_have_attribute("data-state", "drawn")
    photograph_down_to(page, "[data-testid=job-graph-table]", out / "job-graph.png")
    visit(tab, f"/runs/{failed_run_id}")
    expect(page.get_by_test_id("run-log-status")).to_have_text("the run has ended")
    photograph_down_to(page, "[data-testid=run-logs]", out / "run-logs.png")


def photograph_down_to(page: Any, selector: str, path: Path) -> None:
    """The page from its top down to the bottom of `selector`'s element, at the viewport's width."""
    page.evaluate("window.scrollTo(0, 0)")  # so the element's box is in page coordinates
    box = page.locator(selector).bounding_box()
    width = page.viewport_size["width"]
    page.screenshot(
        path=path, full_page=True, clip={"x": 0, "y": 0, "width": width, "height": box["y"] + box["height"] + 12}
    )


def main(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    spark = spark_session(master="local[2]", app_name="partbuild-screenshots", conf=TEST_SPARK_CONF)
    spark.sparkContext.setLogLevel("ERROR")
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        generate_raw(spark, folder / "clicks", days=DAYS, rows_per_day=1000, start=START)
        gate = threading.Event()
        gate.set()
        graph = held_weeklies(build_graph(folder / "clicks", days=DAYS, start=START), gate)
        with (
            Database.open(f"sqlite:///{folder / 'partbuild.db'}", auto_upgrade=True) as db,
            orchestrated_api(db, graph, folder / "warehouse", spark) as api,
        ):
            w1 = W1(api.service, folder / "clicks", gate)
            try:
                build_state(w1)
                photograph(api.url, w1, out)
            finally:
                gate.set()  # a held run must end for the orchestrator to stop
    spark.stop()
    print(f"wrote {', '.join(sorted(p.name for p in out.glob('*.png')))} to {out}")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "docs" / "screenshots")
