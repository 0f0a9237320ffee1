"""`bucket_column`: the bucket function as built-in Spark SQL, equal to the reference on every row (on the
tests' shared SparkSession). Its argument checks, without Spark: tests/orchestrator/test_bucket_column.py.
"""

from __future__ import annotations

from typing import Any

from partbuild.orchestrator.spark import bucket_column

from bucketkit import GITHUB_KEY, KEYS, SPEC_VECTORS, TOTALS, reference, sample_strings


def _strings_frame(spark: Any, values: list[str | None]) -> Any:
    return spark.createDataFrame([(i, v) for i, v in enumerate(values)], "i long, s string")


def test_every_row_equals_the_reference_for_every_key_and_total(spark: Any) -> None:
    values = sample_strings(1200, seed=9)
    assert {len(v.encode()) for v in values} >= {0, 55, 56, 63, 64, 65, 4096}
    combos = [(key, total) for key in KEYS for total in TOTALS]
    columns = [bucket_column(key, "s", total).alias(f"b{n}") for n, (key, total) in enumerate(combos)]
    rows = _strings_frame(spark, values).select("i", *columns).collect()  # one Spark job for all of them

    assert len(rows) == len(values)
    wrong = [
        (key, total, values[row.i], row[f"b{n}"])
        for row in rows
        for n, (key, total) in enumerate(combos)
        if row[f"b{n}"] != reference(key, values[row.i], total)
    ]
    assert wrong == []


def test_the_spec_vectors(spark: Any) -> None:
    frame = spark.createDataFrame([(d, t) for d, t, _ in SPEC_VECTORS], "data string, total int")
    totals = sorted({t for _, t, _ in SPEC_VECTORS})
    rows = frame.select("data", "total", *[bucket_column(GITHUB_KEY, "data", t).alias(f"t{t}") for t in totals])
    assert [(r.data, r.total, r[f"t{r.total}"]) for r in rows.collect()] == SPEC_VECTORS


def test_filtering_a_frame_keeps_exactly_its_buckets_entities(spark: Any) -> None:
    refs = [f"clicks/daily/date=2026-01-{day:02d}/site={site}" for day in range(1, 29) for site in range(20)]
    frame = spark.createDataFrame([(r,) for r in refs], "ref string")
    kept = frame.filter(bucket_column(GITHUB_KEY, "ref", 12) == 3).collect()
    assert sorted(r.ref for r in kept) == sorted(r for r in refs if reference(GITHUB_KEY, r, 12) == 3)
    assert kept  # 560 refs in 12 buckets: this one is not empty by chance


def test_null_in_null_out_and_the_result_types(spark: Any) -> None:
    from pyspark.sql import functions as F
    from pyspark.sql.types import IntegerType, LongType

    frame = _strings_frame(spark, [None, "a"])
    selected = frame.select(
        bucket_column("k", "s", 12).alias("small"),
        bucket_column("k", F.col("s"), 2**31 - 1).alias("int_max"),
        bucket_column("k", F.upper("s"), 2**31).alias("big"),  # any string Column, not only a name
    )
    assert [f.dataType for f in selected.schema.fields] == [IntegerType(), IntegerType(), LongType()]
    assert [tuple(r) for r in selected.orderBy(F.col("small").asc_nulls_first()).collect()] == [
        (None, None, None),
        (reference("k", "a", 12), reference("k", "a", 2**31 - 1), reference("k", "A", 2**31)),
    ]


def test_a_lone_surrogate_reaches_spark_replaced_and_hashes_as_what_spark_holds(spark: Any) -> None:
    # Python cannot encode "\ud800" as UTF-8 (the reference raises); Spark strings are UTF-8, so the value
    # is replaced on its way in, and the bucket is the reference's bucket of the stored string.
    rows = _strings_frame(spark, ["a\ud800b", "\udfff"]).select("s", bucket_column("k", "s", 1000).alias("b"))
    stored = [(r.s, r.b) for r in rows.collect()]
    assert [s for s, _ in stored] == ["a\ufffdb", "\ufffd"]
    assert [b for _, b in stored] == [reference("k", s, 1000) for s, _ in stored]
