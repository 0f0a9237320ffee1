"""Canceling a job run: a JobRunCancel in the log stops the run in the orchestrator executing it, and a
fresh instance (another location) is rebuilt at once, in this process or another.

The tests run the real loop in a background thread (`run(stop)`) on a real SQLite log and the shared
local[2] SparkSession; the test appends JobRunCancel like an operator would and watches Spark through its
status tracker. `JobExecutor.cancel()` alone, without Spark: tests/orchestrator/test_executor.py.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from partbuild.api.models.common import CancelRequest
from partbuild.api.service import Service
from partbuild.orchestrator.context import JobContext
from partbuild.orchestrator.decide import instance_location
from partbuild.orchestrator.graph import Graph, Job, RetryPolicy
from partbuild.orchestrator.loop import Orchestrator
from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.database import Database
from partbuild.state.fold.build_state import BuildState
from partbuild.state.fold.records import InstanceState, JobRunState, WantState
from partbuild.state.log.events import envelope, manual, system
from partbuild.state.log.replay import replay_into
from partbuild.state.log.store import EventLog

from w1workerkit import assert_running, output, processes
from waitkit import wait_for


def now_ms() -> int:
    return time.time_ns() // 1_000_000


@pytest.fixture
def gate() -> Iterator[threading.Event]:
    """Released at teardown at the latest, so no job thread outlives its test blocked."""
    event = threading.Event()
    yield event
    event.set()


SLOW_TASK_S = 120  # what each Spark task of a first attempt would sleep if nobody canceled it
CANCEL_TIMEOUT_S = 45  # Spark must report the job stopped well before SLOW_TASK_S (a loaded 2-core CI machine: slack)
AFTER_CANCEL_S = 1.5  # a canceled first attempt "cleans up" this long after its Spark job failed


def append(log: EventLog, payload: Any) -> int:
    """Append one event as an operator would; returns its seq."""
    return log.append([envelope(payload, source=manual("test"))]).first_seq


def replayed(log: EventLog) -> BuildState:
    """A strict replay of the whole log: thread-safe to read, unlike the orchestrator's live state."""
    state = BuildState(strict=True)
    replay_into(state, log)
    return state


def events_from_run(log: EventLog, run_id: str) -> list[tuple[int, str]]:
    """(seq, event type) of every event the job run itself appended."""
    found = []
    for stored in log.read(0, 10_000):
        event = stored.to_event()
        if event.source.WhichOneof("kind") == "job_run" and event.source.job_run.job_run_id == run_id:
            found.append((stored.seq, stored.event_type))
    return found


@dataclass
class Calls:
    """What the job function saw: per job run id, when it started and when it returned or raised."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    started_ms: dict[str, int] = field(default_factory=dict)
    ended_ms: dict[str, int] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)
    locations: dict[str, list[str]] = field(default_factory=dict)  # where each run was to write

    def start(self, run_id: str, locations: list[str] | None = None) -> None:
        with self.lock:
            self.started_ms[run_id] = now_ms()
            self.locations[run_id] = locations or []

    def end(self, run_id: str, error: BaseException | None) -> None:
        with self.lock:
            self.ended_ms[run_id] = now_ms()
            if error is not None:
                self.errors[run_id] = type(error).__name__


@pytest.fixture
def calls() -> Calls:
    return Calls()


@pytest.fixture
def run_orchestrator(sqlite_url: str, tmp_path: Path, spark: Any) -> Iterator[Callable[..., Orchestrator]]:
    """Start an Orchestrator on the test's SQLite log in a background thread; stopped at teardown."""
    started: list[tuple[Orchestrator, threading.Thread, threading.Event, Database]] = []

    def start(graph: Graph, **options: Any) -> Orchestrator:
        db = Database.open(sqlite_url, auto_upgrade=True)
        settings: dict[str, Any] = {
            "warehouse": str(tmp_path / "warehouse"),
            "spark": spark,
            "poll_interval_s": 0.01,
            "source_check_interval_s": 0,
            # Longer than a test: a periodic heartbeat cannot race the test's JobRunCancel (it would be
            # appended after it and rejected). The first heartbeat (queued -> running) is not periodic.
            "heartbeat_interval_s": 60,
            **options,
        }
        orchestrator = Orchestrator(db, graph, **settings)
        stop = threading.Event()
        thread = threading.Thread(target=orchestrator.run, args=(stop,), name="cancel-orchestrator", daemon=True)
        thread.start()
        started.append((orchestrator, thread, stop, db))
        return orchestrator

    yield start
    for _, thread, stop, db in started:
        stop.set()
        thread.join(timeout=60)
        assert not thread.is_alive(), "the orchestrator did not stop within 60 s"
        db.close()


