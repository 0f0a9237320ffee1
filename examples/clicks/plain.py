"""The benchmark floor for W1: the same Spark work as the partbuild graph, as a plain loop on one session.

It calls the very functions the job functions call (`write_daily`, `write_weekly`
in `pipeline.py`), so the only difference from a partbuild build is the orchestration.
With `threads=2` the writes of each stage run two at a time (two Spark jobs at once),
as partbuild runs two job runs at once: the floor `bench/w1_floor.py` measures.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import date
from pathlib import Path
from typing import Any

from examples.clicks.pipeline import (
    START,
    daily_ref,
    days_in_range,
    raw_ref,
    week_days_in_range,
    weekly_ref,
    weeks_in_range,
    write_daily,
    write_weekly,
)


def run_plain(
    spark: Any, data_root: str | Path, out_root: str | Path, days: int = 28, start: date = START, threads: int = 1
) -> None:
    """Build every daily, then every weekly partition of W1 from `data_root` into `out_root`.

    `threads`: how many writes of a stage run at once (1: in order, one after the other).
    """
    data, out = Path(data_root).absolute(), Path(out_root).absolute()
    dailies = [
        (write_daily, (spark, str(data / raw_ref(day)), str(out / daily_ref(day))))
        for day in days_in_range(days, start)
    ]
    weeklies = [
        (
            write_weekly,
            (
                spark,
                [str(out / daily_ref(day)) for day in week_days_in_range(week, days, start)],
                str(out / weekly_ref(week)),
            ),
        )
        for week in weeks_in_range(days, start)
    ]
    for stage in (dailies, weeklies):  # every weekly reads dailies: a stage ends before the next starts
        _run_stage(stage, threads)


def _run_stage(writes: Sequence[tuple[Callable[..., None], tuple[Any, ...]]], threads: int) -> None:
    if threads <= 1:
        for write, args in writes:
            write(*args)
        return
    with ThreadPoolExecutor(max_workers=threads, thread_name_prefix="plain") as pool:
        for done in [pool.submit(write, *args) for write, args in writes]:
            done.result()  # a failed write fails the loop, as it would in order
