"""Quality checks (orchestrator/checks.py): declaring them, the gate in `JobExecutor`, and the ready-made ones.

The gate and the executor without Spark (check functions in plain Python): each output judged on its own,
durations and log lines. The ready-made and aggregate checks and their shared pass on small real parquet
data: tests/e2e/test_checks_spark.py; the gate on a real orchestrator with Spark, over HTTP and the CLI:
tests/e2e/test_checks_gate_spark.py.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from partbuild.orchestrator.checks import (
    Check,
    CheckContext,
    CheckDeclarationError,
    CheckOutcome,
    CheckTarget,
    no_nulls,
    row_count_at_least,
    row_count_within_ratio_of_inputs,
    row_count_within_ratio_of_previous,
    run_gate,
    unique,
)
from partbuild.orchestrator.context import JobContext, OutputTarget
from partbuild.orchestrator.decide import RunPlan
from partbuild.orchestrator.executor import JobExecutor
from partbuild.orchestrator.graph import Graph, GraphError, Job, RetryPolicy
from partbuild.proto.v1 import events_pb2 as pb

from waitkit import wait_for


def verdict_of(result: bool | Exception | object, *, blocking: bool = True) -> Check:
    """A check returning `CheckOutcome(result)`, raising it if it is an exception, or returning it as is."""

    def fn(context: CheckContext) -> Any:
        if isinstance(result, Exception):
            raise result
        if isinstance(result, bool):
            return CheckOutcome(result, f"{context.ref} {result}", {"n": 1})
        return result

    return Check(f"c-{result!r}"[:40] if not isinstance(result, bool) else f"c-{result}", fn, blocking=blocking)


def targets(*refs: str) -> list[CheckTarget]:
    return [CheckTarget(ref, f"uuid-{ref}", f"/w/{ref}", {}) for ref in refs]


def no_spark() -> Any:
    raise AssertionError("a check that needs no Spark must not start it")


# ----------------------------------------------------------------- the gate


def test_passing_checks_and_warnings_let_the_run_succeed_with_every_result() -> None:
    checks = [Check("a", verdict_of(True).fn), Check("b", verdict_of(False).fn, blocking=False)]
    verdict = run_gate(checks, targets("x/1", "x/2"), "x", no_spark)
    assert verdict.failure is None
    assert [
        (r.instance_uuid, [(c.name, c.passed, c.blocking, c.errored) for c in r.results]) for r in verdict.results
    ] == [
        ("uuid-x/1", [("a", True, True, False), ("b", False, False, False)]),
        ("uuid-x/2", [("a", True, True, False), ("b", False, False, False)]),
    ]
    assert dict(verdict.results[0].results[0].metrics) == {"n": 1.0}
    assert verdict.results[0].results[1].description == "x/1 False"


def test_a_failed_blocking_check_fails_the_run_naming_the_check_and_the_instance() -> None:
    checks = [Check("rows_nonzero", verdict_of(False).fn), Check("later", verdict_of(True).fn)]
    verdict = run_gate(checks, targets("x/1"), "x", no_spark)
    assert verdict.failure == "check rows_nonzero failed on x/1: x/1 False" and not verdict.retryable
    assert [c.name for c in verdict.results[0].results] == ["rows_nonzero", "later"]  # the others still ran
    retryable = run_gate([Check("late", verdict_of(False).fn, retryable=True)], targets("x/1"), "x", no_spark)
    assert retryable.failure is not None and retryable.retryable


@pytest.mark.parametrize(
    ("returned", "error"),
    [
        (ValueError("no column url"), "ValueError: no column url"),
        (None, "TypeError: a check must return a CheckOutcome, not NoneType"),
        (True, "TypeError: a check must return a CheckOutcome, not bool"),
        (CheckOutcome(True, metadata={"rows": float("nan")}), "TypeError: metadata 'rows' must be a finite"),
        (CheckOutcome(True, metadata={"rows": "3"}), "TypeError: metadata 'rows' must be a finite"),  # type: ignore[dict-item]
        (CheckOutcome(1), "TypeError: CheckOutcome.passed must be a bool, not int"),  # type: ignore[arg-type]
    ],
)
def test_a_check_that_raises_or_returns_no_outcome_is_an_error_never_a_pass(returned: object, error: str) -> None:
    def fn(context: CheckContext) -> Any:
        if isinstance(returned, Exception) and context.ref == "x/1":
            raise returned
        return returned if context.ref == "x/1" else CheckOutcome(True)

    checks = [Check("first", verdict_of(True).fn), Check("broken", fn, blocking=False), Check("later", no_spark)]
    verdict = run_gate(checks, targets("x/1"), "x", no_spark)
    assert verdict.failure is not None and verdict.failure.startswith(f"check broken errored on x/1: {error}")
    assert verdict.retryable
    (only,) = verdict.results  # the output's later checks did not run
    assert [(c.name, c.passed, c.errored) for c in only.results] == [("first", True, False), ("broken", False, True)]
    assert only.results[1].description.startswith(error)


def test_an_error_fails_only_its_output_and_the_gate_goes_on_with_the_others() -> None:
    def flaky(context: CheckContext) -> CheckOutcome:
        if context.ref == "x/2":
            raise RuntimeError("the metastore was unreachable\nsecond line")
        return CheckOutcome(True, "reachable")

    checks = [Check("flaky", flaky), Check("rows", verdict_of(True).fn), Check("late", verdict_of(False).fn)]
    verdict = run_gate(checks, targets("x/1", "x/2", "x/3"), "x", lambda: None)
    assert verdict.failures == {
        "uuid-x/1": ("check late failed on x/1: x/1 False", False),
        "uuid-x/2": ("check flaky errored on x/2: RuntimeError: the metastore was unreachable", True),
        "uuid-x/3": ("check late failed on x/3: x/3 False", False),
    }
    # The first failure stays the run's message (what the executor records until it fails outputs one by one).
    assert (verdict.failure, verdict.retryable) == ("check late failed on x/1: x/1 False", False)
    assert [[c.name for c in r.results] for r in verdict.results] == [
        ["flaky", "rows", "late"],
        ["flaky"],
        ["flaky", "rows", "late"],
    ]
    assert "second line" in verdict.results[1].results[0].description  # the whole error is kept in the result
    passing = run_gate([Check("rows", verdict_of(True).fn)], targets("x/1"), "x", no_spark)
    assert (passing.failures, passing.failure, passing.retryable) == ({}, None, False)


def test_a_blocking_failure_is_kept_over_a_later_error_on_the_same_output() -> None:
    checks = [Check("rows", verdict_of(False).fn), Check("boom", verdict_of(RuntimeError("down")).fn)]
    verdict = run_gate(checks, targets("x/1"), "x", no_spark)
    assert verdict.failures == {"uuid-x/1": ("check rows failed on x/1: x/1 False", False)}


def test_every_result_has_its_duration_and_a_log_line(caplog: pytest.LogCaptureFixture) -> None:
    def slow(context: CheckContext) -> CheckOutcome:
        time.sleep(0.02)
        return CheckOutcome(True, "took a while\nand said more")

    checks = [Check("slow", slow), Check("warn", verdict_of(False).fn, blocking=False), verdict_of(ValueError("x"))]
    with caplog.at_level(logging.INFO, logger="test.gate"):
        verdict = run_gate(checks, targets("x/1"), "x", no_spark, logging.getLogger("test.gate"))
    durations = {c.name: c.duration_ms for c in verdict.results[0].results}
    assert durations["slow"] >= 20 and all(ms >= 1 for ms in durations.values())  # 0 means unknown: never written
    lines = [(r.levelname, r.getMessage()) for r in caplog.records if r.name == "test.gate"]
    assert [(level, re.sub(r"in \d+\.\d\d s", "in T s", text)) for level, text in lines] == [
        ("INFO", "check slow on x/1: passed in T s: took a while"),
        ("INFO", "check warn on x/1: failed in T s: x/1 False"),
        ("WARNING", "check c-ValueError('x') on x/1: errored in T s: ValueError: x"),
    ]


def test_aggregate_checks_that_cannot_be_computed_error_on_every_output_without_failing_the_others() -> None:
    """Without Spark: a `columns` that raises errors its check on each output; a session that cannot start
    errors every aggregate check. Plain checks are judged as ever (the pass itself: tests/e2e/test_checks_spark.py)."""

    def broken() -> dict[str, Any]:
        raise KeyError("no such column")

    never = Check.aggregate("never", broken, lambda values: CheckOutcome(True))
    checks = [Check("plain", verdict_of(True).fn), never, Check("after", verdict_of(True).fn)]
    verdict = run_gate(checks, targets("x/1", "x/2"), "x", object)  # a session nothing is asked of
    assert verdict.failures == {
        f"uuid-x/{n}": (f"check never errored on x/{n}: KeyError: 'no such column'", True) for n in (1, 2)
    }
    assert [[(c.name, c.errored) for c in r.results] for r in verdict.results] == [
        [("plain", False), ("never", True)]
    ] * 2

    def no_session() -> Any:
        raise RuntimeError("the cluster is away")

    verdict = run_gate([row_count_at_least(1), Check("plain", verdict_of(True).fn)], targets("x/1"), "x", no_session)
    assert verdict.failure == "check row_count_at_least_1 errored on x/1: RuntimeError: the cluster is away"
    assert [c.name for c in verdict.results[0].results] == ["row_count_at_least_1"]


def test_checks_are_declared_with_unique_names() -> None:
    def run(ctx: JobContext) -> None:
        return None

    with pytest.raises(GraphError, match="two checks share a name"):
        Job("j", ["j/{n:int}"], run, checks=[row_count_at_least(1), row_count_at_least(1)])
    with pytest.raises(GraphError, match="must be Check objects"):
        Job("j", ["j/{n:int}"], run, checks=[lambda ctx: CheckOutcome(True)])  # type: ignore[list-item]
    with pytest.raises(CheckDeclarationError):
        Check("", verdict_of(True).fn)
    with pytest.raises(CheckDeclarationError):
        row_count_at_least(-1)
    with pytest.raises(CheckDeclarationError):
        no_nulls()
    with pytest.raises(CheckDeclarationError):
        row_count_within_ratio_of_inputs(2, 1)
    with pytest.raises(CheckDeclarationError, match="row_count_within_ratio_of_previous needs 0 <= low <= high"):
        row_count_within_ratio_of_previous(-1, 1)
    with pytest.raises(CheckDeclarationError, match="columns and evaluate must be callable"):
        Check.aggregate("a", {"rows": 1}, lambda values: CheckOutcome(True))  # type: ignore[arg-type]
    aggregate = Check.aggregate("a", dict, lambda values: CheckOutcome(True), blocking=False, retryable=True)
    assert (aggregate.blocking, aggregate.retryable, aggregate.aggregation is not None) == (False, True, True)
    assert Check("plain", verdict_of(True).fn).aggregation is None
    job = Job("j", ["j/{n:int}"], run, checks=[row_count_at_least(1), no_nulls("a", "b"), unique("k")])
    assert [check.name for check in job.checks] == ["row_count_at_least_1", "no_nulls_a_b", "unique_k"]


# ----------------------------------------------------------------- the gate in the executor


@pytest.fixture
def release() -> Iterator[threading.Event]:
    event = threading.Event()
    yield event
    event.set()


def executed(
    tmp_path: Path, checks: list[Check], *, prior_failures: int = 0, max_attempts: int = 3
) -> Callable[[], list[pb.Event]]:
    """Submit one run of a job with `checks` to a Spark-less executor; returns a reader of its events."""
    appended: list[pb.Event] = []
    lock = threading.Lock()

    def append(events: list[pb.Event]) -> None:
        with lock:
            appended.extend(events)

    def run(ctx: JobContext) -> None:
        ctx.record(ctx.outputs[0].ref, row_count=3)

    graph = Graph([Job("j", ["j/{n:int}"], run, checks=checks, retry=RetryPolicy(max_attempts=max_attempts))])
    target = OutputTarget(graph.resolve("j/1").partition, "uuid-1", str(tmp_path / "uuid-1"))
    executor = JobExecutor(None, append, heartbeat_interval_s=60)
    executor.submit(RunPlan(graph.jobs["j"], "run-1", [target], {}, {"uuid-1": ()}, prior_failures))

    def events() -> list[pb.Event]:
        with lock:
            return list(appended)

    events.executor = executor  # type: ignore[attr-defined]
    return events


def outcome(events: Callable[[], list[pb.Event]]) -> Any:
    found = wait_for(
        "the run's outcome", lambda: [e for e in events() if e.WhichOneof("payload") != "job_run_heartbeat"]
    )
    events.executor.shutdown()  # type: ignore[attr-defined]
    (event,) = found
    return getattr(event, event.WhichOneof("payload"))


def test_the_executor_records_the_results_with_the_success(tmp_path: Path) -> None:
    success = outcome(
        executed(tmp_path, [Check("a", verdict_of(True).fn), Check("w", verdict_of(False).fn, blocking=False)])
    )
    assert isinstance(success, pb.JobRunSuccess) and success.outputs[0].row_count == 3
    (checked,) = success.checks
    assert checked.instance_uuid == "uuid-1" and [(c.name, c.passed) for c in checked.results] == [
        ("a", True),
        ("w", False),
    ]


def test_the_executor_fails_the_run_on_a_blocking_failure_and_retries_a_check_error(tmp_path: Path) -> None:
    failed = outcome(executed(tmp_path / "1", [Check("rows_nonzero", verdict_of(False).fn)]))
    assert isinstance(failed, pb.JobRunFailure) and failed.error_class == pb.ERROR_CLASS_PERMANENT
    assert failed.message == "check rows_nonzero failed on j/1: j/1 False"
    assert [c.name for c in failed.checks[0].results] == ["rows_nonzero"]
    errored = outcome(executed(tmp_path / "2", [Check("boom", verdict_of(RuntimeError("down")).fn)]))
    assert errored.error_class == pb.ERROR_CLASS_RETRYABLE
    assert errored.message == "check boom errored on j/1: RuntimeError: down"
    assert errored.checks[0].results[0].errored
    # Retryable, like any failure, until the job's attempts are spent.
    spent = outcome(executed(tmp_path / "3", [Check("boom", verdict_of(RuntimeError("down")).fn)], prior_failures=2))
    assert spent.error_class == pb.ERROR_CLASS_PERMANENT
    late = [Check("late", verdict_of(False).fn, retryable=True)]
    assert outcome(executed(tmp_path / "4", late)).error_class == pb.ERROR_CLASS_RETRYABLE


def test_nothing_is_recorded_while_the_checks_run(tmp_path: Path, release: threading.Event) -> None:
    """The outcome waits for every check: a process that dies meanwhile leaves a run without outcome (failed as
    stale and retried later, tests/orchestrator/test_decide.py), never an instance Live unchecked."""
    entered = threading.Event()

    def slow(context: CheckContext) -> CheckOutcome:
        entered.set()
        release.wait(timeout=30)
        return CheckOutcome(True)

    events = executed(tmp_path, [Check("slow", slow)])
    assert entered.wait(timeout=30)
    assert [e.WhichOneof("payload") for e in events()] == ["job_run_heartbeat"]
    release.set()
    assert isinstance(outcome(events), pb.JobRunSuccess)