@pytest.fixture
def log(sqlite_url: str) -> Iterator[EventLog]:
    """The test's own handle on the log (the orchestrator opens its own, like another process)."""
    with EventLog.open(sqlite_url, auto_upgrade=True) as handle:
        yield handle


def run_of(state: BuildState, ref: str, *, index: int = -1) -> str | None:
    """The id of a job run that tried to build `ref`'s canonical instance (the last one by default)."""
    instance = state.canonical_instance(ref)
    return instance.attempts[index] if instance is not None and instance.attempts else None


def active_group_jobs(spark: Any, run_id: str) -> list[int]:
    """Ids of the Spark jobs of the run's job group that Spark reports as running."""
    tracker = spark.sparkContext.statusTracker()
    running = []
    for job_id in tracker.getJobIdsForGroup(run_id):
        info = tracker.getJobInfo(job_id)
        if info is not None and info.status == "RUNNING":
            running.append(job_id)
    return running


# ----------------------------------------------------------------- canceling a running run


def slow_first_attempt(root: Path, calls: Calls) -> Callable[[JobContext], None]:
    """A job whose first attempt at a ref runs a Spark job of SLOW_TASK_S per task; later ones are quick."""

    def run(ctx: JobContext) -> None:
        calls.start(ctx.job_run_id, [target.location for target in ctx.outputs])
        error: BaseException | None = None
        try:
            for target in ctx.outputs:
                marker = root / f"attempted-{target.partition['n']}"
                if not marker.exists():  # the marker file decides: only the first attempt is slow
                    marker.touch()
                    ctx.spark.range(0, 2, 1, 2).rdd.map(lambda x: (time.sleep(SLOW_TASK_S), x)).count()
                ctx.spark.range(10).write.mode("overwrite").parquet(target.location)
                ctx.record(target.ref, row_count=10)
        except BaseException as exc:
            error = exc
            time.sleep(AFTER_CANCEL_S)  # cleaning up: the thread outlives the canceled Spark job a while
            raise
        finally:
            calls.end(ctx.job_run_id, error)

    return run


def test_canceling_a_running_run_stops_its_spark_job_and_a_new_run_rebuilds(
    run_orchestrator: Callable[..., Orchestrator],
    log: EventLog,
    spark: Any,
    tmp_path: Path,
    calls: Calls,
    sqlite_url: str,
) -> None:
    ref = "slow/n=1"
    job = Job("slow", ["slow/n={n:int}"], slow_first_attempt(tmp_path, calls), max_concurrency=2)
    run_orchestrator(Graph([job]))  # two worker threads: a free one for the rebuild while the first ends
    append(log, pb.WantCreate(want_id="w1", partition_refs=[ref]))

    def running_with_spark_job() -> tuple[str, list[int]] | None:
        state = replayed(log)
        first = run_of(state, ref, index=0)
        if first is None or state.job_runs[first].state != JobRunState.RUNNING:
            return None
        jobs = active_group_jobs(spark, first)
        return (first, jobs) if jobs else None

    first, spark_jobs = wait_for("the run to be running with an active Spark job", running_with_spark_job, 60)
    # As an operator would: through the service behind `POST /job-runs/{id}/cancel` and `runs cancel`.
    with Database.open(sqlite_url) as db:
        service = Service(db)
        cancel_seq = service.cancel_job_run(first, CancelRequest(reason="test"), "operator").seq
        service.stop()

    # Spark stops the job well before its tasks' sleep would have ended.
    wait_for("Spark to stop the canceled run's job", lambda: not active_group_jobs(spark, first), CANCEL_TIMEOUT_S)
    tracker = spark.sparkContext.statusTracker()
    assert {tracker.getJobInfo(j).status for j in spark_jobs} == {"FAILED"}

    def rebuilt() -> BuildState | None:
        state = replayed(log)
        return state if state.wants["w1"].state == WantState.SUCCESSFUL else None

    state = wait_for("a new run to rebuild the partition", rebuilt, 30)
    assert state.job_runs[first].state == JobRunState.CANCELED
    assert state.job_runs[first].cancel_reason == "test"
    assert state.rejections == []
    instance = state.canonical_instance(ref)
    assert instance is not None and instance.state == InstanceState.LIVE
    assert instance.built_by is not None and instance.built_by != first
    # The canceled run's instance stays in history as canceled; a fresh one (another location) was rebuilt.
    (canceled_uuid,) = state.job_runs[first].instance_uuids
    canceled = state.instances[canceled_uuid]
    assert canceled.state == InstanceState.CANCELED and instance.previous_uuid == canceled_uuid
    assert canceled.attempts == (first,) and instance.attempts == (instance.built_by,)
    # The canceled run recorded only its start: no heartbeat, no outcome after the cancel.
    [(started_seq, kind)] = events_from_run(log, first)
    assert kind == "job_run_heartbeat" and started_seq < cancel_seq
    # Its function ends (its Spark action failed), before or after the rebuild: nothing orders the two,
    # since the rebuild writes elsewhere.
    rebuild = instance.built_by
    wait_for("the canceled run's function to end", lambda: first in calls.ended_ms, CANCEL_TIMEOUT_S)
    assert calls.errors[first] == "Py4JJavaError"
    assert calls.locations[first] != calls.locations[rebuild] == [instance.location]


