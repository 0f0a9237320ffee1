"""A graph with one interval schedule and a job that writes a small file: automation without Spark.

tests/e2e/test_schedules_processes.py runs orchestrators on it. The schedule `often`
ticks every `$TICKING_EVERY_S` seconds (default 2) and wants `report/<tick's unix time>`;
its catch-up policy is `$TICKING_CATCH_UP` (latest, all or none; default latest).
"""

from __future__ import annotations

import datetime as dt
import os
from pathlib import Path

from partbuild.orchestrator.context import JobContext
from partbuild.orchestrator.graph import Graph, Job
from partbuild.orchestrator.schedules import CatchUp, Schedule


def write_report(ctx: JobContext) -> None:
    for target in ctx.outputs:
        Path(target.location).mkdir(parents=True, exist_ok=True)
        (Path(target.location) / "report.txt").write_text(target.ref)


def wanted(tick: dt.datetime) -> list[str]:
    return [f"report/{int(tick.timestamp())}"]


often = Schedule(
    "often",
    every=dt.timedelta(seconds=float(os.environ.get("TICKING_EVERY_S", "2"))),
    want=wanted,
    catch_up=CatchUp(os.environ.get("TICKING_CATCH_UP", "latest")),
    catch_up_window=dt.timedelta(minutes=1),
    comment="a report every few seconds",
)
graph = Graph([Job("report", ["report/{t:int}"], write_report)], schedules=[often])
