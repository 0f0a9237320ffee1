"""Checks computed in the job's own write (orchestrator/observed_writes.py) on a real SparkSession.

A job that writes its outputs with `ctx.write` has its aggregate checks observed as Spark writes the rows:
the gate then gives each output the answers its checks give computed alone, reading back only what the
write could not observe (a DISTINCT, the rows of inputs and previous instances), and nothing at all when
every value was observed.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import functions as F

from examples.clicks.pipeline import dailies_clicks
from partbuild.orchestrator.checks import (
    Check,
    CheckContext,
    CheckOutcome,
    CheckTarget,
    no_nulls,
    row_count_at_least,
    run_gate,
    unique,
)
from partbuild.orchestrator.context import JobContext, OutputTarget
from partbuild.orchestrator.graph import Partition
from partbuild.orchestrator.observed_writes import WriteObserver
from partbuild.orchestrator.plan_keys import distinct_keys, proves_unique

from checkkit import alone, answers, no_future_clicks, six_and_one, written

ROWS = {"x/odd": [(1, "a"), (1, "b"), (2, None), (200, "c")], "x/plain": [(1, "a"), (2, "b")], "x/empty": []}


def job_context(tmp_path: Path, spark: Any, checks: list[Check], observer: WriteObserver | None = None) -> JobContext:
    outputs = [OutputTarget(Partition(ref, {}), f"u-{ref[2:]}", str(tmp_path / ref[2:])) for ref in ROWS]
    return JobContext(
        "run-1",
        "x",
        outputs,
        {},
        logging.getLogger("test.job"),
        open_spark=lambda: spark,
        observer=observer or WriteObserver(checks),
    )


def write_all(ctx: JobContext, spark: Any) -> None:
    for ref, rows in ROWS.items():
        ctx.write(ref, spark.createDataFrame(rows, "k int, v string").coalesce(1))


def targets_of(ctx: JobContext, inputs: dict[str, str], previous: str | None) -> list[CheckTarget]:
    found = []
    for target in ctx.outputs:
        watch = ctx.watches[target.ref]
        observed = watch.observed() if watch is not None else None
        found.append(CheckTarget(target.ref, target.instance_uuid, target.location, inputs, previous, {}, observed))
    return found


def gate_in_group(
    spark: Any, group: str, checks: list[Check], targets: list[CheckTarget], caplog: pytest.LogCaptureFixture
) -> tuple[Any, list[str], int]:
    """The gate's verdict, its log lines and the number of Spark jobs it ran."""
    caplog.clear()
    spark.sparkContext.setJobGroup(group, "the gate")
    try:
        with caplog.at_level(logging.INFO, logger="test.gate"):
            verdict = run_gate(checks, targets, "x", lambda: spark, logging.getLogger("test.gate"))
    finally:
        spark.sparkContext.setJobGroup("", "")
    lines = [r.getMessage() for r in caplog.records if r.name == "test.gate"]
    return verdict, lines, len(spark.sparkContext.statusTracker().getJobIdsForGroup(group))