# ----------------------------------------------------------------- canceling a run that waits for a thread


def test_run_canceled_while_waiting_for_a_thread_never_starts(
    run_orchestrator: Callable[..., Orchestrator], log: EventLog, calls: Calls, gate: threading.Event
) -> None:
    """One worker thread: the first run holds it, the second waits, is canceled, and never runs."""

    def run(ctx: JobContext) -> None:
        calls.start(ctx.job_run_id)
        gate.wait(timeout=30)
        for target in ctx.outputs:
            ctx.spark.range(3).write.mode("overwrite").parquet(target.location)
        calls.end(ctx.job_run_id, None)

    job = Job("gated", ["gated/n={n:int}"], run, max_concurrency=2)
    run_orchestrator(Graph([job]), max_workers=1)
    append(log, pb.WantCreate(want_id="w1", partition_refs=["gated/n=1"]))
    append(log, pb.WantCreate(want_id="w2", partition_refs=["gated/n=2"]))

    def one_running_one_queued() -> tuple[str, str] | None:
        state = replayed(log)
        runs = [run_of(state, "gated/n=1"), run_of(state, "gated/n=2")]
        if None in runs:
            return None
        by_state = {state.job_runs[r].state: r for r in runs if r is not None}
        if set(by_state) != {JobRunState.RUNNING, JobRunState.QUEUED} or not calls.started_ms:
            return None
        return by_state[JobRunState.RUNNING], by_state[JobRunState.QUEUED]

    holder, waiting = wait_for("one run holding the thread and one waiting", one_running_one_queued)
    state = replayed(log)
    waiting_ref = state.instances[state.job_runs[waiting].instance_uuids[0]].ref
    append(log, pb.JobRunCancel(job_run_id=waiting, reason="test"))
    # The orchestrator buffers the rebuild in the step that folds the cancel, after stopping the run.
    wait_for("the rebuild to be buffered", lambda: run_of(replayed(log), waiting_ref) != waiting)
    gate.set()

    def all_successful() -> BuildState | None:
        state = replayed(log)
        return state if all(w.state == WantState.SUCCESSFUL for w in state.wants.values()) else None

    state = wait_for("both wants to be successful", all_successful)
    assert state.rejections == []
    assert waiting not in calls.started_ms  # its job function never ran
    assert events_from_run(log, waiting) == []  # not even the heartbeat that marks it running
    assert state.job_runs[waiting].state == JobRunState.CANCELED
    assert state.job_runs[holder].state == JobRunState.SUCCEEDED
    rebuilt = state.canonical_instance(waiting_ref)
    assert rebuilt is not None and rebuilt.state == InstanceState.LIVE
    assert rebuilt.built_by not in (None, waiting, holder)


# ----------------------------------------------------------------- a run another worker failed as stale


