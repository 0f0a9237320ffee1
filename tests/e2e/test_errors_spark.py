"""`root_cause` of real Spark failures (on the tests' shared SparkSession): one line that names what broke,
never py4j's "An error occurred while calling oN.parquet.". Without Spark: tests/orchestrator/test_errors.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from partbuild.orchestrator.errors import root_cause

PY4J_PREAMBLE = "An error occurred while calling"


def _corrupt_parquet(folder: Path) -> Path:
    folder.mkdir()
    part = folder / "part-0.parquet"
    part.write_bytes(b"garbage bytes, not a parquet file " * 8)
    return part


def test_a_corrupt_parquet_file_is_named_with_the_failure(spark: Any, tmp_path: Path) -> None:
    part = _corrupt_parquet(tmp_path / "table")
    with pytest.raises(Exception) as raised:
        spark.read.parquet(str(tmp_path / "table")).count()
    before = f"{type(raised.value).__name__}: {raised.value}".splitlines()[0]
    assert PY4J_PREAMBLE in before  # what a failed run said before root_cause

    line = root_cause(raised.value)
    assert "\n" not in line and len(line) <= 500
    assert PY4J_PREAMBLE not in line
    assert "FAILED_READ_FILE" in line or "CANNOT_READ_FILE_FOOTER" in line
    assert str(part) in line
    assert "Exception: " in line  # the innermost Java throwable's simple class name, then its message


def test_a_job_that_wraps_the_spark_error_still_names_it(spark: Any, tmp_path: Path) -> None:
    part = _corrupt_parquet(tmp_path / "table")
    try:
        try:
            spark.read.parquet(str(tmp_path / "table")).count()
        except Exception as exc:
            raise RuntimeError("daily_clicks could not read its input") from exc
    except RuntimeError as wrapped:
        line = root_cause(wrapped)
    assert str(part) in line and PY4J_PREAMBLE not in line


def test_a_captured_analysis_error_gives_its_condition_without_the_jvm_stack(spark: Any, tmp_path: Path) -> None:
    with pytest.raises(Exception) as raised:
        spark.read.parquet(str(tmp_path / "nowhere")).count()
    line = root_cause(raised.value)
    assert "[PATH_NOT_FOUND]" in line and str(tmp_path / "nowhere") in line
    assert "\n" not in line and "JVM stacktrace" not in line and "\tat " not in line
