"""A graph of a daily job and a weekly job built from two of its days, no Spark (plain files).

The weekly's code version is `$VERSIONED_CODE_VERSION` (default "v1"): served again with another value, every
Live weekly built before is stale, and no daily is (tests/api/test_code_versions.py, tests/e2e). With
`$VERSIONED_ON_CODE_CHANGE` set, the weekly declares `on_code_change`: the stale weeklies are rebuilt.
"""

from __future__ import annotations

import os
from pathlib import Path

from partbuild.orchestrator.context import JobContext
from partbuild.orchestrator.graph import Graph, Job, Partition
from partbuild.orchestrator.reactions import on_code_change


def write_rows(ctx: JobContext) -> None:
    for target in ctx.outputs:
        Path(target.location).mkdir(parents=True, exist_ok=True)
        (Path(target.location) / "rows.txt").write_text("1\n")
        ctx.record(target.ref, row_count=1)


def two_days(partition: Partition) -> list[str]:
    week = int(partition["week"])
    return [f"daily/day={2 * week}", f"daily/day={2 * week + 1}"]


graph = Graph(
    [
        Job("daily", ["daily/day={day:int}"], write_rows, max_concurrency=4, code_version="d1"),
        Job(
            "weekly",
            ["weekly/week={week:int}"],
            write_rows,
            inputs=two_days,
            max_concurrency=4,
            code_version=os.environ.get("VERSIONED_CODE_VERSION", "v1"),
            reactions=[on_code_change()] if os.environ.get("VERSIONED_ON_CODE_CHANGE") else [],
        ),
    ]
)
