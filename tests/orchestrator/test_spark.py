"""The process's SparkSession starts at the first job run that asks for `ctx.spark`, never before.

`LazySpark` starts the session once, for every thread, and names the master in one line when the start
fails; a run that never asks starts nothing, and a failed start fails the run retryably. Real threads and
a counting session factory; the real session and a real `partbuild run` process:
tests/e2e/test_lazy_spark_processes.py.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from partbuild.orchestrator.context import OutputTarget
from partbuild.orchestrator.decide import RunPlan
from partbuild.orchestrator.executor import JobExecutor
from partbuild.orchestrator.graph import Graph, Job
from partbuild.orchestrator.spark import LazySpark
from partbuild.proto.v1 import events_pb2 as pb

from sparkstartkit import CountingStart, run_jobs


def test_the_first_get_starts_the_session_once_for_every_thread() -> None:
    session = object()
    start = CountingStart(session)
    lazy = LazySpark(start, describe="Spark local[2]")
    assert lazy.started is None and start.calls == 0
    got: list[Any] = []
    threads = [threading.Thread(target=lambda: got.append(lazy.get())) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert got == [session] * 8 and start.calls == 1 and lazy.started is session


def test_a_failed_start_names_the_master_in_one_line_and_is_tried_again() -> None:
    start = CountingStart(object(), failures=1)
    lazy = LazySpark(start, describe="Spark bogus")
    with pytest.raises(RuntimeError) as raised:
        lazy.get()
    assert str(raised.value) == "cannot start Spark bogus: ValueError: Could not parse Master URL: 'bogus'"
    assert lazy.started is None
    assert lazy.get() is start.session and start.calls == 2  # a cluster that came back is used


def test_a_start_in_the_background_is_the_one_every_get_then_uses() -> None:
    start = CountingStart(object())
    lazy = LazySpark(start, describe="Spark local[2]")
    lazy.start_in_background().join()
    assert lazy.started is start.session and start.calls == 1
    assert lazy.get() is start.session and start.calls == 1


def test_a_failed_start_in_the_background_is_logged_and_left_to_the_first_get(
    caplog: pytest.LogCaptureFixture,
) -> None:
    start = CountingStart(object(), failures=1)
    lazy = LazySpark(start, describe="Spark bogus")
    lazy.start_in_background().join()
    assert lazy.started is None
    assert "cannot start Spark bogus: ValueError: Could not parse Master URL: 'bogus'" in caplog.text
    assert lazy.get() is start.session and start.calls == 2


def test_a_holder_of_no_session_gives_none() -> None:
    assert LazySpark.of(None).get() is None and LazySpark.of(None).started is None


def test_runs_that_never_ask_for_spark_never_start_it(tmp_path: Path) -> None:
    start = CountingStart(object())
    outcomes = run_jobs(LazySpark(start), lambda ctx: None, ["a", "b", "c"], tmp_path)
    assert outcomes == ["job_run_success"] * 3 and start.calls == 0


def test_a_failed_start_fails_the_run_retryably_with_the_reason(tmp_path: Path) -> None:
    appended: list[pb.Event] = []
    graph = Graph([Job("j", ["j/n={n:int}"], lambda ctx: ctx.spark)])
    target = OutputTarget(graph.resolve("j/n=1").partition, "uuid-1", str(tmp_path / "x"))
    executor = JobExecutor(LazySpark(CountingStart(object(), failures=5), "Spark bogus"), appended.extend)
    executor.submit(RunPlan(graph.jobs["j"], "r", [target], {}, {"uuid-1": ()}, 0))
    executor.shutdown(wait=True)
    failure = appended[-1].job_run_failure
    assert failure.error_class == pb.ERROR_CLASS_RETRYABLE
    # The root cause, one line (orchestrator/errors.py): the "cannot start Spark" wrapper and the JVM's frames are in
    # the run log.
    assert failure.message == "ValueError: Could not parse Master URL: 'bogus'"
