"""A small graph for checks run again (orchestrator/rechecks.py) without Spark: raw -> daily -> rollup, in text files.

The daily is the raw value * 10, the rollup the daily + 1; the daily's checks are whatever a test gives `graph`.
"""

from __future__ import annotations

from pathlib import Path

from partbuild.orchestrator.checks import Check, CheckContext, CheckOutcome
from partbuild.orchestrator.context import JobContext
from partbuild.orchestrator.graph import Graph, Job, Partition, SourceDataset

DAILY, ROLLUP, RAW = "daily/d=1", "rollup/d=1", "raw/d=1"


def value(location: str) -> int:
    return int((Path(location) / "value.txt").read_text())


def write(location: str, number: int) -> None:
    Path(location).mkdir(parents=True, exist_ok=True)
    (Path(location) / "value.txt").write_text(str(number))


def graph(root: Path, *checks: Check) -> Graph:
    """raw (a file) -> daily (value * 10, with `checks`) -> rollup (value + 1)."""

    def locate(partition: Partition) -> str | None:
        location = root / "raw"
        return str(location) if location.exists() else None

    def run_daily(ctx: JobContext) -> None:
        for target in ctx.outputs:
            write(target.location, value(ctx.input(RAW)) * 10)

    def run_rollup(ctx: JobContext) -> None:
        for target in ctx.outputs:
            write(target.location, value(ctx.input(DAILY)) + 1)

    return Graph(
        [
            Job("daily", ["daily/d={d:int}"], run_daily, inputs=lambda p: [f"raw/d={p['d']}"], checks=checks),
            Job("rollup", ["rollup/d={d:int}"], run_rollup, inputs=lambda p: [f"daily/d={p['d']}"]),
        ],
        [SourceDataset("raw", "raw/d={d:int}", locate=locate)],
    )


def at_most(limit: int, *, blocking: bool = True, seen: list[CheckContext] | None = None) -> Check:
    def check(ctx: CheckContext) -> CheckOutcome:
        if seen is not None:
            seen.append(ctx)
        found = value(ctx.location)
        return CheckOutcome(found <= limit, f"value {found} (at most {limit})", {"value": found})

    return Check(f"at_most_{limit}", check, blocking=blocking)


def broken(ctx: CheckContext) -> CheckOutcome:
    raise ValueError("no such column")
