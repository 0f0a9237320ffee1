"""A graph whose one job logs a line, waits for `$RUN_LOGS_ROOT/go` to appear, then logs what it holds.

tests/e2e/test_run_logs_browser.py opens the run page while the job waits, creates the file and
watches the line appear in the page's log panel. No Spark: the job writes a plain file.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from partbuild.orchestrator.context import JobContext
from partbuild.orchestrator.graph import Graph, Job

ROOT = Path(os.environ["RUN_LOGS_ROOT"])


def talk(ctx: JobContext) -> None:
    ctx.log.info("waiting for %s", ROOT / "go")
    deadline = time.monotonic() + 120
    while not (ROOT / "go").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    ctx.log.info("the file says: %s", (ROOT / "go").read_text().strip())
    for target in ctx.outputs:
        Path(target.location).mkdir(parents=True, exist_ok=True)
        (Path(target.location) / "done.txt").write_text("done\n")


graph = Graph([Job("talker", ["talker/{n:int}"], talk)])