def test_a_run_failed_as_stale_elsewhere_stops_here_and_is_rebuilt_once_its_thread_ends(
    run_orchestrator: Callable[..., Orchestrator], log: EventLog, calls: Calls, gate: threading.Event
) -> None:
    """This process looked dead (paused past the heartbeat timeout); another worker failed its run.

    From the step that folds the failure, the run records nothing more: no heartbeat, and its
    function's success is dropped (the fold would reject both). The retry waits for its thread.
    """

    def run(ctx: JobContext) -> None:
        calls.start(ctx.job_run_id)
        if len(calls.started_ms) == 1:
            gate.wait(timeout=30)  # the first attempt is "paused" until the test lets it go
        for target in ctx.outputs:
            ctx.record(target.ref, row_count=1)
        calls.end(ctx.job_run_id, None)

    job = Job("slow", ["slow/n={n:int}"], run, retry=RetryPolicy(max_attempts=3, backoff_ms=0))
    run_orchestrator(Graph([job]), spark=None, heartbeat_interval_s=0.05)
    append(log, pb.WantCreate(want_id="w", partition_refs=["slow/n=1"]))

    def heartbeating() -> str | None:
        run_id = run_of(replayed(log), "slow/n=1")
        return run_id if run_id is not None and len(events_from_run(log, run_id)) >= 3 else None

    first = wait_for("the first run to heartbeat", heartbeating)
    stale = pb.JobRunFailure(job_run_id=first, error_class=pb.ERROR_CLASS_RETRYABLE, message="no heartbeat for 31 s")
    failed_at = log.append([envelope(stale, source=system("another-orchestrator"))]).first_seq
    wait_for("the retry to be buffered", lambda: run_of(replayed(log), "slow/n=1") != first)
    time.sleep(0.5)  # ten heartbeat intervals: a run still heartbeating would have appended by now
    assert [seq for seq, _ in events_from_run(log, first) if seq > failed_at] == []
    assert calls.started_ms.keys() == {first}  # the retry is held back while the first thread runs
    gate.set()

    def successful() -> BuildState | None:
        state = replayed(log)
        return state if state.wants["w"].state == WantState.SUCCESSFUL else None

    state = wait_for("the want to be successful", successful)
    assert state.rejections == []  # nothing late from the failed run
    assert [seq for seq, _ in events_from_run(log, first) if seq > failed_at] == []
    assert state.job_runs[first].state == JobRunState.FAILED
    assert calls.started_ms[run_of(state, "slow/n=1") or ""] >= calls.ended_ms[first]


# ----------------------------------------------------------------- a rebuild in another process, at once

# The graph of both orchestrator processes. The first attempt starts writing its output, then runs a slow
# Spark job; canceled, it goes on writing a while (work outside Spark cannot be stopped). Later attempts
# write at once, without Spark. Every write is noted in writes.log as "<run id> <pid> <what> <path>".
TWO_PROCESS_GRAPH = """
import os
import time
from pathlib import Path

from partbuild.orchestrator.graph import Graph, Job

ROOT = Path(__file__).parent


def note(ctx, what, path=""):
    with open(ROOT / "writes.log", "a") as out:
        out.write(f"{ctx.job_run_id} {os.getpid()} {what} {path}\\n")


def write(ctx, location, name):
    folder = Path(location)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text(ctx.job_run_id)
    note(ctx, "wrote", folder / name)


def run(ctx):
    (target,) = ctx.outputs
    marker = ROOT / "attempted"
    if not marker.exists():
        marker.touch()
        write(ctx, target.location, "_started")
        note(ctx, "spark")
        try:
            ctx.spark.range(0, 2, 1, 2).rdd.map(lambda x: (time.sleep(%(slow)d), x)).count()
        except BaseException:
            time.sleep(%(after)r)
            write(ctx, target.location, "_late")
            note(ctx, "end")
            raise
    write(ctx, target.location, "part-0")
    ctx.record(target.ref, row_count=1)
    note(ctx, "end")


graph = Graph([Job("slow", ["slow/n={n:int}"], run)])
"""


def writes(root: Path) -> list[tuple[str, int, str, str]]:
    """(run id, pid, what, path) of every line the job functions noted so far."""
    path = root / "writes.log"
    if not path.exists():
        return []
    lines = [line.split(" ", 3) for line in path.read_text().splitlines()]
    return [(run_id, int(pid), what, where) for run_id, pid, what, where in lines]


