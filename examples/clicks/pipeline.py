"""The W1 clicks pipeline as a partbuild graph: raw clicks -> daily counts -> ISO-weekly counts.

- source `raw/clicks/date=YYYY-MM-DD`: parquet (user_id int, url string, ts timestamp), see `generate.py`;
- `agg/daily_clicks/date=YYYY-MM-DD`: `groupBy(url).count()` of that day's raw partition;
- `agg/weekly_clicks/week=YYYY-Www`: the week's in-range daily partitions, `groupBy(url).sum(count)`.

`partbuild` loads this file with `load_graph`, which calls `graph()`: data root and
day count come from `PARTBUILD_CLICKS_ROOT` (default `clicks-data`) and
`PARTBUILD_CLICKS_DAYS` (default 28). The Spark work lives in `daily_counts` /
`weekly_counts`, shared with the plain-loop floor in `plain.py` (`write_daily` /
`write_weekly`), so both do provably the same work; the job functions write with
`ctx.write` (parquet, overwrite, as those do), which computes the checks as it writes.

The raw source is found one of two ways. By default `locate` checks a wanted day's
directory for Spark's `_SUCCESS` marker. With `build_graph(..., raw_discovery=...)`
(or `PARTBUILD_CLICKS_DISCOVER=1` for `graph()`: a filesystem discovery of
`<root>/raw/clicks`, keys `date={date:date}`) partbuild also scans the raw data,
records every day with its size and version, and notices a rewritten day: the
daily and weekly built from it are rebuilt. Raw data Spark cannot read directly
(an object store without its Hadoop connector) is copied to a local directory by
`stage_raw` before the daily job reads it.

Only `partbuild.*` is imported at module level (this file is also imported by
path, outside any package), and pyspark only inside the Spark functions, so
loading the graph needs no Spark.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from datetime import date, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from partbuild.examples.clicks.isoweek import IsoWeek
from partbuild.orchestrator.checks import Check, CheckContext, CheckOutcome, own_rows
from partbuild.orchestrator.context import JobContext, PermanentJobError
from partbuild.orchestrator.graph import Graph, Job, Partition, PartitionPattern, SourceDataset
from partbuild.orchestrator.reactions import on_upstream_change
from partbuild.orchestrator.schedules import CatchUp, Schedule

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from partbuild.orchestrator.sources.discovery import Discovery

RAW = "raw/clicks/date={date:date}"
DAILY = "agg/daily_clicks/date={date:date}"
WEEKLY = "agg/weekly_clicks/week={week:isoweek}"
START = date(2026, 1, 1)
RAW_KEYS = "date={date:date}"  # a raw day's directory under `<root>/raw/clicks`, for discovery

_RAW = PartitionPattern(RAW)
_DAILY = PartitionPattern(DAILY)
_WEEKLY = PartitionPattern(WEEKLY)


def raw_ref(day: date) -> str:
    """`raw/clicks/date=YYYY-MM-DD`."""
    return _RAW.format(date=day)


def daily_ref(day: date) -> str:
    """`agg/daily_clicks/date=YYYY-MM-DD`."""
    return _DAILY.format(date=day)


def weekly_ref(week: IsoWeek) -> str:
    """`agg/weekly_clicks/week=YYYY-Www`."""
    return _WEEKLY.format(week=week)


def days_in_range(days: int, start: date = START) -> list[date]:
    """The `days` consecutive days from `start`."""
    return [start + timedelta(days=offset) for offset in range(days)]


def weeks_in_range(days: int, start: date = START) -> list[IsoWeek]:
    """The ISO weeks with at least one of the `days` days from `start`, in order."""
    return sorted({IsoWeek.of(day) for day in days_in_range(days, start)})


def week_days_in_range(week: IsoWeek, days: int, start: date = START) -> list[date]:
    """The days of `week` that fall in `[start, start + days)`; empty for a week outside the range."""
    end = start + timedelta(days=days)
    return [day for day in week.days() if start <= day < end]


# --- The Spark work, shared by the job functions and the plain loop ---------------------------


def daily_counts(raw: DataFrame) -> DataFrame:
    """Clicks per url in one day's raw data: columns url, count."""
    return raw.groupBy("url").count()


def weekly_counts(daily: DataFrame) -> DataFrame:
    """Sum of daily counts per url: columns url, count."""
    from pyspark.sql import functions as F

    return daily.groupBy("url").agg(F.sum("count").alias("count"))


def write_daily(spark: Any, raw_location: str, location: str) -> None:
    """Read one raw partition, count per url, write parquet to `location`."""
    # Overwrite is safe: partbuild gives every instance its own location.
    daily_counts(spark.read.parquet(raw_location)).write.mode("overwrite").parquet(location)


def write_weekly(spark: Any, daily_locations: Sequence[str], location: str) -> None:
    """Read the daily partitions in one scan, sum per url, write parquet to `location`."""
    weekly_counts(spark.read.parquet(*daily_locations)).write.mode("overwrite").parquet(location)


