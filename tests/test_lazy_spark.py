"""The process's SparkSession starts at the first job run that asks for `ctx.spark`, never before.

An orchestrator whose jobs do not use Spark (or that never gets a run) starts no
JVM; the first run that does use it starts the session once, for every thread,
and labels its own Spark jobs with its run id from that moment (cancellation
relies on it). Real threads, the tests' shared local[2] session, a real
`partbuild run` process.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from partbuild.orchestrator.context import JobContext, OutputTarget
from partbuild.orchestrator.decide import RunPlan, instance_location
from partbuild.orchestrator.executor import JobExecutor
from partbuild.orchestrator.graph import Graph, Job
from partbuild.orchestrator.spark import LazySpark
from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.fold.build_state import BuildState
from partbuild.state.log.replay import replay_into
from partbuild.state.log.store import EventLog


class CountingStart:
    """A session factory that counts its calls; fails the first `failures` of them."""

    def __init__(self, session: Any, failures: int = 0) -> None:
        self.session = session
        self.failures = failures
        self.calls = 0
        self.lock = threading.Lock()

    def __call__(self) -> Any:
        with self.lock:
            self.calls += 1
            if self.calls <= self.failures:
                raise ValueError("Could not parse Master URL: 'bogus'\nat org.apache.spark...")
        return self.session


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


def test_a_holder_of_no_session_gives_none() -> None:
    assert LazySpark.of(None).get() is None and LazySpark.of(None).started is None


def run_jobs(executor_spark: Any, job: Callable[[JobContext], None], run_ids: list[str], tmp_path: Path) -> list[str]:
    """Run `job` once per run id through a JobExecutor; the payload kinds each run appended."""
    appended: list[pb.Event] = []
    lock = threading.Lock()

    def append_events(events: list[pb.Event]) -> None:
        with lock:
            appended.extend(events)

    graph = Graph([Job("j", ["j/n={n:int}"], job)])
    executor = JobExecutor(executor_spark, append_events, max_workers=2, heartbeat_interval_s=60)
    try:
        for n, run_id in enumerate(run_ids):
            ref = f"j/n={n}"
            target = OutputTarget(graph.resolve(ref).partition, f"uuid-{n}", instance_location(str(tmp_path), ref, "u"))
            executor.submit(RunPlan(graph.jobs["j"], run_id, [target], {}, {f"uuid-{n}": ()}, 0))
    finally:
        executor.shutdown(wait=True)
    return [e.WhichOneof("payload") for e in appended if e.WhichOneof("payload") != "job_run_heartbeat"]


def test_runs_that_never_ask_for_spark_never_start_it(tmp_path: Path) -> None:
    start = CountingStart(object())
    outcomes = run_jobs(LazySpark(start), lambda ctx: None, ["a", "b", "c"], tmp_path)
    assert outcomes == ["job_run_success"] * 3 and start.calls == 0


def test_the_run_that_asks_starts_spark_and_its_jobs_carry_its_run_id(spark: Any, tmp_path: Path) -> None:
    start = CountingStart(spark)
    seen: dict[str, tuple[str | None, int]] = {}

    def job(ctx: JobContext) -> None:
        if ctx.job_run_id == "quiet":
            return
        session = ctx.spark
        count = session.sparkContext.parallelize(range(10), 2).count()  # a real Spark job of this run
        seen[ctx.job_run_id] = (session.sparkContext.getLocalProperty("spark.jobGroup.id"), count)

    outcomes = run_jobs(LazySpark(start), job, ["quiet", "first", "second"], tmp_path)
    assert outcomes == ["job_run_success"] * 3
    assert start.calls == 1  # started once, by whichever run asked first
    assert seen == {"first": ("first", 10), "second": ("second", 10)}


def test_a_failed_start_fails_the_run_retryably_with_the_reason(tmp_path: Path) -> None:
    appended: list[pb.Event] = []
    graph = Graph([Job("j", ["j/n={n:int}"], lambda ctx: ctx.spark)])
    target = OutputTarget(graph.resolve("j/n=1").partition, "uuid-1", str(tmp_path / "x"))
    executor = JobExecutor(LazySpark(CountingStart(object(), failures=5), "Spark bogus"), appended.extend)
    executor.submit(RunPlan(graph.jobs["j"], "r", [target], {}, {"uuid-1": ()}, 0))
    executor.shutdown(wait=True)
    failure = appended[-1].job_run_failure
    assert failure.error_class == pb.ERROR_CLASS_RETRYABLE
    assert failure.message == "RuntimeError: cannot start Spark bogus: ValueError: Could not parse Master URL: 'bogus'"


def test_a_process_whose_jobs_do_not_use_spark_starts_no_jvm(sqlite_url: str, tmp_path: Path) -> None:
    """`partbuild run` with a master that cannot work: nothing asks for Spark, so all is built."""
    graph = tmp_path / "graph.py"
    graph.write_text(
        "from partbuild.orchestrator.graph import Graph, Job\n"
        "def write(ctx):\n"
        "    for target in ctx.outputs:\n"
        "        ctx.record(target.ref, row_count=1)\n"
        "graph = Graph([Job('noop', ['t/noop/part={n:int}'], write)])\n"
    )
    exe = shutil.which("partbuild", path=str(Path(sys.executable).parent))
    assert exe is not None
    common = ["--db", sqlite_url]
    for n in range(3):
        want = subprocess.run([exe, "want", *common, f"t/noop/part={n}"], capture_output=True, text=True, timeout=60)
        assert want.returncode == 0, want.stderr
    env = os.environ | {"PARTBUILD_SPARK_MASTER": "bogus://nowhere"}
    done = subprocess.run(
        [exe, "run", *common, "--graph", str(graph), "--warehouse", str(tmp_path / "w"), "--until-idle"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "starting Spark" not in done.stderr and "Setting default log level" not in done.stderr
    with EventLog.open(sqlite_url) as log:
        state = BuildState(strict=True)
        replay_into(state, log)
    assert [want.state.name for want in state.wants.values()] == ["SUCCESSFUL"] * 3
