"""Running job runs: one thread per run on the process's shared SparkSession, heartbeats, outcomes.

Spark accepts jobs from several threads of one session and runs them
concurrently, so several job runs share the session (and its start-up cost).
The session starts when the first run asks for `ctx.spark` (`spark.LazySpark`);
each run's Spark jobs are tagged with its id from that moment, in its thread.
Every run ends in exactly one outcome event (see `context` for the table),
except a run the log ended while it ran here (canceled, or failed as stale by
another worker): `cancel` stops it and it records nothing more. Heartbeats
(`JobRunHeartbeat`, every `heartbeat_interval_s`) keep a run from being failed as
stale; the `JobContext` a job function gets is in `context`. A job's quality
checks run in the run's thread after its function returns and before its
outcome is appended (`_gate`, `checks.run_gate`). With a `RunLogWriter` (`run_logs`), each run's
`ctx.log` is a logger of its own whose lines, a failure's traceback and the
run's Spark jobs are kept per run (`orchestrator/run_logs.py`), all written
before the run's outcome is appended.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from google.protobuf.message import Message

from partbuild.orchestrator.checks import Check, CheckTarget, run_gate
from partbuild.orchestrator.context import JobContext, MissingInputs, OutputRecord, PermanentJobError, Resolver
from partbuild.orchestrator.decide import RunPlan
from partbuild.orchestrator.errors import root_cause
from partbuild.orchestrator.graph import Job
from partbuild.orchestrator.observed_writes import Observed, WriteObserver
from partbuild.orchestrator.run_logs import RunLogWriter, spark_job_lines
from partbuild.orchestrator.spark import LazySpark, cancel_spark_jobs, tag_spark_jobs, untag_spark_jobs
from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.log.events import Clock, envelope, from_job_run, wall_clock_ms

Append = Callable[[list[pb.Event]], object]
MAX_MESSAGE = 2_000

logger = logging.getLogger("partbuild.executor")


class RunEnded(RuntimeError):
    """Raised by `ctx.spark` in a run the log has already ended: it must not start Spark jobs."""


class JobExecutor:
    """Runs `RunPlan`s in a thread pool and appends their heartbeats and outcomes.

    `spark`: a `LazySpark`, a session, or None (jobs get no Spark). A run the log has ended
    (canceled, or failed as stale by another worker) is stopped with `cancel`: it records
    nothing more (no heartbeat, no outcome: the fold would reject them), its Spark jobs are
    canceled, and if it was still waiting for a thread it never starts. A Python job function
    cannot be killed, so its thread may keep running for a while; until it ends, no other run
    of this process starts building the same instances (they would write the same location). A
    canceled run's instances are never built again (the fold replaced them with fresh ones), so
    only a run failed as stale, or a cancel of an older log, holds a rebuild back.
    """

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
        run_logs: RunLogWriter | None = None,
    ) -> None:
        self.spark = spark if isinstance(spark, LazySpark) else LazySpark.of(spark)
        self._append = append
        self._resolve = resolve
        self._clock = clock
        self._on_finished = on_finished or (lambda: None)
        self._run_logs = run_logs  # each run's `ctx.log` lines go there too (orchestrator/run_logs.py)
        self._pool = ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="partbuild-run")
        self._running: dict[str, RunPlan] = {}  # submitted and not finished (waiting, parked or executing)
        self._started: set[str] = set()  # their job has started: heartbeats, unless canceled
        self._canceled: set[str] = set()  # canceled in the log while submitted here: record nothing more
        self._building: dict[str, str] = {}  # instance UUID -> the run handed to a thread to build it
        self._parked: list[RunPlan] = []  # runs waiting for a thread still building one of their instances
        self._observers: dict[str, tuple[tuple[Check, ...], WriteObserver]] = {}  # job label -> see `_observer`
        self._lock = threading.Lock()  # guards the bookkeeping above
        # Held while a run's events are appended: once `cancel` has it, nothing of the run is in flight.
        self._emit_lock = threading.Lock()  # taken before `_lock`, never after
        self._stopping = threading.Event()
        self._heartbeat_interval_s = heartbeat_interval_s
        self._ticker = threading.Thread(target=self._beat, name="partbuild-heartbeat", daemon=True)
        self._ticker.start()

    def _observer(self, job: Job) -> WriteObserver:
        """The job's `WriteObserver`, one per declaration of its checks (what Spark refuses is learned once)."""
        checks = tuple(job.checks)
        with self._lock:
            # Kept with the checks themselves (compared by identity: a reloaded graph declares new ones).
            held, observer = self._observers.get(job.label, ((), None))
            same = len(held) == len(checks) and all(a is b for a, b in zip(held, checks, strict=True))
            if observer is None or not same:
                observer = WriteObserver(checks)
                self._observers[job.label] = (checks, observer)
            return observer

    def running_ids(self) -> list[str]:
        """Job runs submitted here and not finished: waiting, held back or executing (canceled ones too)."""
        with self._lock:
            return list(self._running)

    def submit(self, plan: RunPlan) -> None:
        """Run `plan` in a thread, once no thread of this process is still building one of its instances."""
        with self._lock:
            self._running[plan.job_run_id] = plan
            if self._blocked(plan):
                self._parked.append(plan)
                return
            self._claim(plan)
        self._pool.submit(self._execute, plan)

    def cancel(self, run_id: str) -> bool:
        """Stop a run the log has ended; returns whether it was here and not already stopped.

        From when this returns, the run appends nothing. Its active Spark jobs are canceled now, and
        again on every heartbeat tick while its thread still runs (a job function may start more).
        """
        with self._emit_lock, self._lock:
            if run_id not in self._running or run_id in self._canceled:
                return False
            self._canceled.add(run_id)
            started = run_id in self._started
        if started:
            self._cancel_spark_jobs(run_id)
        return True

    def shutdown(self, wait: bool = True) -> None:
        """Stop taking runs; with `wait`, let the ones in flight finish and record their outcomes."""
        self._pool.shutdown(wait=wait)
        self._stopping.set()
        self._ticker.join(timeout=5)
        if self._run_logs is not None:
            self._run_logs.shutdown()

    def _blocked(self, plan: RunPlan) -> bool:
        return any(target.instance_uuid in self._building for target in plan.targets)

    def _claim(self, plan: RunPlan) -> None:
        for target in plan.targets:
            self._building[target.instance_uuid] = plan.job_run_id

    def _execute(self, plan: RunPlan) -> None:
        """A pool thread: run `plan`, then the parked runs its end unblocks (in this thread, no new slot)."""
        queue = [plan]
        while queue:
            current = queue.pop(0)
            outcome = self._attempt(current)
            queue.extend(self._finish(current, outcome))
            self._on_finished()

    def _attempt(self, plan: RunPlan) -> Message | None:
        """Run the job unless it was canceled first; the outcome to record, or None."""
        run_id = plan.job_run_id
        log = logger.getChild(plan.job.label)
        run_log = self._run_logs.open(run_id, log) if self._run_logs is not None else None
        if run_log is not None:
            log = run_log.logger  # the run's own logger: its lines are kept per run, and still reach `log`
        tagged = threading.Event()  # set once this run's thread labels its Spark jobs

        def open_spark() -> Any:
            session = self.spark.get()
            if session is not None and not tagged.is_set():
                self._tag_spark_jobs(session, plan)
                tagged.set()
                # Checked after tagging: a cancel from now on finds every Spark job of the run, and one
                # that came before found none, so the run must not start any.
                if self._is_canceled(run_id):
                    raise RunEnded(f"job run {run_id} was ended in the log before it used Spark")
            return session

        try:
            if (session := self.spark.started) is not None:
                # Spark is up: tag now, as the thread's previous run left its own tag (classic sessions
                # cannot clear it), and before the start check, so a later cancel finds every job.
                self._tag_spark_jobs(session, plan)
                tagged.set()
            if not self._start(run_id):
                log.info("job run %s was canceled before it started", run_id)
                return None
            context = JobContext(
                job_run_id=run_id,
                job_label=plan.job.label,
                outputs=plan.targets,
                input_locations=plan.input_locations,
                log=log,
                resolve=self._resolve,
                open_spark=open_spark,
                observer=self._observer(plan.job),
            )
            try:
                return self._run_job(plan, context, log)
            finally:
                if tagged.is_set():
                    self._untag_spark_jobs(plan)
                    self._log_spark_jobs(run_id, log)
        except Exception as exc:  # e.g. the log is unreachable: the heartbeat timeout recovers the run
            self._run_ending(run_id)
            log.exception("job run %s could not be executed: %s", run_id, exc)
            return None
        finally:
            if run_log is not None:
                run_log.close()

    def _start(self, run_id: str) -> bool:
        """Record that the run is running, unless it was canceled while it waited."""
        with self._emit_lock:
            with self._lock:
                if run_id in self._canceled:
                    return False
            self._emit(pb.JobRunHeartbeat(job_run_id=run_id), run_id)  # queued -> running
            with self._lock:
                self._started.add(run_id)
        return True

    def _finish(self, plan: RunPlan, outcome: Message | None) -> list[RunPlan]:
        """Record the outcome unless the run was canceled; returns the parked runs now free to run."""
        run_id = plan.job_run_id
        with self._emit_lock:
            with self._lock:
                canceled = run_id in self._canceled
                self._forget(plan)
                unblocked = self._unpark()
            if outcome is not None and not canceled:
                try:
                    self._emit(outcome, run_id)
                except Exception:
                    logger.exception("could not record the outcome of job run %s", run_id)
        if canceled and outcome is not None:
            logger.info("job run %s was canceled: its %s is not recorded", run_id, outcome.DESCRIPTOR.name)
        return unblocked

    def _forget(self, plan: RunPlan) -> None:
        run_id = plan.job_run_id
        del self._running[run_id]
        self._started.discard(run_id)
        self._canceled.discard(run_id)
        for target in plan.targets:
            if self._building.get(target.instance_uuid) == run_id:
                del self._building[target.instance_uuid]

    def _unpark(self) -> list[RunPlan]:
        """Claim the parked runs no thread blocks any more, oldest first."""
        unblocked: list[RunPlan] = []
        still: list[RunPlan] = []
        for plan in self._parked:
            if self._blocked(plan):
                still.append(plan)
            else:
                self._claim(plan)
                unblocked.append(plan)
        self._parked = still
        return unblocked

    def _run_job(self, plan: RunPlan, context: JobContext, log: logging.Logger) -> Message | None:
        """Run the job function; the outcome to record (None: it ended because it was canceled)."""
        run_id = plan.job_run_id
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
                error = f"RuntimeError: job reported inputs as missing that are Live: {', '.join(live)}"
                return _failure(run_id, error, permanent=plan.prior_failures + 1 >= plan.job.retry.max_attempts)
            log.info("job run %s is missing %s", run_id, exc.refs)
            return pb.JobRunMissingDeps(job_run_id=run_id, missing_refs=exc.refs)
        except Exception as exc:
            return self._raised(plan, exc, log)
        # A retryable failure of one output follows the job's RetryPolicy like any failure: permanent once spent.
        exhausted = plan.prior_failures + 1 >= plan.job.retry.max_attempts
        failed: dict[str, pb.OutputFailure] = {}
        for target in plan.targets:
            if target.ref in context.failures:
                reason, retryable = context.failures[target.ref]
                log.warning("job run %s: output %s failed on its own: %s", run_id, target.ref, reason)
                uuid = target.instance_uuid
                failed[uuid] = _output_failure(uuid, reason, retryable and not exhausted)
        results: Sequence[pb.InstanceChecks] = ()
        if plan.job.checks:
            gated = self._gate(plan, context, log, failed)
            if gated is None:
                return None
            results, check_failures = gated
            for uuid, (message, retryable) in check_failures.items():
                failed.setdefault(uuid, _output_failure(uuid, message, retryable and not exhausted))
        return _outcome(plan, context, failed, results)

    def _raised(self, plan: RunPlan, exc: Exception, log: logging.Logger) -> Message | None:
        """The outcome of a job function that raised for the whole run (None: it ended because it was canceled).

        In a run of several outputs nothing says which of them broke it: the batch is split, each output
        retried alone with none of its retries spent, so a bad partition is isolated with its own error.
        """
        run_id = plan.job_run_id
        permanent_error = isinstance(exc, PermanentJobError)
        if not permanent_error and self._is_canceled(run_id):  # most likely its Spark jobs were canceled
            log.info("job run %s stopped after it was canceled: %s", run_id, root_cause(exc))
            return None
        self._run_ending(run_id)  # the traceback goes in the run's log even past its cap
        cause = root_cause(exc)
        if len(plan.targets) > 1:
            log.warning("job run %s failed as a whole; each output is retried alone: %s", run_id, cause, exc_info=True)
            return pb.JobRunFailure(job_run_id=run_id, error_class=pb.ERROR_CLASS_RETRYABLE, message=cause, split=True)
        exhausted = plan.prior_failures + 1 >= plan.job.retry.max_attempts
        if permanent_error:
            log.error("job run %s failed permanently: %s", run_id, cause, exc_info=True)
        else:
            state = "retries exhausted" if exhausted else "retryable"
            log.warning("job run %s failed (%s): %s", run_id, state, cause, exc_info=True)
        return _failure(run_id, cause, permanent=permanent_error or exhausted)

    def _gate(
        self, plan: RunPlan, context: JobContext, log: logging.Logger, failed: Mapping[str, pb.OutputFailure]
    ) -> tuple[list[pb.InstanceChecks], dict[str, tuple[str, bool]]] | None:
        """Run the job's checks on its outputs but those already failed (orchestrator/checks.py): the results, and
        each output the checks failed with why and whether it may be retried; None if the run was canceled meanwhile.

        Nothing is recorded until every check has run: a crash meanwhile leaves the run without an
        outcome, so it is failed as stale and retried like any run lost to a crash, never Live unchecked.
        """
        job = plan.job
        targets = [
            CheckTarget(
                target.ref,
                target.instance_uuid,
                target.location,
                {
                    ref: context.input_locations[ref]
                    for ref in job.inputs(target.partition)
                    if ref in context.input_locations
                },
                plan.previous_locations.get(target.instance_uuid),
                plan.input_metrics,
                _observed(context, target.ref),
            )
            for target in plan.targets
            if target.instance_uuid not in failed
        ]
        if not targets:
            return [], {}
        verdict = run_gate(job.checks, targets, job.label, context.open_spark, log=log)
        if self._is_canceled(plan.job_run_id):  # its Spark jobs were likely canceled under the checks
            return None
        return verdict.results, verdict.failures

    def _run_ending(self, run_id: str) -> None:
        if self._run_logs is not None:
            self._run_logs.ending(run_id)

    def _log_spark_jobs(self, run_id: str, log: logging.Logger) -> None:
        """The run's Spark jobs (id, status, duration) as its log's last lines; nothing on Spark Connect."""
        if self._run_logs is None or (session := self.spark.started) is None:
            return
        self._run_ending(run_id)
        try:
            for line in spark_job_lines(session, run_id):
                log.info("%s", line)
        except Exception:  # only a summary: the run's outcome does not depend on it
            logger.debug("could not list the Spark jobs of job run %s", run_id, exc_info=True)

    def _is_live(self, ref: str) -> bool:
        return self._resolve is not None and self._resolve(ref) is not None

    def _is_canceled(self, run_id: str) -> bool:
        with self._lock:
            return run_id in self._canceled

    def _tag_spark_jobs(self, session: Any, plan: RunPlan) -> None:
        """Label this thread's Spark jobs as the run's (Spark UI, cancellation)."""
        try:
            tag_spark_jobs(session, plan.job_run_id, f"partbuild {plan.job.label}")
        except Exception:  # the run can still run; only canceling its Spark jobs would not work
            logger.warning("could not tag the Spark jobs of job run %s", plan.job_run_id, exc_info=True)

    def _untag_spark_jobs(self, plan: RunPlan) -> None:
        with contextlib.suppress(Exception):  # the run is over either way
            untag_spark_jobs(self.spark.started, plan.job_run_id)

    def _cancel_spark_jobs(self, run_id: str) -> None:
        session = self.spark.started  # no session yet: no run has a Spark job to cancel
        if session is None:
            return
        try:
            cancel_spark_jobs(session, run_id)
        except Exception:  # e.g. the Spark Connect server is unreachable: the next tick tries again
            logger.exception("could not cancel the Spark jobs of job run %s", run_id)

    def _emit(self, payload: Message, run_id: str) -> None:
        self._append([envelope(payload, source=from_job_run(run_id), timestamp_ms=self._clock())])

    def _beat(self) -> None:
        while not self._stopping.wait(self._heartbeat_interval_s):
            self._send_heartbeats()
            with self._lock:
                stopping = sorted(self._started & self._canceled)
            # Cancel again: a canceled job function may have started Spark jobs after the last cancel.
            for run_id in stopping:
                self._cancel_spark_jobs(run_id)

    def _send_heartbeats(self) -> None:
        with self._emit_lock:  # a run canceled meanwhile gets no heartbeat
            with self._lock:
                running = sorted(self._started - self._canceled)
            if not running:
                return
            now = self._clock()
            beats = [
                envelope(pb.JobRunHeartbeat(job_run_id=run_id), source=from_job_run(run_id), timestamp_ms=now)
                for run_id in running
            ]
            try:
                self._append(beats)
            except Exception:
                logger.exception("heartbeats could not be recorded")


