"""Canceling a job run in `JobExecutor` alone, with no Spark, to pin down what happens around `cancel()`
exactly. A JobRunCancel in the log stopping a real orchestrator's run on Spark: tests/e2e/test_cancel_run_spark.py.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from partbuild.orchestrator.context import JobContext, OutputTarget
from partbuild.orchestrator.decide import RunPlan, instance_location
from partbuild.orchestrator.executor import JobExecutor
from partbuild.orchestrator.graph import Graph, Job
from partbuild.proto.v1 import events_pb2 as pb

from waitkit import wait_for


@pytest.fixture
def gate() -> Iterator[threading.Event]:
    """Released at teardown at the latest, so no job thread outlives its test blocked."""
    event = threading.Event()
    yield event
    event.set()


def test_executor_records_nothing_after_cancel_and_holds_back_the_same_instance(
    tmp_path: Path, gate: threading.Event
) -> None:
    """After cancel() returns: no heartbeat, no outcome; a rebuild of its instance waits for its thread."""
    appended: list[pb.Event] = []
    lock = threading.Lock()
    started: list[str] = []

    def append_events(events: list[pb.Event]) -> None:
        with lock:
            appended.extend(events)

    def run(ctx: JobContext) -> None:
        started.append(ctx.job_run_id)
        if ctx.job_run_id == "first":
            gate.wait(timeout=30)  # a job function busy outside Spark: cancel cannot stop it

    graph = Graph([Job("j", ["j/n={n:int}"], run)])
    partition = graph.resolve("j/n=1").partition
    target = OutputTarget(partition, "uuid-1", instance_location(str(tmp_path), "j/n=1", "uuid-1"))

    def plan(run_id: str) -> RunPlan:
        return RunPlan(graph.jobs["j"], run_id, [target], {}, {"uuid-1": ()}, 0)

    def from_run(run_id: str) -> list[str]:
        with lock:
            return [e.WhichOneof("payload") for e in appended if e.source.job_run.job_run_id == run_id]

    executor = JobExecutor(None, append_events, max_workers=2, heartbeat_interval_s=0.02)
    try:
        executor.submit(plan("first"))
        wait_for("heartbeats of the first run", lambda: len(from_run("first")) >= 3)
        assert executor.cancel("first")
        assert not executor.cancel("first")  # once is enough
        recorded = from_run("first")
        executor.submit(plan("rebuild"))  # same instance: held back while "first" still runs
        time.sleep(0.3)
        assert started == ["first"]
        assert from_run("first") == recorded
        assert from_run("rebuild") == []
        assert set(executor.running_ids()) == {"first", "rebuild"}
        gate.set()
        wait_for("the rebuild to succeed", lambda: "job_run_success" in from_run("rebuild"))
    finally:
        gate.set()
        executor.shutdown(wait=True)
    assert started == ["first", "rebuild"]
    assert from_run("first") == recorded  # the first run's success was dropped
    assert executor.running_ids() == []
