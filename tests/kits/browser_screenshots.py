"""Take the README's screenshots of the web UI (docs/screenshots/*.png) against a real W1 state.

Run: `make screenshots` (or `.venv/bin/python tests/kits/browser_screenshots.py [OUT_DIR]`). Builds W1 over
14 days of generated clicks in a temporary folder with local Spark and the real orchestrator (every
weekly wanted; one daily tainted and rebuilt, so the overview shows a tainted instance), serves it on
a free port, and photographs the lineage graph of week 2026-W02's instance, the want tree, and the
overview while a weekly rebuild is held in flight, in the distribution's headless Chromium
(tests/kits/browserkit.py) at 1280x800. Takes about a minute.
"""

from __future__ import annotations

import sys
import tempfile
import threading
import time
from dataclasses import replace
from datetime import date
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "kits")]  # run as a script: the examples and the test kits

from examples.clicks.generate import generate_raw  # noqa: E402
from examples.clicks.pipeline import build_graph, daily_ref, weekly_ref, weeks_in_range  # noqa: E402
from partbuild.api.models.partitions import TaintRequest  # noqa: E402
from partbuild.api.models.wants import WantRequest  # noqa: E402
from partbuild.api.service import Service  # noqa: E402
from partbuild.orchestrator.graph import Graph  # noqa: E402
from partbuild.orchestrator.loop import Orchestrator  # noqa: E402
from partbuild.orchestrator.spark import spark_session  # noqa: E402
from partbuild.state.database import Database  # noqa: E402

from browserkit import LAUNCH_ARGS, chromium_path, new_tab  # noqa: E402
from serverkit import serve_service  # noqa: E402
from sparkkit import TEST_SPARK_CONF  # noqa: E402

DAYS = 14
START = date(2026, 1, 1)
WANT_ID = "weekly-clicks"


def wait_live(service: Service, refs: list[str], timeout_s: float = 300) -> dict[str, str]:
    """Each ref's canonical uuid once all are Live."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        service.refresh()
        uuids = {ref: service.state.canonical.get(ref, "") for ref in refs}
        if all(uuid and service.instance(uuid).state == "live" for uuid in uuids.values()):
            return uuids
        time.sleep(0.1)
    raise SystemExit(f"not Live within {timeout_s} s: {refs}")


WEEKLIES = [weekly_ref(week) for week in weeks_in_range(DAYS, START)]


def held_weeklies(graph: Graph, gate: threading.Event) -> Graph:
    """The graph with the weekly job waiting for `gate`, so the overview can show a run in flight."""

    def wrap(run: Any) -> Any:
        def held(ctx: Any) -> None:
            gate.wait(timeout=300)
            run(ctx)

        return held

    jobs = [replace(job, run=wrap(job.run)) if job.label == "weekly_clicks" else job for job in graph.jobs.values()]
    return Graph(jobs, graph.sources.values())


def build_state(service: Service) -> str:
    """Want every weekly, taint a daily and rebuild; returns week 2026-W02's instance uuid."""
    service.create_want(WantRequest(refs=WEEKLIES, want_id=WANT_ID, comment="W1 weekly clicks"))
    wait_live(service, WEEKLIES)
    service.taint(TaintRequest(ref=daily_ref(date(2026, 1, 6)), reason="late clicks arrived"))
    service.create_want(WantRequest(refs=WEEKLIES, want_id="weekly-clicks-rebuild", comment="after the taint"))
    return wait_live(service, WEEKLIES)[WEEKLIES[1]]


def hold_a_rebuild(service: Service, gate: threading.Event) -> None:
    """Taint another daily and want its weekly again while weekly runs are held: one run stays in flight."""
    gate.clear()
    service.taint(TaintRequest(ref=daily_ref(date(2026, 1, 13)), reason="a late file"))
    service.create_want(WantRequest(refs=[WEEKLIES[2]], want_id="weekly-w03-again", comment="after the taint"))
    deadline = time.monotonic() + 300
    while not any(run.state in ("queued", "running") and run.job_label == "weekly_clicks" for run in _runs(service)):
        if time.monotonic() > deadline:
            raise SystemExit("the held weekly run never started")
        time.sleep(0.1)


def _runs(service: Service) -> list[Any]:
    return service.job_runs(limit=1000).items


def photograph(url: str, weekly_uuid: str, out: Path, service: Service, gate: threading.Event) -> None:
    from playwright.sync_api import expect, sync_playwright

    path = chromium_path()
    if path is None:
        raise SystemExit("no Chromium: apt-get install chromium (or set PARTBUILD_CHROMIUM)")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=path, headless=True, args=LAUNCH_ARGS)
        _, tab = new_tab(browser, url)  # 1280x800, watched like the tests' pages
        page = tab.page
        page.goto(f"/instances/{weekly_uuid}?direction=upstream&depth=2")
        expect(page.locator("#lineage-status")).to_have_attribute("data-state", "drawn")
        page.locator("#lineage").scroll_into_view_if_needed()
        page.screenshot(path=out / "lineage.png")
        page.goto(f"/wants/{WANT_ID}")
        page.locator("#want-tree").scroll_into_view_if_needed()
        page.screenshot(path=out / "want-tree.png")
        hold_a_rebuild(service, gate)
        page.goto("/")
        expect(page.locator("[data-testid=in-flight] [data-testid=run-row]")).not_to_have_count(0)
        page.screenshot(path=out / "overview.png")
        gate.set()
        browser.close()
    if tab.watch.problems():
        raise SystemExit("the browser reported problems: " + "; ".join(tab.watch.problems()))


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
        with Database.open(f"sqlite:///{folder / 'partbuild.db'}", auto_upgrade=True) as db:
            orchestrator = Orchestrator(db, graph, warehouse=str(folder / "warehouse"), spark=spark)
            stop = threading.Event()
            thread = threading.Thread(target=orchestrator.run, args=(stop,), daemon=True)
            thread.start()
            try:
                with serve_service(Service(db, graph=graph, on_append=orchestrator.wake)) as api:
                    photograph(api.url, build_state(api.service), out, api.service, gate)
            finally:
                gate.set()
                stop.set()
                thread.join(timeout=120)
    spark.stop()
    print(f"wrote {', '.join(sorted(p.name for p in out.glob('*.png')))} to {out}")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "docs" / "screenshots")