@pytest.mark.process
@pytest.mark.spark
def test_a_rebuild_in_another_process_at_once_never_writes_where_the_canceled_run_writes(
    log: EventLog, sqlite_url: str, tmp_path: Path
) -> None:
    """Process A runs the first attempt on Spark; it is frozen (SIGSTOP) while its run is canceled, so it has
    not even folded the cancel when process B, which never saw the run, rebuilds the partition at once. Then
    A wakes, stops the canceled run, whose function still writes a while. The two runs wrote to two locations:
    the rebuild's is the Live instance's, and holds nothing of the canceled run."""
    ref = "slow/n=1"
    (tmp_path / "graph.py").write_text(TWO_PROCESS_GRAPH % {"slow": SLOW_TASK_S, "after": AFTER_CANCEL_S})
    exe = shutil.which("partbuild", path=str(Path(sys.executable).parent))
    assert exe is not None
    warehouse = tmp_path / "warehouse"
    command = [exe, "run", "--db", sqlite_url, "--graph", str(tmp_path / "graph.py"), "--warehouse", str(warehouse)]
    # No periodic heartbeat during the test: one after the cancel would be rejected (A folds it late).
    command += ["--heartbeat-interval", "600"]
    env = os.environ | {"PARTBUILD_SPARK_MASTER": "local[2]"}
    with processes() as procs:
        with open(tmp_path / "a.log", "wb") as out:
            procs["a"] = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env)
        append(log, pb.WantCreate(want_id="w1", partition_refs=[ref]))

        def first_in_spark() -> str | None:
            assert_running(procs, ["a"], tmp_path)
            return next((run_id for run_id, _, what, _ in writes(tmp_path) if what == "spark"), None)

        first = wait_for("process A's run to start its Spark job", first_in_spark, 180)
        time.sleep(1)  # into the Spark action
        os.kill(procs["a"].pid, signal.SIGSTOP)
        try:
            with Database.open(sqlite_url) as db:
                service = Service(db)
                service.cancel_job_run(first, CancelRequest(reason="test"), "operator")
                service.stop()
            with open(tmp_path / "b.log", "wb") as out:
                procs["b"] = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env)

            def rebuilt() -> BuildState | None:
                assert_running(procs, ["b"], tmp_path)
                state = replayed(log)
                return state if state.wants["w1"].state == WantState.SUCCESSFUL else None

            state = wait_for("process B to rebuild the partition", rebuilt, 60)
            # At once: the canceled function has not even been told (its process is frozen).
            assert [what for run_id, _, what, _ in writes(tmp_path) if run_id == first] == ["wrote", "spark"]
        finally:
            os.kill(procs["a"].pid, signal.SIGCONT)

        def canceled_one_ended() -> bool:
            assert_running(procs, ["a", "b"], tmp_path)
            return any(run_id == first and what == "end" for run_id, _, what, _ in writes(tmp_path))

        wait_for("the canceled function to end, writing as it goes", canceled_one_ended, CANCEL_TIMEOUT_S)
        for name in ("a", "b"):
            procs[name].send_signal(signal.SIGTERM)
        for name in ("a", "b"):
            assert procs[name].wait(timeout=60) == 0, output(tmp_path, name)[-3000:]

    state = replayed(log)
    instance = state.canonical_instance(ref)
    assert instance is not None and instance.location is not None
    rebuild = instance.built_by
    assert rebuild is not None and rebuild != first
    # Who wrote where: A the canceled run, before and after the cancel; B the rebuild; never one place.
    by_run: dict[str, set[str]] = {}
    for run_id, pid, what, where in writes(tmp_path):
        assert pid == procs["a" if run_id == first else "b"].pid
        if what == "wrote":
            by_run.setdefault(run_id, set()).add(str(Path(where).parent))
    assert by_run[first].isdisjoint(by_run[rebuild]), f"both runs wrote to {by_run[first] & by_run[rebuild]}"
    assert by_run[rebuild] == {instance.location}
    assert sorted(path.name for path in Path(instance.location).iterdir()) == ["part-0"]
    assert sorted(path.name for path in Path(next(iter(by_run[first]))).iterdir()) == ["_late", "_started"]
    # The canceled instance stays in history, canceled; it was never built: its location follows from its UUID.
    assert state.rejections == [] and instance.state == InstanceState.LIVE
    canceled = state.instances[state.job_runs[first].instance_uuids[0]]
    assert canceled.state == InstanceState.CANCELED and instance.previous_uuid == canceled.uuid
    assert canceled.location is None and by_run[first] == {instance_location(str(warehouse), ref, canceled.uuid)}
