"""The run page's log panel in a real headless Chromium: it follows a running run.

A real orchestrator runs a job (tests/data/graphs/logs_on_file.py, no Spark) that logs a line and
waits for a file; the test opens the run's page, sees the first line, creates the file, and sees the
job's next line appear without a reload. Any console error or CSP violation fails the test
(tests/kits/browserkit.py).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from playwright.sync_api import expect

from partbuild.api.models.wants import WantRequest
from partbuild.orchestrator.graph import load_graph
from partbuild.state.database import Database

from browserkit import Tab, mark_document, same_document, visit
from serverkit import orchestrated_api
from waitkit import wait_for

pytestmark = pytest.mark.browser
pytest_plugins = ["browserkit"]  # the `browser` and `open_tab` fixtures

GRAPH = Path(__file__).resolve().parents[1] / "data/graphs/logs_on_file.py"


def test_the_logs_panel_of_a_running_run_shows_a_line_logged_after_the_page_opened(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, open_tab: Callable[[str], Tab]
) -> None:
    monkeypatch.setenv("RUN_LOGS_ROOT", str(tmp_path))
    graph = load_graph(GRAPH)
    with (
        Database.open(f"sqlite:///{tmp_path / 'partbuild.db'}", auto_upgrade=True) as db,
        orchestrated_api(db, graph, tmp_path / "warehouse", None) as api,
    ):
        api.service.create_want(WantRequest(refs=["talker/1"], want_id="talk"))

        def running_run() -> str | None:
            api.service.live.catch_up()
            runs = api.service.job_runs(state_filter="running").items
            return runs[0].job_run_id if runs else None

        run_id = wait_for("the run to start", running_run)
        tab = open_tab(api.url)
        visit(tab, f"/runs/{run_id}")
        mark_document(tab.page)
        lines = tab.page.get_by_test_id("run-log-line")
        expect(lines).to_have_count(1)
        expect(lines.first).to_contain_text("waiting for")

        (tmp_path / "go").write_text("hello from the test\n")
        expect(lines.nth(1)).to_contain_text("the file says: hello from the test")
        expect(tab.page.get_by_test_id("run-log-status")).to_have_text("the run has ended")
        assert same_document(tab.page)  # appended in place, no reload
        assert [x.text for x in db.run_logs.lines(run_id)][:2] == [
            f"waiting for {tmp_path / 'go'}",
            "the file says: hello from the test",
        ]
