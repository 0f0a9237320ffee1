"""Answering requests to run a job's checks again on a Live instance (issue 24: checks on what is already Live).

`POST /instances/{uuid}/checks` (or `partbuild checks run`) appends a `ChecksRequest`; the
fold keeps it pending (state/fold/rechecks.py). Each step of the run loop hands the pending
requests this worker owns (the ref's bucket, as for every decision) to one background thread,
which runs the job's *current* checks (this process's graph) on the instance, with the
locations of the inputs it was built from, and appends the answer: a `ChecksRerun` with the
results, or skipped with why (the job declares no checks, no job of the graph builds the ref,
retention dropped the instance). A failed blocking check on the ref's canonical Live instance
(or on a stale one still serving) adds a `PartitionTaint` naming that instance, in the same append,
with the check as the reason: the fold taints it and what was built from it. An errored check taints nothing (the
check is at fault, not the data); it is recorded as errored, like a warning.

One thread, not the executor's pool: reruns are rare and must not take a job run's thread;
the loop never waits for them. The answer is appended guarded by the head it was built on, so
it is written only while the request is still pending; a second orchestrator (or a restarted
one) that answers too is rejected by the fold anyway, and its taint with it (the instance
is no longer canonical). A crash while the checks run leaves the request pending: the next
orchestrator runs them again.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from partbuild.orchestrator.checks import Check, CheckTarget, run_gate
from partbuild.orchestrator.decide import previous_live_location
from partbuild.orchestrator.graph import Graph, GraphError, Job
from partbuild.orchestrator.identity import ORCHESTRATOR
from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.fold.build_state import BuildState
from partbuild.state.fold.checks import recorded_metrics
from partbuild.state.log.events import Clock, envelope
from partbuild.state.log.live import LiveState
from partbuild.state.log.store import AppendConflict, EventLog, WriteNotDone

logger = logging.getLogger("partbuild.orchestrator.rechecks")

MAX_APPEND_ATTEMPTS = 20

Owns = Callable[[BuildState, str], bool]  # (state, ref) -> whether this worker decides about the ref


@dataclass(frozen=True)
class Rerun:
    """What answering one request takes: the checks and their target, or why none run."""

    request_id: str
    target: CheckTarget | None
    checks: tuple[Check, ...] = ()
    job_label: str = ""
    skipped: str = ""


class ChecksRerunner:
    """Runs the checks the log asks for again, one request at a time in its own thread, and records the answers."""

    def __init__(
        self,
        log: EventLog,
        live: LiveState,
        graph: Graph,
        *,
        open_spark: Callable[[], Any],
        owns: Owns,
        clock: Clock,
        on_append: Callable[[], None],
    ) -> None:
        self.log = log
        self.live = live
        self.graph = graph
        self._open_spark = open_spark
        self._owns = owns
        self._clock = clock
        self._on_append = on_append
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="partbuild-checks")
        self._in_flight: set[str] = set()
        self._lock = threading.Lock()

    def step(self) -> bool:
        """Hand the pending requests this worker owns, and does not run yet, to the thread; whether there were any."""
        with self.live.read() as state:
            due = [request_id for request_id in self._owned_pending(state) if request_id not in self._in_flight]
        with self._lock:
            self._in_flight.update(due)
        for request_id in due:
            self._pool.submit(self._answer, request_id)
        return bool(due)

    def busy(self) -> bool:
        """Whether a request this worker owns is pending or being answered (the loop is not idle)."""
        with self._lock:
            if self._in_flight:
                return True
        with self.live.read() as state:
            return any(True for _ in self._owned_pending(state))

    def close(self) -> None:
        """Stop taking requests; let the one being answered finish (its answer is recorded)."""
        self._pool.shutdown(wait=True, cancel_futures=True)

    def _owned_pending(self, state: BuildState) -> list[str]:
        requests = state.check_requests
        instances = state.instances
        owned = []
        for request_id in state.pending_check_requests:
            instance = instances.get(requests[request_id][0])
            # A dropped instance has no ref left to own: any worker may answer (skipped), the fold keeps one answer.
            if instance is None or self._owns(state, instance.ref):
                owned.append(request_id)
        return owned

    def _answer(self, request_id: str) -> None:
        try:
            with self.live.read() as state:
                rerun = self._plan(state, request_id)
            if rerun is None:
                return
            answer = self._run(rerun)
            self._record(rerun, answer)
        except Exception:  # the request stays pending: the next step hands it over again
            logger.exception("answering checks request %s failed", request_id)
        finally:
            with self._lock:
                self._in_flight.discard(request_id)
            self._on_append()

    def _plan(self, state: BuildState, request_id: str) -> Rerun | None:
        """The checks to run and on what, from the state and this process's graph (None: already answered)."""
        request = state.check_requests.get(request_id)
        if request is None or request[2]:
            return None
        uuid = request[0]
        instance = state.instances.get(uuid)
        if instance is None:
            return Rerun(request_id, None, skipped=f"instance {uuid} was dropped by retention")
        try:
            resolution = self.graph.resolve(instance.ref)
        except GraphError as exc:
            return Rerun(request_id, None, skipped=f"no job of this graph builds {instance.ref}: {exc}")
        job = resolution.producer
        if not isinstance(job, Job):
            return Rerun(request_id, None, skipped=f"{instance.ref} is source data: no job's checks apply to it")
        if not job.checks:
            return Rerun(request_id, None, skipped=f"job {job.label} declares no checks")
        declared = set(job.inputs(resolution.partition))
        inputs = {}
        metrics = {}
        for input_uuid in instance.inputs:  # the inputs it was built from, as the gate saw them
            read = state.instances.get(input_uuid)
            if read is not None and read.ref in declared and read.location:
                inputs[read.ref] = read.location
                if entries := state.check_results.get(input_uuid):
                    metrics[read.ref] = recorded_metrics(entries)
        # The ref's instance that went Live before this one, as the gate gave it when this one was built: a
        # ratio to the previous build can fail on a re-check too.
        previous = previous_live_location(state, instance)
        target = CheckTarget(instance.ref, uuid, instance.location or "", inputs, previous, metrics)
        return Rerun(request_id, target, tuple(job.checks), job.label)

    def _run(self, rerun: Rerun) -> pb.ChecksRerun:
        if rerun.target is None:
            return pb.ChecksRerun(request_id=rerun.request_id, skipped=rerun.skipped)
        verdict = run_gate(rerun.checks, [rerun.target], rerun.job_label, self._open_spark)
        return pb.ChecksRerun(request_id=rerun.request_id, checks=verdict.results[0])

    def _record(self, rerun: Rerun, answer: pb.ChecksRerun) -> None:
        """Append the answer (and the taint) only while the request is pending, guarded by the head checked."""
        failed = next(
            (r for r in answer.checks.results if r.blocking and not r.passed and not r.errored),
            None,
        )
        for _ in range(MAX_APPEND_ATTEMPTS):
            self.live.catch_up()
            with self.live.read() as state:
                request = state.check_requests.get(rerun.request_id)
                if request is None or request[2]:
                    return  # answered by another worker meanwhile
                events = [envelope(answer, source=ORCHESTRATOR, timestamp_ms=self._clock())]
                if failed is not None and rerun.target is not None:
                    taint = _taint(state, rerun, failed)
                    if taint is not None:
                        events.append(envelope(taint, source=ORCHESTRATOR, timestamp_ms=self._clock()))
                head = state.head_seq
            try:
                self.log.append(events, expected_head=head)
            except (AppendConflict, WriteNotDone):
                continue  # somebody appended meanwhile: check again on the newer state
            # Folded before the request leaves `_in_flight`: a step in between must see it answered, or it
            # hands the request over again and its checks run twice.
            self.live.catch_up()
            if len(events) > 1:
                logger.warning("%s", events[1].partition_taint.reason)
            return
        logger.warning(
            "checks request %s: other writers kept appending; answering it on a later step", rerun.request_id
        )


def _taint(state: BuildState, rerun: Rerun, failed: pb.CheckResult) -> pb.PartitionTaint | None:
    """The taint of a failed blocking check, if the instance is still the one readers get for its ref (its
    canonical Live one, or a stale one still serving): a failed check withdraws it."""
    target = rerun.target
    assert target is not None
    served = state.served_instance(target.ref)
    if served is None or served.uuid != target.instance_uuid:
        return None
    said = failed.description or "no description"
    reason = f"check {failed.name} failed on {target.ref}: {said} (checks run again, request {rerun.request_id})"
    return pb.PartitionTaint(partition_ref=target.ref, reason=reason, instance_uuid=target.instance_uuid)
