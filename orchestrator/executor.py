"""Running job runs: one thread per run on the process's shared SparkSession, heartbeats, outcomes.

Spark accepts jobs from several threads of one session and runs them
concurrently, so several job runs share the session (and its start-up cost).
Every run ends in exactly one outcome event (see `context` for the table).
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from google.protobuf.message import Message

from partbuild.orchestrator.context import JobContext, MissingInputs, OutputRecord, PermanentJobError, Resolver
from partbuild.orchestrator.decide import RunPlan
from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.events import Clock, envelope, from_job_run, wall_clock_ms

Append = Callable[[list[pb.Event]], object]
MAX_MESSAGE = 2_000

logger = logging.getLogger("partbuild.executor")


class JobExecutor:
    """Runs `RunPlan`s in a thread pool and appends their heartbeats and outcomes."""

    def __init__(
        self,
        spark: Any,
        append: Append,
        *,
        resolve: Resolver | None = None,
        max_workers: int = 4,
        heartbeat_interval_s: float = 5.0,
        clock: Clock = wall_clock_ms,
        on_finished: Callable[[], None] | None = None,
    ) -> None:
        self.spark = spark
        self._append = append
        self._resolve = resolve
        self._clock = clock
        self._on_finished = on_finished or (lambda: None)
        self._pool = ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="partbuild-run")
        self._running: dict[str, RunPlan] = {}  # submitted, maybe still waiting for a thread
        self._started: set[str] = set()  # executing: these send heartbeats
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._heartbeat_interval_s = heartbeat_interval_s
        self._ticker = threading.Thread(target=self._beat, name="partbuild-heartbeat", daemon=True)
        self._ticker.start()

    def running_ids(self) -> list[str]:
        """Job runs this process is executing right now (their heartbeats are alive)."""
        with self._lock:
            return list(self._running)

    def submit(self, plan: RunPlan) -> None:
        with self._lock:
            self._running[plan.job_run_id] = plan
        self._pool.submit(self._execute, plan)

    def shutdown(self, wait: bool = True) -> None:
        """Stop taking runs; with `wait`, let the ones in flight finish and record their outcomes."""
        self._pool.shutdown(wait=wait)
        self._stopping.set()
        self._ticker.join(timeout=5)

    def _execute(self, plan: RunPlan) -> None:
        run_id = plan.job_run_id
        log = logger.getChild(plan.job.label)
        try:
            self._emit(pb.JobRunHeartbeat(job_run_id=run_id), run_id)  # queued -> running
            with self._lock:
                self._started.add(run_id)
            context = JobContext(
                spark=self.spark,
                job_run_id=run_id,
                job_label=plan.job.label,
                outputs=plan.targets,
                input_locations=plan.input_locations,
                log=log,
                resolve=self._resolve,
            )
            outcome = self._run_job(plan, context, log)
        except Exception as exc:  # e.g. the log is unreachable: the heartbeat timeout recovers the run
            log.exception("job run %s could not be executed: %s", run_id, exc)
            outcome = None
        with self._lock:
            del self._running[run_id]
            self._started.discard(run_id)
        if outcome is not None:
            try:
                self._emit(outcome, run_id)
            except Exception:
                log.exception("could not record the outcome of job run %s", run_id)
        self._on_finished()

    def _run_job(self, plan: RunPlan, context: JobContext, log: logging.Logger) -> Message:
        run_id = plan.job_run_id
        self._tag_spark_jobs(plan)
        try:
            plan.job.run(context)
        except MissingInputs as exc:
            # Only refs the job claims missing without having seen them absent can loop: a ref found
            # absent may have become Live since, and then the dep miss simply reschedules the run.
            claimed = [ref for ref in exc.refs if ref not in context.found_absent]
            live = [ref for ref in claimed if ref in plan.input_locations or self._is_live(ref)]
            if live:
                # Rerunning at once would end the same way: count it as a failure, so the
                # retry policy bounds it, instead of a dep miss that reschedules immediately.
                error = RuntimeError(f"job reported inputs as missing that are Live: {', '.join(live)}")
                return _failure(run_id, error, permanent=plan.prior_failures + 1 >= plan.job.retry.max_attempts)
            log.info("job run %s is missing %s", run_id, exc.refs)
            return pb.JobRunMissingDeps(job_run_id=run_id, missing_refs=exc.refs)
        except PermanentJobError as exc:
            log.error("job run %s failed permanently: %s", run_id, exc)
            return _failure(run_id, exc, permanent=True)
        except Exception as exc:
            exhausted = plan.prior_failures + 1 >= plan.job.retry.max_attempts
            log.warning("job run %s failed (%s): %s", run_id, "retries exhausted" if exhausted else "retryable", exc)
            return _failure(run_id, exc, permanent=exhausted)
        return _success(plan, context)

    def _is_live(self, ref: str) -> bool:
        return self._resolve is not None and self._resolve(ref) is not None

    def _tag_spark_jobs(self, plan: RunPlan) -> None:
        """Name this thread's Spark jobs after the run (Spark UI, cancellation); not on Spark Connect."""
        if self.spark is None:
            return
        # Spark Connect sessions have no SparkContext: accessing it raises there.
        with contextlib.suppress(Exception):
            self.spark.sparkContext.setJobGroup(plan.job_run_id, f"partbuild {plan.job.label}", interruptOnCancel=True)

    def _emit(self, payload: Message, run_id: str) -> None:
        self._append([envelope(payload, source=from_job_run(run_id), timestamp_ms=self._clock())])

    def _beat(self) -> None:
        while not self._stopping.wait(self._heartbeat_interval_s):
            with self._lock:
                running = sorted(self._started)
            if not running:
                continue
            now = self._clock()
            beats = [
                envelope(pb.JobRunHeartbeat(job_run_id=run_id), source=from_job_run(run_id), timestamp_ms=now)
                for run_id in running
            ]
            try:
                self._append(beats)
            except Exception:
                logger.exception("heartbeats could not be recorded")


def _success(plan: RunPlan, context: JobContext) -> pb.JobRunSuccess:
    # Inputs discovered while running are not tied to one output: every output read them.
    extra = tuple(context.extra_reads.values())
    outputs = []
    for target in plan.targets:
        record = context.records.get(target.ref) or OutputRecord()
        declared = plan.input_uuids[target.instance_uuid]
        outputs.append(
            pb.OutputResult(
                instance_uuid=target.instance_uuid,
                location=target.location,
                row_count=record.row_count,
                bytes=record.byte_count,
                input_instance_uuids=[*declared, *(uuid for uuid in extra if uuid not in declared)],
                metadata=record.metadata,
            )
        )
    return pb.JobRunSuccess(job_run_id=plan.job_run_id, outputs=outputs)


def _failure(run_id: str, exc: BaseException, *, permanent: bool) -> pb.JobRunFailure:
    message = f"{type(exc).__name__}: {exc}"
    if len(message) > MAX_MESSAGE:
        message = message[: MAX_MESSAGE - 3] + "..."
    error_class = pb.ERROR_CLASS_PERMANENT if permanent else pb.ERROR_CLASS_RETRYABLE
    return pb.JobRunFailure(job_run_id=run_id, error_class=error_class, message=message)
