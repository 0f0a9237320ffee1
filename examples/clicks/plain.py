"""The benchmark floor for W1: the same Spark work as the partbuild graph, as a plain loop on one session.

It calls the very functions the job functions call (`write_daily`, `write_weekly`
in `pipeline.py`), so the only difference from a partbuild build is the orchestration.
"""

from __future__ import annotations

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


def run_plain(spark: Any, data_root: str | Path, out_root: str | Path, days: int = 28, start: date = START) -> None:
    """Build every daily, then every weekly partition of W1 from `data_root` into `out_root`, in order."""
    data, out = Path(data_root).absolute(), Path(out_root).absolute()
    for day in days_in_range(days, start):
        write_daily(spark, str(data / raw_ref(day)), str(out / daily_ref(day)))
    for week in weeks_in_range(days, start):
        daily_locations = [str(out / daily_ref(day)) for day in week_days_in_range(week, days, start)]
        write_weekly(spark, daily_locations, str(out / weekly_ref(week)))
