"""Generate the W1 raw clicks: one parquet directory per day under `{root}/raw/clicks/date=YYYY-MM-DD/`.

Row i (0..R-1) of a day: user_id = (i*7919) % 1000 (int), url = "/p/" + str(i % 50),
ts = that day's midnight UTC + (i % 86400) seconds.

    python -m examples.clicks.generate --root clicks-data --days 28 --rows 20000
"""

from __future__ import annotations

import argparse
import calendar
from datetime import date
from pathlib import Path
from typing import Any

from examples.clicks.pipeline import START, days_in_range, raw_ref


def generate_raw(
    spark: Any, data_root: str | Path, days: int = 28, rows_per_day: int = 20000, start: date = START
) -> list[str]:
    """Write every raw partition of the `days` days from `start` (replacing old ones); return their refs."""
    from pyspark.sql import functions as F

    if days < 1 or rows_per_day < 1:
        raise ValueError("days and rows_per_day must be at least 1")
    root = Path(data_root).absolute()
    base = root / "raw" / "clicks"
    # One range split into exactly one slice per day (slice k holds ids [k*R, (k+1)*R)),
    # so one Spark job writes one file per day directory and needs no shuffle.
    ids = spark.range(0, days * rows_per_day, 1, numPartitions=days)
    day = F.expr(f"id div {rows_per_day}")  # integral division: the day index
    i = F.col("id") % F.lit(rows_per_day)
    midnight = calendar.timegm(start.timetuple())  # start's midnight UTC, in epoch seconds
    raw = ids.select(
        (i * F.lit(7919) % F.lit(1000)).cast("int").alias("user_id"),
        F.concat(F.lit("/p/"), (i % F.lit(50)).cast("string")).alias("url"),
        # timestamp_seconds is an instant: independent of the session time zone.
        F.timestamp_seconds(F.lit(midnight) + day * F.lit(86400) + i % F.lit(86400)).alias("ts"),
        # A DATE partition column renders as yyyy-MM-dd in the directory name, again zone-free.
        F.date_add(F.lit(start), day.cast("int")).alias("date"),
    )
    raw.write.mode("overwrite").partitionBy("date").parquet(str(base))
    # partitionBy writes a single _SUCCESS at the table root; the source's presence check
    # is per day, so mark each day directory once the whole write has committed.
    refs: list[str] = []
    for current in days_in_range(days, start):
        ref = raw_ref(current)
        directory = root / ref  # the directory the raw source's locate() checks
        if not directory.is_dir():
            raise RuntimeError(f"Spark wrote no directory for {ref} under {base}")
        (directory / "_SUCCESS").touch()
        refs.append(ref)
    return refs


def main(argv: list[str] | None = None) -> None:
    """CLI: generate the W1 raw data with a local SparkSession."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", required=True, help="data root; raw data goes to ROOT/raw/clicks/")
    parser.add_argument("--days", type=int, default=28, help="number of days from --start (default 28)")
    parser.add_argument("--rows", type=int, default=20000, help="rows per day (default 20000)")
    parser.add_argument("--start", type=date.fromisoformat, default=START, help="first day (default 2026-01-01)")
    args = parser.parse_args(argv)

    from partbuild.orchestrator.spark import spark_session

    spark = spark_session(app_name="partbuild-clicks-generate")
    try:
        refs = generate_raw(spark, args.root, args.days, args.rows, args.start)
    finally:
        spark.stop()
    print(f"wrote {len(refs)} raw partitions x {args.rows} rows under {Path(args.root).absolute()}")


if __name__ == "__main__":
    main()
