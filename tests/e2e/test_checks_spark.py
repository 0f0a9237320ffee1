"""The ready-made quality checks (orchestrator/checks.py) on small real DataFrames, written as parquet as jobs
write their outputs: each check's verdict, description and metrics."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from partbuild.orchestrator.checks import (
    CheckContext,
    CheckOutcome,
    no_nulls,
    row_count_at_least,
    row_count_within_ratio_of_inputs,
    row_count_within_ratio_of_previous,
    unique,
)


def written(spark: Any, path: Path, rows: list[tuple[Any, ...]], schema: str) -> str:
    spark.createDataFrame(rows, schema).coalesce(1).write.mode("overwrite").parquet(str(path))
    return str(path)


def context(
    spark: Any, location: str, inputs: dict[str, str] | None = None, previous: str | None = None
) -> CheckContext:
    return CheckContext("x/1", "uuid-1", location, "x", inputs or {}, lambda: spark, previous)


def test_row_count_at_least(spark: Any, tmp_path: Path) -> None:
    three = written(spark, tmp_path / "three", [(1,), (2,), (3,)], "k int")
    empty = written(spark, tmp_path / "empty", [], "k int")
    check = row_count_at_least(3)
    assert check.fn(context(spark, three)) == CheckOutcome(True, "3 rows (at least 3 wanted)", {"rows": 3})
    assert check.fn(context(spark, empty)) == CheckOutcome(False, "0 rows (at least 3 wanted)", {"rows": 0})
    assert row_count_at_least(1).fn(context(spark, three)).passed


def test_no_nulls(spark: Any, tmp_path: Path) -> None:
    location = written(
        spark, tmp_path / "o", [(1, "a", None), (None, "b", None), (3, "c", 1)], "k int, url string, n int"
    )
    assert no_nulls("url").fn(context(spark, location)) == CheckOutcome(True, "no nulls in url", {"nulls.url": 0})
    found = no_nulls("k", "url", "n").fn(context(spark, location))
    assert found == CheckOutcome(False, "nulls in k: 1, n: 2", {"nulls.k": 1, "nulls.url": 0, "nulls.n": 2})


def test_unique(spark: Any, tmp_path: Path) -> None:
    location = written(spark, tmp_path / "o", [(1, "a"), (1, "b"), (2, "a"), (2, "a"), (2, "a")], "k int, v string")
    assert unique("k", "v").fn(context(spark, location)) == CheckOutcome(
        False, "1 values of (k, v) appear more than once, in 3 rows", {"duplicate_keys": 1, "duplicate_rows": 3}
    )
    keyed = written(spark, tmp_path / "keyed", [(1, "a"), (2, "a")], "k int, v string")
    assert unique("k").fn(context(spark, keyed)) == CheckOutcome(
        True, "(k) is unique", {"duplicate_keys": 0, "duplicate_rows": 0}
    )


def test_row_count_within_ratio_of_inputs(spark: Any, tmp_path: Path) -> None:
    inputs = {
        "in/1": written(spark, tmp_path / "i1", [(n,) for n in range(6)], "k int"),
        "in/2": written(spark, tmp_path / "i2", [(n,) for n in range(4)], "k int"),
    }
    output = written(spark, tmp_path / "o", [(n,) for n in range(5)], "k int")
    passed = row_count_within_ratio_of_inputs(0.4, 0.6).fn(context(spark, output, inputs))
    assert passed == CheckOutcome(
        True, "5 rows from 10 input rows: ratio 0.5 (in [0.4, 0.6])", {"rows": 5, "input_rows": 10, "ratio": 0.5}
    )
    assert not row_count_within_ratio_of_inputs(0.9, 1.1).fn(context(spark, output, inputs)).passed
    assert row_count_within_ratio_of_inputs(0, 1).fn(context(spark, output)) == CheckOutcome(
        False, "no input to compare with"
    )


def test_row_count_within_ratio_of_previous(spark: Any, tmp_path: Path) -> None:
    previous = written(spark, tmp_path / "previous", [(n,) for n in range(8)], "k int")
    halved = written(spark, tmp_path / "halved", [(n,) for n in range(4)], "k int")
    check = row_count_within_ratio_of_previous(0.8, 1.25)
    assert check.fn(context(spark, halved, previous=previous)) == CheckOutcome(
        False,
        "4 rows from 8 rows of the previous instance: ratio 0.5 (not in [0.8, 1.25])",
        {"rows": 4, "previous_rows": 8, "ratio": 0.5},
    )
    assert check.fn(context(spark, previous, previous=previous)).passed
    # A first build has nothing to compare with: it passes and says so.
    assert check.fn(context(spark, halved)) == CheckOutcome(
        True, "4 rows; no earlier Live instance to compare with", {"rows": 4}
    )
