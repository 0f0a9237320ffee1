"""A graph whose one job writes a small file and whose check waits while `$HELD_CHECK_ROOT/hold` exists.

tests/e2e/test_checks_crash_processes.py kills an orchestrator while the check is held
(after the job function returned, before the run's outcome is recorded). No Spark: the
job and the check use plain files. Each check writes `checking-<instance uuid>` first,
so the test sees from outside that the gate is running.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from partbuild.orchestrator.checks import Check, CheckContext, CheckOutcome
from partbuild.orchestrator.context import JobContext
from partbuild.orchestrator.graph import Graph, Job

ROOT = Path(os.environ["HELD_CHECK_ROOT"])


def write_report(ctx: JobContext) -> None:
    for target in ctx.outputs:
        Path(target.location).mkdir(parents=True, exist_ok=True)
        (Path(target.location) / "rows.txt").write_text("1\n2\n3\n")
        ctx.record(target.ref, row_count=3)


def three_rows_held(ctx: CheckContext) -> CheckOutcome:
    (ROOT / f"checking-{ctx.instance_uuid}").write_text(ctx.ref)
    deadline = time.monotonic() + 120
    while (ROOT / "hold").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    rows = len((Path(ctx.location) / "rows.txt").read_text().split())
    return CheckOutcome(rows == 3, f"{rows} rows", {"rows": rows})


graph = Graph([Job("report", ["report/{n:int}"], write_report, checks=[Check("three_rows", three_rows_held)])])
