"""Job runs: list, one run with what it built and read, its log lines, cancel."""

from __future__ import annotations

import time
from itertools import islice

from partbuild.api.errors import Conflict, InvalidInput, NotFound
from partbuild.api.models.common import MAX_SAFE_INT, CancelRequest, PageOut, WrittenOut
from partbuild.api.models.runs import (
    InstanceChecksOut,
    JobRunDetailOut,
    JobRunOut,
    JobRunStateName,
    RunLogLineOut,
    RunLogsOut,
)
from partbuild.api.service.as_of import as_of_suffix, by, page_at
from partbuild.api.service.base import ServiceBase, cancel_reason, check_limit, state_name
from partbuild.api.service.partitions import checks_out
from partbuild.api.surface import ANONYMOUS
from partbuild.api.surface.runs import MAX_FOLLOW_S, MAX_LOG_PAGE
from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.fold.build_state import BuildState
from partbuild.state.fold.records import ACTIVE_RUN_STATES, Instance, JobRun, JobRunState
from partbuild.state.fold.view import StateView
from partbuild.state.store.records import INSTANCE, RUN
from partbuild.state.store.stored import prefetched, read_ahead

LOG_POLL_S = 0.2  # how often a follow looks for new lines


class RunsService(ServiceBase):
    """Reads of job runs; cancels."""

    def job_runs(
        self,
        state_filter: JobRunStateName | None = None,
        job: str | None = None,
        cursor: str | None = None,
        limit: int = 100,
        as_of_seq: int | None = None,
        min_seq: int | None = None,
    ) -> PageOut[JobRunOut]:
        """Job runs oldest first (those buffered by `as_of_seq`, in their states then), filtered."""
        check_limit(limit)
        order = self.listing.runs
        after = self._seq_cursor(cursor, lambda seq: order.has_seq(seq) and by(seq, as_of_seq))
        with self._reading(min_seq, as_of_seq) as state:
            wanted = JobRunState[state_filter.upper()] if state_filter else None
            runs = map(state.job_runs.__getitem__, prefetched(state, RUN, order.between(after, state.head_seq)))
            matching = (
                run for run in runs if (wanted is None or run.state == wanted) and (job is None or run.job_label == job)
            )
            chosen = list(islice(matching, limit))
            read_ahead(state, INSTANCE, [uuid for run in chosen for uuid in run.instance_uuids])
            items = [job_run_out(state, run) for run in chosen]
            seq = state.head_seq
        return page_at(items, limit, lambda r: str(r.created_seq), seq)

    def job_run(self, job_run_id: str, as_of_seq: int | None = None, min_seq: int | None = None) -> JobRunDetailOut:
        """One job run: what it built and what it read, as of `as_of_seq`."""
        with self._reading(min_seq, as_of_seq) as state:
            run = state.job_runs.get(job_run_id)
            if run is None:
                raise NotFound(f"no job run {job_run_id!r}" + as_of_suffix(as_of_seq))
            return JobRunDetailOut(**job_run_out(state, run).model_dump(), as_of_seq=state.head_seq)

    def job_run_logs(self, job_run_id: str, after: int = 0, limit: int = 1000, follow: float = 0.0) -> RunLogsOut:
        """The run's lines numbered above `after` (orchestrator/run_logs.py writes them, redacted).

        With `follow`, an empty page waits up to that many seconds for a line while the run is active;
        it answers as soon as a line comes or the run ends (its last lines are written before its outcome).
        """
        if not 1 <= limit <= MAX_LOG_PAGE:
            raise InvalidInput(f"limit must be between 1 and {MAX_LOG_PAGE}, got {limit}")
        if not 0 <= after <= MAX_SAFE_INT:
            raise InvalidInput(f"after must be a line number from 0 to {MAX_SAFE_INT}, got {after}")
        if not 0 <= follow <= MAX_FOLLOW_S:
            raise InvalidInput(f"follow must be between 0 and {MAX_FOLLOW_S} seconds, got {follow}")
        deadline = time.monotonic() + follow
        self.reads.catch_up()  # a run's end is read from the log as it is now: a follow must not outlast it
        while True:
            active = self._run_active(job_run_id)  # before reading lines: an ended run's lines are all written
            lines = self.db.run_logs.lines(job_run_id, after=after, limit=limit)
            if lines or not active or time.monotonic() >= deadline:
                break
            time.sleep(min(LOG_POLL_S, max(0.0, deadline - time.monotonic())))
            self.reads.catch_up()
        return RunLogsOut(
            job_run_id=job_run_id,
            lines=[RunLogLineOut(line_no=x.line_no, time_ms=x.time_ms, level=x.level, text=x.text) for x in lines],
            next_after=lines[-1].line_no if lines else after,
            active=active,
        )

    def _run_active(self, job_run_id: str) -> bool:
        with self._reading() as state:
            run = state.job_runs.get(job_run_id)
            if run is None:
                raise NotFound(f"no job run {job_run_id!r}")
            return run.state in ACTIVE_RUN_STATES

    def cancel_job_run(
        self, job_run_id: str, request: CancelRequest | None = None, user: str = ANONYMOUS
    ) -> WrittenOut:
        """Record a JobRunCancel; the orchestrator running it stops its Spark work when it folds it.

        Its instances end Canceled and fresh ones replace them: a rebuild writes to a new location.
        """

        def build(state: BuildState) -> list[pb.Event]:
            run = state.job_runs.get(job_run_id)
            if run is None:
                raise NotFound(f"no job run {job_run_id!r}")
            if run.state not in ACTIVE_RUN_STATES:
                raise Conflict(f"job run {job_run_id!r} is already {state_name(run.state)}")
            cancel = pb.JobRunCancel(job_run_id=job_run_id, reason=cancel_reason(request), replace_instances=True)
            return [self._event(cancel, user)]

        return WrittenOut(seq=self._write(build)[0])


