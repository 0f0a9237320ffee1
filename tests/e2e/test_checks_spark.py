"""The ready-made quality checks (orchestrator/checks.py) on small real DataFrames, written as parquet as jobs
write their outputs: each check's verdict, description and metrics computed alone (`fn`), and the gate's one
shared pass (orchestrator/check_pass.py) giving the same answers for every output at once."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from partbuild.orchestrator.checks import (
    Check,
    CheckContext,
    CheckOutcome,
    CheckTarget,
    no_nulls,
    row_count_at_least,
    row_count_within_ratio_of_inputs,
    row_count_within_ratio_of_previous,
    run_gate,
    unique,
)

from checkkit import alone, answers, no_future_clicks, six_and_one, written


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
        False, "2 of 5 rows repeat a value of (k, v) seen before", {"rows": 5, "distinct_keys": 3, "extra_rows": 2}
    )
    keyed = written(spark, tmp_path / "keyed", [(1, "a"), (2, "a"), (None, "a")], "k int, v string")
    assert unique("k").fn(context(spark, keyed)) == CheckOutcome(
        True, "(k) is unique", {"rows": 3, "distinct_keys": 3, "extra_rows": 0}
    )
    nulls = written(spark, tmp_path / "nulls", [(None, "a"), (None, "b")], "k int, v string")
    assert not unique("k").fn(context(spark, nulls)).passed  # a null key is a value like any other


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


# ----------------------------------------------------------------- the gate's one pass


def test_one_pass_gives_every_output_the_answers_of_each_check_alone(
    spark: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    inputs = {"in/1": written(spark, tmp_path / "i1", [(n,) for n in range(6)], "k int")}
    inputs["in/2"] = written(spark, tmp_path / "i2", [(n,) for n in range(4)], "k int")
    rows = [(1, "a"), (1, "b"), (2, None), (200, "c")]
    odd = written(spark, tmp_path / "a b%c+d=é", rows, "k int, v string")  # escaped in its files' URIs
    plain = written(spark, tmp_path / "plain", [(1, "a"), (2, "b")], "k int, v string")
    empty = written(spark, tmp_path / "empty", [], "k int, v string")  # no group in a groupBy: still answered
    targets = [
        CheckTarget("x/odd", "u-odd", odd, inputs, previous_location=plain),
        CheckTarget("x/plain", "u-plain", f"file://{plain}", {"in/1": inputs["in/1"]}),
        CheckTarget("x/empty", "u-empty", empty, {}),
    ]
    checks = six_and_one()
    spark.sparkContext.setJobGroup("one-pass", "the gate's pass")
    try:
        with caplog.at_level(logging.INFO, logger="test.gate"):
            verdict = run_gate(checks, targets, "x", lambda: spark, logging.getLogger("test.gate"))
    finally:
        spark.sparkContext.setJobGroup("", "")
    lines = [r.getMessage() for r in caplog.records if r.name == "test.gate"]
    (passed,) = [line for line in lines if "one pass" in line]  # no output nor check needed a pass of its own
    assert passed.startswith("checks of 3 outputs computed in one pass in ")
    assert len(spark.sparkContext.statusTracker().getJobIdsForGroup("one-pass")) < len(checks)
    assert [answers(result) for result in verdict.results] == [alone(spark, checks, target) for target in targets]
    assert all(r.duration_ms > 0 for result in verdict.results for r in result.results)
    assert sum(line.startswith("check ") for line in lines) == len(checks) * len(targets)
    assert verdict.failures == {
        "u-odd": ("check no_nulls_k_v failed on x/odd: nulls in v: 1", False),
        "u-empty": ("check row_count_at_least_1 failed on x/empty: 0 rows (at least 1 wanted)", False),
    }


def test_an_output_or_a_check_that_cannot_be_computed_fails_alone(
    spark: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The pass fails; each output is then computed alone, and for the failing one each check alone: only the
    unreadable output and the broken check error (retryable), every other answer is the one computed alone."""
    good = written(spark, tmp_path / "good", [(1, "a"), (2, "b")], "k int, v string")
    other = written(spark, tmp_path / "other", [(3, "c")], "k int, v string")
    targets = [
        CheckTarget("x/good", "u-good", good, {}),
        CheckTarget("x/gone", "u-gone", str(tmp_path / "never-written"), {}),
        CheckTarget("x/other", "u-other", other, {}),
    ]
    checks = [row_count_at_least(1), unique("k"), no_future_clicks()]
    with caplog.at_level(logging.INFO, logger="test.gate"):
        verdict = run_gate(checks, targets, "x", lambda: spark, logging.getLogger("test.gate"))
    assert list(verdict.failures) == ["u-gone"]
    message, retryable = verdict.failures["u-gone"]
    assert message.startswith("check row_count_at_least_1 errored on x/gone: AnalysisException: ") and retryable
    assert "\n" not in message
    good_results, gone, other_results = verdict.results
    assert [(r.name, r.errored, r.duration_ms > 0) for r in gone.results] == [("row_count_at_least_1", True, True)]
    assert answers(good_results) == alone(spark, checks, targets[0])
    assert answers(other_results) == alone(spark, checks, targets[2])
    lines = [r.getMessage() for r in caplog.records if r.name == "test.gate"]
    assert any(line.startswith("checks of 3 outputs failed in one pass after") for line in lines)

    def broken() -> dict[str, Any]:
        from pyspark.sql import functions as F

        return {"total": F.sum("no_such_column")}

    checks = [row_count_at_least(1), Check.aggregate("broken", broken, lambda v: CheckOutcome(True)), unique("k")]
    verdict = run_gate(checks, targets[::2], "x", lambda: spark)
    assert [(r.name, r.passed, r.errored) for r in verdict.results[0].results] == [
        ("row_count_at_least_1", True, False),
        ("broken", False, True),
    ]
    assert "no_such_column" in verdict.results[0].results[1].description
    assert set(verdict.failures) == {"u-good", "u-other"}
    assert all(retryable for _, retryable in verdict.failures.values())