def _outcome(
    plan: RunPlan, context: JobContext, failed: Mapping[str, pb.OutputFailure], checks: Sequence[pb.InstanceChecks]
) -> pb.JobRunSuccess | pb.JobRunFailure:
    """A success for the outputs that did not fail (listing those that did), or a failure if none is left."""
    if len(failed) < len(plan.targets):
        return _success(plan, context, checks, failed)
    if len(failed) == 1:  # a run of one output: its failure is the run's, as before outcomes were per output
        (only,) = failed.values()
        return pb.JobRunFailure(
            job_run_id=plan.job_run_id, error_class=only.error_class, message=only.message, checks=checks
        )
    permanent = all(failure.error_class == pb.ERROR_CLASS_PERMANENT for failure in failed.values())
    return pb.JobRunFailure(
        job_run_id=plan.job_run_id,
        error_class=pb.ERROR_CLASS_PERMANENT if permanent else pb.ERROR_CLASS_RETRYABLE,
        message=f"each of its {len(failed)} outputs failed on its own",
        checks=checks,
        failed_outputs=list(failed.values()),
    )


def _success(
    plan: RunPlan,
    context: JobContext,
    checks: Sequence[pb.InstanceChecks] = (),
    failed: Mapping[str, pb.OutputFailure] | None = None,
) -> pb.JobRunSuccess:
    # Inputs discovered while running are not tied to one output: every output read them.
    extra = tuple(context.extra_reads.values())
    outputs = []
    for target in plan.targets:
        if failed and target.instance_uuid in failed:
            continue
        record = context.records.get(target.ref) or OutputRecord()
        if not record.row_count and (observed := _observed(context, target.ref)) is not None:
            record = OutputRecord(observed.rows, record.byte_count, record.metadata)  # counted by its write
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
    return pb.JobRunSuccess(
        job_run_id=plan.job_run_id, outputs=outputs, checks=checks, failed_outputs=list((failed or {}).values())
    )


def _observed(context: JobContext, ref: str) -> Observed | None:
    """What the write of output `ref` observed (None: not written with `ctx.write`, or not observed)."""
    watch = context.watches.get(ref)
    return watch.observed() if watch is not None else None


def _output_failure(uuid: str, message: str, retryable: bool) -> pb.OutputFailure:
    error_class = pb.ERROR_CLASS_RETRYABLE if retryable else pb.ERROR_CLASS_PERMANENT
    return pb.OutputFailure(instance_uuid=uuid, error_class=error_class, message=_cut(message))


def _failure(run_id: str, message: str, *, permanent: bool) -> pb.JobRunFailure:
    error_class = pb.ERROR_CLASS_PERMANENT if permanent else pb.ERROR_CLASS_RETRYABLE
    return pb.JobRunFailure(job_run_id=run_id, error_class=error_class, message=_cut(message))


def _cut(message: str) -> str:
    return message if len(message) <= MAX_MESSAGE else message[: MAX_MESSAGE - 3] + "..."
