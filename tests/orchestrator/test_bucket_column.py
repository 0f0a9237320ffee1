"""`bucket_column` refuses bad arguments with a ValueError before Spark sees them. Equal to the reference on
every row, on Spark: tests/e2e/test_bucket_column_spark.py.
"""

from __future__ import annotations

from typing import Any

import pytest

from partbuild.orchestrator.spark import bucket_column


@pytest.mark.parametrize(
    ("key", "total", "message"),
    [
        ("k", 0, "between 1 and"),
        ("k", -3, "between 1 and"),
        ("k", 2**63, "between 1 and"),
        ("k", True, "must be an int"),
        ("k", 12.0, "must be an int"),
        ("k", "12", "must be an int"),
        (b"k", 12, "key must be a str"),
        (None, 12, "key must be a str"),
        ("\ud800", 12, "encodable as UTF-8"),
    ],
)
def test_bad_arguments_are_value_errors(key: Any, total: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        bucket_column(key, "s", total)


def test_a_column_that_is_neither_a_name_nor_a_column_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="column name or a Column"):
        bucket_column("k", 3, 12)  # type: ignore[arg-type]