def test_checks_observed_in_the_write_answer_as_computed_alone_and_the_gate_reads_nothing(
    spark: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    three = row_count_at_least(3, name="three", blocking=False)
    checks = [row_count_at_least(1), no_nulls("k", "v"), no_future_clicks(), three]
    ctx = job_context(tmp_path, spark, checks)
    write_all(ctx, spark)
    targets = targets_of(ctx, {}, None)
    assert [t.observed.rows if t.observed else None for t in targets] == [4, 2, 0]
    verdict, lines, jobs = gate_in_group(spark, "observed-all", checks, targets, caplog)
    assert jobs == 0  # every value came with the writes: no listing, no read, no aggregation
    (passed,) = [line for line in lines if line.startswith("checks of")]
    assert passed.startswith("checks of 3 outputs computed in their writes: no pass")
    assert [answers(result) for result in verdict.results] == [alone(spark, checks, t) for t in targets]
    assert set(verdict.failures) == {"u-odd", "u-empty"}


def test_what_the_write_cannot_observe_is_read_back_in_one_pass(
    spark: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A DISTINCT (`unique`), the rows of inputs and of the previous instance: the pass reads those only."""
    checks = six_and_one()
    ctx = job_context(tmp_path, spark, checks)
    write_all(ctx, spark)
    inputs = {"in/1": written(spark, tmp_path / "i1", [(n,) for n in range(6)], "k int")}
    previous = written(spark, tmp_path / "previous", [(1, "a"), (2, "b")], "k int, v string")
    targets = targets_of(ctx, inputs, previous)
    verdict, lines, jobs = gate_in_group(spark, "observed-some", checks, targets, caplog)
    assert any(line.startswith("checks of 3 outputs computed in one pass in ") for line in lines) and jobs >= 1
    assert [answers(result) for result in verdict.results] == [alone(spark, checks, t) for t in targets]


def test_a_check_spark_refuses_to_observe_is_learned_once_and_computed_by_the_pass(
    spark: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    def distinct_keys() -> dict[str, Any]:
        from pyspark.sql import functions as F

        return {"keys": F.count_distinct("k")}

    keys = Check.aggregate("keys", distinct_keys, lambda v: CheckOutcome(v["keys"] >= 1, f"{v['keys']} keys"))
    checks = [row_count_at_least(1), keys]
    observer = WriteObserver(checks)
    with caplog.at_level(logging.INFO, logger="partbuild.checks"):
        first = job_context(tmp_path / "first", spark, checks, observer)
        write_all(first, spark)
        second = job_context(tmp_path / "second", spark, checks, observer)
        write_all(second, spark)
    refused = [r.getMessage() for r in caplog.records if "cannot be observed" in r.getMessage()]
    assert refused == ["check keys cannot be observed in the write; the gate computes it"]
    targets = targets_of(second, {}, None)
    assert all(t.observed is not None and 1 not in t.observed.values for t in targets)
    verdict, _, jobs = gate_in_group(spark, "observed-refused", checks, targets, caplog)
    assert jobs >= 1
    assert [answers(result) for result in verdict.results] == [alone(spark, checks, t) for t in targets]


def test_a_key_the_written_frames_plan_proves_is_unique_without_a_read(
    spark: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """`unique` counts distinct keys, which Spark cannot observe; when the plan of the written frame proves
    the key (grouped by it), the write settles it; otherwise the pass reads the output, as always."""
    checks = [unique("k"), unique("k", "v", name="k_v")]
    ctx = job_context(tmp_path, spark, checks)
    frame = spark.createDataFrame([(1, "a"), (1, "b"), (2, None)], "k int, v string")
    ctx.write("x/odd", frame.groupBy("k").agg(F.max("v").alias("v")))  # one row per k: proven
    ctx.write("x/plain", frame)  # k repeats, and nothing proves (k, v)
    ctx.write("x/empty", frame.union(frame).distinct())  # (its ref's name aside) every column together is a key
    odd, plain, empty = targets_of(ctx, {}, None)
    assert (set(odd.observed.values), set(plain.observed.values), set(empty.observed.values)) == ({0, 1}, set(), {1})
    verdict, _, jobs = gate_in_group(spark, "observed-unique-proven", checks, [odd], caplog)
    assert jobs == 0 and answers(verdict.results[0]) == alone(spark, checks, odd)
    verdict, _, jobs = gate_in_group(spark, "observed-unique", checks, [odd, empty], caplog)
    assert jobs >= 1  # for `unique(k)` on x/empty: its plan proves (k, v), not k alone
    assert [answers(r) for r in verdict.results] == [alone(spark, checks, t) for t in (odd, empty)]
    verdict, _, jobs = gate_in_group(spark, "observed-unique-read", checks, [plain], caplog)
    assert (
        jobs >= 1
        and verdict.failures["u-plain"][0]
        == "check unique_k failed on x/plain: 1 of 3 rows repeat a value of (k) seen before"
    )
    assert answers(verdict.results[0]) == alone(spark, checks, plain)


def test_the_keys_spark_plans_know(spark: Any) -> None:
    frame = spark.range(10).withColumn("url", (F.col("id") % 3).cast("string"))
    grouped = frame.groupBy("url").count()
    assert distinct_keys(grouped) == [{"url"}]
    assert distinct_keys(grouped.select(F.col("url").alias("u"), "count")) == [{"u"}]  # carried through an alias
    assert distinct_keys(frame.select("url").distinct()) == [{"url"}]
    assert distinct_keys(grouped.union(grouped)) == [] and distinct_keys(frame.select("url")) == []
    assert proves_unique(grouped, ["url", "count"]) and not proves_unique(grouped, ["count"])
    assert not proves_unique(grouped, ["no_such_column"])


def test_an_output_written_twice_is_read_back_whole(spark: Any, tmp_path: Path) -> None:
    checks = [row_count_at_least(5)]
    ctx = job_context(tmp_path, spark, checks)
    frame = spark.createDataFrame([(1, "a"), (2, "b"), (3, "c")], "k int, v string").coalesce(1)
    ctx.write("x/plain", frame)
    ctx.write("x/plain", frame, mode="append")  # the first write's rows would be missing from an observation
    assert ctx.watches["x/plain"] is None
    target = CheckTarget("x/plain", "u-plain", ctx.outputs[1].location, {})
    (result,) = run_gate(checks, [target], "x", lambda: spark).results
    assert answers(result) == {"row_count_at_least_5": CheckOutcome(True, "6 rows (at least 5 wanted)", {"rows": 6})}
    with pytest.raises(ValueError, match="not an output of job run run-1"):
        ctx.write("x/other", frame)


def test_a_weekly_adds_up_what_its_dailies_recorded_and_reads_only_a_daily_that_recorded_nothing(
    spark: Any, tmp_path: Path
) -> None:
    first = written(spark, tmp_path / "d1", [("a", 3), ("b", 4)], "url string, count long")
    second = written(spark, tmp_path / "d2", [("a", 10)], "url string, count long")
    inputs = {"d/1": first, "d/2": second}
    recorded = {"d/1": {"daily_not_empty": {"rows": 2.0, "clicks": 1000.0}}}  # not what d/1 holds: taken as told
    context = CheckContext("w/1", "u", "unused", "weekly", inputs, lambda: spark, None, recorded)
    assert dailies_clicks(context) == {"dailies": 1010}  # d/2 recorded nothing: its 10 clicks are read
    every = {**recorded, "d/2": {"daily_not_empty": {"rows": 1.0, "clicks": 5.0}}}
    nothing_read = CheckContext("w/1", "u", "unused", "weekly", inputs, lambda: None, None, every)
    assert dailies_clicks(nothing_read) == {"dailies": 1005}  # no Spark at all