# ----------------------------------------------------------------- records -> models


def job_run_out(state: StateView, run: JobRun) -> JobRunOut:
    read_ahead(state, INSTANCE, run.instance_uuids)
    instances = [state.instances.get(uuid) for uuid in run.instance_uuids]
    first = instances[0] if instances else None
    attempt = first.attempts.index(run.job_run_id) + 1 if first and run.job_run_id in first.attempts else 1
    return JobRunOut(
        job_run_id=run.job_run_id,
        job_label=run.job_label,
        state=state_name(run.state),
        instance_uuids=list(run.instance_uuids),
        refs=[instance.ref for instance in instances if instance is not None],
        created_seq=run.created_seq,
        updated_seq=run.updated_seq,
        created_ms=run.created_ms,
        updated_ms=run.updated_ms,
        last_heartbeat_ms=run.last_heartbeat_ms,
        attempt=attempt,
        inputs=run_inputs(run, instances),
        error_class=run.error_class,
        error_message=run.error_message,
        retry_after_ms=run.retry_after_ms,
        missing_refs=list(run.missing_refs),
        cancel_reason=run.cancel_reason,
        checks=run_checks(state, run),
        failed_outputs=list(run.failed_outputs or ()),
        split=bool(run.split),
    )


def run_checks(state: StateView, run: JobRun) -> list[InstanceChecksOut]:
    """The checks the run's outcome recorded on its outputs: the entries at its outcome's seq.

    An outcome ends the run, so its seq is the run's `updated_seq`; later entries on the same
    instances (a retry, checks run again) belong to other writers.
    """
    if run.state not in _CHECKED_STATES:
        return []
    found = []
    for uuid in run.instance_uuids:
        entry = next((e for e in state.check_results.get(uuid, ()) if e[0] == run.updated_seq), None)
        instance = state.instances.get(uuid)
        if entry is not None and instance is not None:
            found.append(InstanceChecksOut(instance_uuid=uuid, ref=instance.ref, checks=checks_out(entry)))
    return found


_CHECKED_STATES = (JobRunState.SUCCEEDED, JobRunState.FAILED)  # the outcomes that may carry checks


def run_inputs(run: JobRun, built: list[Instance | None]) -> list[str]:
    """What a run read: its run-level inputs and every input of the instances it built, once each.

    Outputs usually list their own inputs (provenance per partition), so the run's own
    `inputs` alone would say a run that read four partitions read none. Instances that
    retention dropped contribute nothing.
    """
    read = dict.fromkeys(run.inputs)
    for instance in built:
        if instance is not None and instance.built_by == run.job_run_id:
            read.update(dict.fromkeys(instance.inputs))
    return list(read)
