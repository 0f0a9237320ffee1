"""A graph for automation in real processes, without Spark (tests/e2e/test_automation_processes.py).

`daily/day=D` copies the location of `raw/day=D` (a source observed by the test) into a small file, and reacts to
new raw data with `on_upstream_change`, debounced `$REACTING_DEBOUNCE_S` seconds (default 3). With
`$REACTING_SCHEDULES=1` three schedules tick too: `every_second` (a cron with a seconds field), `every_two` (an
interval of 2 s) and `broken` (every second, its function raises); none of them wants anything.
"""

from __future__ import annotations

import datetime as dt
import os
from pathlib import Path

from partbuild.orchestrator.context import JobContext
from partbuild.orchestrator.graph import Graph, Job, Partition, SourceDataset
from partbuild.orchestrator.reactions import on_upstream_change
from partbuild.orchestrator.schedules import Schedule


def copy_location(ctx: JobContext) -> None:
    for target in ctx.outputs:
        Path(target.location).mkdir(parents=True, exist_ok=True)
        (Path(target.location) / "from.txt").write_text(" ".join(ctx.inputs(daily_inputs(target.partition))))


def daily_inputs(partition: Partition) -> list[str]:
    return [f"raw/day={partition['day']}"]


def nothing(tick: dt.datetime) -> list[str]:
    return []


def no_calendar(tick: dt.datetime) -> list[str]:
    raise LookupError(f"no calendar for {tick:%Y-%m-%d}")


debounce = dt.timedelta(seconds=float(os.environ.get("REACTING_DEBOUNCE_S", "3")))
daily = Job("daily", ["daily/day={day}"], copy_location, inputs=daily_inputs, reactions=[on_upstream_change(debounce)])
raw = SourceDataset("raw", "raw/day={day}", locate=lambda partition: None)
schedules = [
    Schedule("every_second", nothing, cron="* * * * * *"),
    Schedule("every_two", nothing, every=dt.timedelta(seconds=2)),
    Schedule("broken", no_calendar, every=dt.timedelta(seconds=1)),
]
graph = Graph([daily], [raw], schedules=schedules if os.environ.get("REACTING_SCHEDULES") == "1" else [])