# --- Job functions -------------------------------------------------------------------------------


def run_daily(ctx: JobContext, *, stage_raw: Callable[[str], str] | None = None) -> None:
    """Build each daily partition of the batch from the raw partition of the same day.

    `stage_raw` maps a raw location Spark cannot read (e.g. `s3a://...` without the
    Hadoop S3 connector) to a local directory holding a copy of it.
    """
    # All inputs are looked up before any Spark work: a batch with absent raw days
    # fails fast, and its MissingInputs names every absent ref at once.
    raw_locations = ctx.inputs(raw_ref(target.partition["date"]) for target in ctx.outputs)
    for target, raw_location in zip(ctx.outputs, raw_locations, strict=True):
        readable = stage_raw(raw_location) if stage_raw is not None else raw_location
        ctx.log.info("%s: counting clicks per url in %s", target.ref, readable)
        # `ctx.write`: what `write_daily` does, with the daily's checks computed as it writes.
        ctx.write(target.ref, daily_counts(ctx.spark.read.parquet(readable)))


def run_weekly(ctx: JobContext, *, days: int = 28, start: date = START) -> None:
    """Build each weekly partition from its week's daily partitions inside `[start, start + days)`."""
    plans: list[tuple[str, str, list[str]]] = []  # (ref, location, its dailies' refs)
    for target in ctx.outputs:
        week: IsoWeek = target.partition["week"]
        refs = [daily_ref(day) for day in week_days_in_range(week, days, start)]
        if not refs:
            # Retrying cannot conjure days: the graph's range does not reach this week.
            last = start + timedelta(days=days - 1)
            raise PermanentJobError(f"{target.ref}: no day of {week} is in the pipeline's range {start}..{last}")
        plans.append((target.ref, target.location, refs))
    all_refs = [ref for _, _, refs in plans for ref in refs]
    located = dict(zip(all_refs, ctx.inputs(all_refs), strict=True))
    for weekly, _, refs in plans:
        ctx.log.info("%s: summing the clicks per url of its %d dailies", weekly, len(refs))
        # `ctx.write`: what `write_weekly` does, with the weekly's total computed as it writes.
        ctx.write(weekly, weekly_counts(ctx.spark.read.parquet(*(located[ref] for ref in refs))))


# --- Quality checks (orchestrator/checks.py): run on each output before it may go Live -----------


def _clicks() -> dict[str, Any]:
    """The output's total clicks: the sum of its `count` column (computed as the job writes it)."""
    from pyspark.sql import functions as F

    return {"clicks": F.sum("count")}


def _daily_outcome(values: Mapping[str, Any]) -> CheckOutcome:
    rows, clicks = int(values["rows"]), int(values["clicks"] or 0)
    return CheckOutcome(rows >= 1, f"{rows} urls, {clicks} clicks", {"rows": rows, "clicks": clicks})


def dailies_clicks(context: CheckContext) -> dict[str, int]:
    """The clicks of the weekly's dailies, as each daily's own check counted them when it was built.

    A daily checked before its check recorded its clicks is read again (one aggregation over those).
    """
    found = {
        ref: context.input_metrics.get(ref, {}).get("daily_not_empty", {}).get("clicks")
        for ref in context.input_locations
    }
    total = sum(int(clicks) for clicks in found.values() if clicks is not None)
    unrecorded = [context.input_locations[ref] for ref, clicks in found.items() if clicks is None]
    if unrecorded:
        from pyspark.sql import functions as F

        total += context.spark.read.parquet(*unrecorded).agg(F.sum("count")).first()[0] or 0
    return {"dailies": total}


def _weekly_outcome(values: Mapping[str, Any]) -> CheckOutcome:
    total, dailies = int(values["clicks"] or 0), int(values["dailies"])
    return CheckOutcome(
        total == dailies, f"{total} clicks in the week, {dailies} in its dailies", {"total": total, "dailies": dailies}
    )


# A daily is not empty, and records its clicks; a weekly's clicks are its dailies' (as they recorded them).
# Both are computed as the jobs write their outputs: the gate reads no output back.
DAILY_CHECKS = (Check.aggregate("daily_not_empty", _clicks, _daily_outcome, row_counts=own_rows),)
WEEKLY_CHECKS = (Check.aggregate("weekly_total_matches_dailies", _clicks, _weekly_outcome, recorded=dailies_clicks),)


# --- The graph -----------------------------------------------------------------------------------


