"""`bucket_column` (built-in Spark SQL) versus the bucket function as a Python UDF, in one run.

Target: the column at least 5x faster than the UDF. Both count the rows of every bucket of the same
`--rows` partition-ref strings on one local[2] session with the UI off; the counts must be equal. The refs
(made from `spark.range`, unique: a date and a site per row) are written to Parquet once, untimed, and
each side reads them back, as a job reads its entities from a table: generating them with
`format_string` costs about as much as hashing them and would blur the comparison. A small warm-up of
each side runs first (JIT, Python workers), and a floor (the same read and aggregate on a bucket-free
expression) shows what the two share.

    .venv/bin/python bench/bucket_column.py [--rows 10000000] [--total 12]
"""

from __future__ import annotations

import argparse
import hashlib
import hmac
import os
import sys
import tempfile
import time
from typing import Any

from _common import machine

from partbuild.orchestrator.spark import bucket_column, spark_session

KEY = "partbuild/bench"
TARGET_SPEEDUP = 5.0
WARM_UP_ROWS = 200_000


def reference(key: str, data: str, total: int) -> int:
    """The spec's bucket function, in plain Python."""
    return int(hmac.new(key.encode(), data.encode(), hashlib.md5).hexdigest()[:8], 16) % total + 1


def partition_refs(spark: Any, rows: int) -> Any:
    """`rows` distinct refs like `clicks/daily/date=2024-03-05/site=site-00017`: 3650 days per site."""
    from pyspark.sql import functions as F

    day = F.date_add(F.lit("2020-01-01").cast("date"), (F.col("id") % 3650).cast("int"))
    site = (F.col("id") / 3650).cast("long")
    return spark.range(rows).select(F.format_string("clicks/daily/date=%s/site=site-%05d", day, site).alias("ref"))


def count_by(refs: Any, bucket: Any) -> tuple[float, dict[int, int]]:
    """(seconds, rows per bucket): the full aggregate forces every row's bucket."""
    started = time.perf_counter()
    counts = {row["bucket"]: row["count"] for row in refs.groupBy(bucket.alias("bucket")).count().collect()}
    return time.perf_counter() - started, counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--total", type=int, default=12)
    args = parser.parse_args()

    from pyspark.sql import functions as F

    # The UDF's workers must run this interpreter (the default `python3` on PATH may lack pyarrow).
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = spark_session(master="local[2]")  # DEFAULT_CONF: UI off, 4 shuffle partitions
    spark.sparkContext.setLogLevel("ERROR")
    total = args.total
    arrow = str(spark.conf.get("spark.sql.execution.pythonUDF.arrow.enabled"))

    # A lambda: PySpark 4 warns about a typed function it cannot map to a pandas UDF's eval type.
    bucket_udf = F.udf(lambda ref: reference(KEY, ref, total), "int")
    sides = {
        "floor (no hashing)": lambda: F.length("ref") % total,
        "bucket_column": lambda: bucket_column(KEY, "ref", total),
        "Python UDF": lambda: bucket_udf("ref"),
    }
    with tempfile.TemporaryDirectory() as tmp:
        partition_refs(spark, WARM_UP_ROWS).write.parquet(f"{tmp}/warm-up")
        for make in sides.values():  # warm-up, not timed
            count_by(spark.read.parquet(f"{tmp}/warm-up"), make())
        partition_refs(spark, args.rows).write.parquet(f"{tmp}/refs")
        results = {name: count_by(spark.read.parquet(f"{tmp}/refs"), make()) for name, make in sides.items()}
    spark.stop()
    report(args.rows, total, arrow, results)


def report(rows: int, total: int, arrow: str, results: dict[str, tuple[float, dict[int, int]]]) -> None:
    """Print the times, check the counts and print the target line."""
    print(machine())
    print(f"{rows:,} refs from Parquet, {total} buckets, local[2], Python UDF with Arrow: {arrow}")
    for name, (seconds, counts) in results.items():
        assert sum(counts.values()) == rows, (name, sum(counts.values()))
        print(f"  {name:<20} {seconds:7.2f} s  {rows / seconds:>12,.0f} rows/s")
    column_s, column_counts = results["bucket_column"]
    udf_s, udf_counts = results["Python UDF"]
    assert column_counts == udf_counts, "bucket_column and the UDF disagree"
    print(f"  counts per bucket equal: {sorted(column_counts.items())}")
    speedup = udf_s / column_s
    print(f"  UDF / column = {speedup:.2f}x")
    print(f"column at least {TARGET_SPEEDUP:g}x faster than the UDF: {'PASS' if speedup >= TARGET_SPEEDUP else 'MISS'}")


if __name__ == "__main__":
    main()