def build_graph(
    data_root: str | Path,
    days: int = 28,
    start: date = START,
    daily_batch: int = 7,
    *,
    raw_discovery: Discovery | None = None,
    stage_raw: Callable[[str], str] | None = None,
    checks: bool = True,
    publish: str | None = None,
    schedule: bool = False,
) -> Graph:
    """The W1 graph over raw data under `data_root`, for the `days` days from `start`.

    `raw_discovery`: scan for raw days (its keys relative to its root, e.g. `RAW_KEYS`
    under `<data_root>/raw/clicks`) instead of checking wanted days under `data_root`.
    `stage_raw`: see `run_daily`. `checks`: declare the quality checks (a daily is not
    empty, a weekly's total is the sum of its dailies'); the benchmark against the plain
    loop, which checks nothing, leaves them out. `publish`: a database name: the dailies and
    weeklies are published as its tables `daily_clicks` and `weekly_clicks` (off by default). Both jobs react
    to new upstream data (10 s of debounce): a new raw day rebuilds its daily, then its week. `schedule`:
    `nightly_weeklies`.
    """
    root = Path(data_root).absolute()  # so locations stay valid whatever the job process's working directory

    def locate_raw(partition: Partition) -> str | None:
        # Spark writes _SUCCESS last: a directory without it is absent or half-written.
        directory = root / partition.ref
        return str(directory) if (directory / "_SUCCESS").is_file() else None

    def daily_inputs(partition: Partition) -> list[str]:
        return [raw_ref(partition["date"])]

    def weekly_inputs(partition: Partition) -> list[str]:
        return [daily_ref(day) for day in week_days_in_range(partition["week"], days, start)]

    def run_weekly_in_range(ctx: JobContext) -> None:
        """`run_weekly` over this graph's day range."""
        run_weekly(ctx, days=days, start=start)

    def run_daily_staged(ctx: JobContext) -> None:
        """`run_daily`, reading raw data through `stage_raw`."""
        run_daily(ctx, stage_raw=stage_raw)

    found_by: dict[str, Any] = {"locate": locate_raw} if raw_discovery is None else {"discovery": raw_discovery}
    raw = SourceDataset("raw_clicks", RAW, **found_by)
    daily_run = run_daily if stage_raw is None else run_daily_staged
    reacting = [on_upstream_change(debounce=timedelta(seconds=10))]
    both: dict[str, Any] = {"max_concurrency": 2, "uses_spark": True, "reactions": reacting}  # `run` starts Spark
    daily = Job("daily_clicks", [DAILY], run=daily_run, inputs=daily_inputs, batch_size=daily_batch, **both)
    weekly = Job("weekly_clicks", [WEEKLY], run=run_weekly_in_range, inputs=weekly_inputs, **both)
    if checks:
        daily, weekly = replace(daily, checks=DAILY_CHECKS), replace(weekly, checks=WEEKLY_CHECKS)
    if publish is not None:
        daily, weekly = (
            replace(daily, publish=f"{publish}.daily_clicks"),
            replace(weekly, publish=f"{publish}.weekly_clicks"),
        )
    return Graph(jobs=[daily, weekly], sources=[raw], schedules=[nightly_weeklies(days, start)] if schedule else [])


def nightly_weeklies(days: int, start: date) -> Schedule:
    """At 02:30 UTC, want every weekly of the range: a week missing anything is built again."""
    weeklies = [weekly_ref(week) for week in weeks_in_range(days, start)]
    return Schedule("nightly_weeklies", lambda tick: weeklies, cron="30 2 * * *", catch_up=CatchUp.NONE)


def graph() -> Graph:
    """The graph `load_graph` picks up: root and day count from PARTBUILD_CLICKS_ROOT / PARTBUILD_CLICKS_DAYS.

    With PARTBUILD_CLICKS_DISCOVER=1 the raw days are discovered by scanning `<root>/raw/clicks`; with
    PARTBUILD_CLICKS_PUBLISH=DB the dailies and weeklies are published as tables of database DB; with
    PARTBUILD_CLICKS_CHECKS=0 the quality checks are left out (the floor benchmarks check nothing); with
    PARTBUILD_CLICKS_SCHEDULE=0 the nightly schedule is (the tests' runs must not tick at 02:30).
    """
    root = Path(os.environ.get("PARTBUILD_CLICKS_ROOT", "clicks-data")).absolute()
    discovery = None
    if os.environ.get("PARTBUILD_CLICKS_DISCOVER") == "1":
        from partbuild.orchestrator.sources.discovery import filesystem_discovery

        discovery = filesystem_discovery(root / "raw" / "clicks", RAW_KEYS)
    days = int(os.environ.get("PARTBUILD_CLICKS_DAYS", "28"))
    return build_graph(
        root,
        days,
        raw_discovery=discovery,
        checks=os.environ.get("PARTBUILD_CLICKS_CHECKS", "1") != "0",
        publish=os.environ.get("PARTBUILD_CLICKS_PUBLISH") or None,
        schedule=os.environ.get("PARTBUILD_CLICKS_SCHEDULE", "1") != "0",
    )


def main(argv: list[str] | None = None) -> None:
    """`python -m examples.clicks.pipeline weekly-refs [--days 28]`: print the weekly refs to want."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m examples.clicks.pipeline")
    parser.add_argument("what", choices=["weekly-refs"])
    parser.add_argument("--days", type=int, default=int(os.environ.get("PARTBUILD_CLICKS_DAYS", "28")))
    args = parser.parse_args(argv)
    print("\n".join(weekly_ref(week) for week in weeks_in_range(args.days)))


if __name__ == "__main__":
    main()
