"""Scheduling decisions: pure functions of BuildState and the graph that return events.

`decide`: which wanted partitions run now (batched into job runs by `batch_size`
and `batch_bytes`, within each job's concurrency), which wait for upstream data
(`InstancesWaitUpstream`), which derivative wants to make for it, and which wants
to cancel; `stale_runs`: runs whose heartbeats stopped; `ended_runs`: runs in
flight here that the log ended; `plan_run`: what an executor needs for a run.
With an `Ownership` (`buckets.py`) only the refs it owns are decided about.

No clock (the caller passes `now_ms`), no I/O, no randomness: job run and
derivative want ids are derived from the state's head seq, so two orchestrators
deciding on the same state produce the same ids and the fold rejects the
second copy instead of running the work twice.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from google.protobuf.message import Message

from partbuild.orchestrator.buckets import Ownership, Scope
from partbuild.orchestrator.context import OutputTarget
from partbuild.orchestrator.graph import Graph, GraphError, Job, Partition, SourceDataset
from partbuild.orchestrator.identity import ORCHESTRATOR
from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.fold.build_state import BuildState
from partbuild.state.fold.checks import recorded_metrics
from partbuild.state.fold.group import removed_runner
from partbuild.state.fold.records import ACTIVE_RUN_STATES, Instance, InstanceState, JobRun, JobRunState, Want
from partbuild.state.log.events import envelope, from_job_run

MessageT = TypeVar("MessageT", bound=Message)
_SCHEDULABLE = (InstanceState.MISSING, InstanceState.UP_FOR_RETRY)
# Upstream refs in these states become Live (or fail) without anyone asking again. Not
# UpstreamBuilding: its own upstream chain needs an active want to keep moving.
_IN_PROGRESS = (InstanceState.LIVE, InstanceState.BUILDING)


@dataclass(frozen=True)
class SourceCheck:
    """A wanted source partition to look for (the I/O is the caller's)."""

    ref: str
    source: SourceDataset
    partition: Partition


@dataclass
class Decision:
    """What to append now, what to dispatch once the fold accepts it, what to look for."""

    events: list[pb.Event] = field(default_factory=list)
    new_runs: list[str] = field(default_factory=list)
    source_checks: list[SourceCheck] = field(default_factory=list)
    next_retry_ms: int | None = None  # earliest time a backed-off retry becomes due


@dataclass(frozen=True)
class RunPlan:
    """Everything an executor needs to run one buffered job run, resolved from the state."""

    job: Job
    job_run_id: str
    targets: list[OutputTarget]
    input_locations: dict[str, str]  # declared input ref -> location of its canonical Live instance
    input_uuids: dict[str, tuple[str, ...]]  # output instance UUID -> input instance UUIDs it reads
    prior_failures: int  # failed attempts of these instances before this run
    # output instance UUID -> location of the ref's latest earlier instance that went Live (checks compare with it)
    previous_locations: dict[str, str] = field(default_factory=dict)
    # declared input ref -> what its Live instance's checks recorded (check name -> metric -> value)
    input_metrics: dict[str, dict[str, dict[str, float]]] = field(default_factory=dict)


def decide(state: BuildState, graph: Graph, now_ms: int, ownership: Ownership | None = None) -> Decision:
    """Buffer job runs for schedulable wants, wait and want upstream data for the rest.

    With an `ownership` (a static bucket or a worker group's ownership), only the refs
    it owns at `state` are decided about (derivative wants for upstream refs of
    other buckets are still made: their owners build them), and every decision
    is stamped with its scope (bucket or fence).
    """
    return _Decider(state, graph, now_ms, ownership.at(state) if ownership is not None else None).decide()


class _Decider:
    """One decision round: collects what to append, then emits it in a fixed order."""

    def __init__(self, state: BuildState, graph: Graph, now_ms: int, scope: Scope | None = None) -> None:
        self.state = state
        self.graph = graph
        self.now_ms = now_ms
        self.scope = scope
        self.decision = Decision()
        # job label -> (instance, failed attempts) ready to run, in want order
        self.ready: dict[str, list[tuple[Instance, int]]] = defaultdict(list)
        self.waits: list[pb.InstanceWait] = []
        self.wanted_upstream: dict[str, list[str]] = {}  # parent want id -> refs it needs wanted
        self.cause: dict[str, str] = {}  # parent want id -> job run whose dep miss asked for them
        self.needed: set[str] = set()
        self.cancels: dict[str, str] = {}
        self.owed: set[str] = set()  # ready instances a split batch owes a retry, wanted or not

    def decide(self) -> Decision:
        for ref in self.state.active_refs():
            if self._mine(ref):
                self._consider(ref)
        self._consider_owed()
        self._want_waited_for_refs()
        self._emit()
        return self.decision

    def _consider_owed(self) -> None:
        """The retries split batches owe outputs no active want names any more (a batch-mate's failure ended the
        want): each runs alone once its retry is due and its inputs are Live; none makes derivative wants."""
        state = self.state
        for instance in owed_instances(state):
            ref = instance.ref
            if ref in state.active_wants_by_ref or not self._mine(ref):
                continue  # wanted: considered with the wants
            try:
                resolution = self.graph.resolve(ref)
            except GraphError:
                continue
            producer = resolution.producer
            if not isinstance(producer, Job) or retry_due_ms(state, instance, producer) > self.now_ms:
                continue
            if all(_is_live(state, upstream) for upstream in producer.inputs(resolution.partition)):
                self.owed.add(instance.uuid)
                self.ready[producer.label].append((instance, failed_attempts(state, instance)))

    def _consider(self, ref: str) -> None:
        state = self.state
        instance = state.canonical_instance(ref)
        if instance is None or instance.state not in _SCHEDULABLE:
            return
        try:
            resolution = self.graph.resolve(ref)
        except GraphError as exc:
            self._cancel_wants_of(ref, str(exc))
            return
        producer = resolution.producer
        if isinstance(producer, SourceDataset):
            self.decision.source_checks.append(SourceCheck(ref, producer, resolution.partition))
            return
        if instance.state == InstanceState.UP_FOR_RETRY:
            due = retry_due_ms(state, instance, producer)
            if due > self.now_ms:
                soonest = self.decision.next_retry_ms
                self.decision.next_retry_ms = due if soonest is None else min(soonest, due)
                return
        missing = [upstream for upstream in producer.inputs(resolution.partition) if not _is_live(state, upstream)]
        if not missing:
            self.ready[producer.label].append((instance, failed_attempts(state, instance)))
            return
        parent = next(iter(state.active_wants_for_ref(ref)))
        for upstream in missing:
            problem = self._need(upstream, parent, None)
            if problem is not None:
                self._cancel_wants_of(ref, f"input {upstream!r} cannot be built: {problem}")
                return
        self.waits.append(pb.InstanceWait(instance_uuid=instance.uuid, upstream_refs=missing))

    def _mine(self, ref: str) -> bool:
        """Whether this round decides about `ref`: the one place a worker with a scope filters."""
        return self.scope is None or self.scope.owns(ref)

    def _want_waited_for_refs(self) -> None:
        """Refs that instances wait for (run-time dep misses, earlier waits) and that nobody wants now."""
        state = self.state
        for upstream in state.waiting_refs():
            for uuid in state.waiting_for(upstream):
                waiter = state.instances[uuid]
                parent = next(iter(state.active_wants_for_ref(waiter.ref)), None)
                if parent is None or not self._mine(waiter.ref):
                    continue
                problem = self._need(upstream, parent, waiter.attempts[-1] if waiter.attempts else None)
                if problem is not None:
                    reason = f"input {upstream!r} cannot be built: {problem}"
                    for other in state.waiting_for(upstream):
                        self._cancel_wants_of(state.instances[other].ref, reason)
                break

    def _need(self, upstream: str, parent: Want, run_id: str | None) -> str | None:
        """Make sure something will bring `upstream` to Live; says why it cannot, if it cannot."""
        try:
            self.graph.resolve(upstream)
        except GraphError as exc:
            return str(exc)
        if upstream in self.needed or _has_active_want(self.state, upstream):
            return None
        current = self.state.canonical_instance(upstream)
        if current is not None and current.state in _IN_PROGRESS:
            return None
        self.needed.add(upstream)
        self.wanted_upstream.setdefault(parent.want_id, []).append(upstream)
        if run_id is not None:
            self.cause.setdefault(parent.want_id, run_id)
        return None

    def _cancel_wants_of(self, ref: str, reason: str) -> None:
        for want in self.state.active_wants_for_ref(ref):
            self.cancels.setdefault(want.want_id, reason)

    def _emit(self) -> None:
        state, now_ms = self.state, self.now_ms
        emit = self.decision.events.append
        for want_id, reason in self.cancels.items():
            emit(_event(pb.WantCancel(want_id=want_id, reason=reason), now_ms))
        if self.waits:
            emit(_event(self._stamped(pb.InstancesWaitUpstream(waits=self.waits)), now_ms))
        for index, (parent_id, refs) in enumerate(self.wanted_upstream.items()):
            if parent_id in self.cancels:
                continue
            parent = state.wants[parent_id]
            derivative = pb.WantCreate(
                want_id=f"derived-{state.head_seq}-{index}",
                partition_refs=refs,
                data_timestamp_ms=parent.data_timestamp_ms,
                ttl_seconds=parent.ttl_seconds,
                sla_seconds=parent.sla_seconds,
                comment=f"upstream of want {parent_id}",
                parent_want_id=parent_id,
            )
            self._stamped(derivative)
            source = from_job_run(self.cause[parent_id]) if parent_id in self.cause else ORCHESTRATOR
            emit(envelope(derivative, source=source, timestamp_ms=now_ms))
        self._buffer_runs()

    def _stamped(self, payload: MessageT) -> MessageT:
        """`payload` marked with this worker's scope (bucket or fence), if it has one."""
        if self.scope is not None:
            self.scope.stamp(payload)
        return payload

    def _run_id(self, label: str) -> str:
        """Derived from the head decided on (and the scope): deciding twice gives the same ids."""
        number = len(self.decision.new_runs)
        if self.scope is None:
            return f"{label}-{self.state.head_seq}-{number}"
        return f"{label}-{self.state.head_seq}-{self.scope.run_tag}-{number}"

    def _buffer_runs(self) -> None:
        """Group ready instances into runs of up to batch_size (and batch_bytes), within each job's concurrency.

        Only instances with the same number of failed attempts share a run: a run that
        fails as a whole is split, but mixing them would still delay a fresh partition.
        An instance whose batch failed as a whole and was split runs alone.
        Under a scope, only instances of one batch key (a group's bucket) share a
        run, so a stale run can be failed by the one owner of its bucket.
        Instances whose every want is being canceled in this round are left out.
        """
        active = active_runs_by_job(self.state)
        for label, ready in self.ready.items():
            job = self.graph.jobs[label]
            room = job.max_concurrency - active.get(label, 0)
            by_failures: dict[tuple[int, int | str], list[Instance]] = defaultdict(list)
            for instance, failures in ready:
                wants = self.state.active_wants_for_ref(instance.ref)
                if instance.uuid in self.owed or any(want.want_id not in self.cancels for want in wants):
                    key: int | str = self.scope.batch_key(instance.ref) if self.scope is not None else 0
                    if runs_alone(self.state, instance):  # a cohort of its own: where its own error stands alone
                        key = instance.uuid
                    by_failures[failures, key].append(instance)
            for batch in self._batches(job, by_failures.values(), room):
                buffer = pb.JobRunBuffer(job_run_id=self._run_id(label), job_label=label)
                buffer.code_version = job.code_version or ""  # what the instances were built by
                # The fold lets an output go Live only with a passing result of each (a stale worker cannot skip them).
                buffer.blocking_checks.extend(check.name for check in job.checks if check.blocking)
                buffer.serve_stale = job.stale_policy == "serve"
                buffer.instance_uuids.extend(instance.uuid for instance in batch)
                self._stamped(buffer)  # the fold checks every partition is in the bucket(s) it may build
                run_id = buffer.job_run_id
                self.decision.events.append(_event(buffer, self.now_ms))
                self.decision.new_runs.append(run_id)

    def _batches(self, job: Job, cohorts: Iterable[list[Instance]], room: int) -> list[list[Instance]]:
        """The first `room` runs: each cohort (instances that may share a run) split in order by
        batch_size and, if set, batch_bytes."""
        batches: list[list[Instance]] = []
        for cohort in cohorts:
            if len(batches) >= room:
                break
            if job.batch_bytes is None:
                spans: Iterable[range] = (
                    range(start, start + job.batch_size) for start in range(0, len(cohort), job.batch_size)
                )
            else:  # only as many instances as the runs there is room for can hold
                cohort = cohort[: (room - len(batches)) * job.batch_size]
                sizes = [input_bytes(self.state, self.graph, instance.ref) for instance in cohort]
                spans = pack_by_bytes(sizes, job.batch_size, job.batch_bytes)
            batches.extend(cohort[span.start : span.stop] for span in spans)
        return batches[: max(room, 0)]


def pack_by_bytes(sizes: Sequence[int], max_count: int, max_bytes: int | None = None) -> list[range]:
    """Split the indices of `sizes` into contiguous runs, in order, packed greedily.

    A run holds at most `max_count` items and, if `max_bytes` is set, sizes summing
    to at most `max_bytes`; an item larger than `max_bytes` runs alone.
    """
    runs: list[range] = []
    start = total = 0
    for index, size in enumerate(sizes):
        full = index - start == max_count or (max_bytes is not None and total + size > max_bytes)
        if index > start and full:
            runs.append(range(start, index))
            start, total = index, 0
        total += size
    if start < len(sizes):
        runs.append(range(start, len(sizes)))
    return runs


def input_bytes(state: BuildState, graph: Graph, ref: str) -> int:
    """The bytes a build of `ref` reads: byte_count of its inputs' Live canonical instances (others count 0)."""
    total = 0
    for upstream in graph.inputs_of(ref):
        instance = state.canonical_instance(upstream)
        if instance is not None and instance.state == InstanceState.LIVE:
            total += instance.byte_count
    return total


def active_runs_by_job(state: BuildState) -> dict[str, int]:
    """How many queued or running job runs each job has."""
    counts: dict[str, int] = defaultdict(int)
    for run_id in state.active_run_ids:
        counts[state.job_runs[run_id].job_label] += 1
    return counts


def failed_attempts(state: BuildState, instance: Instance) -> int:
    """The attempts that failed this instance: its runs that failed, but for batches split because they failed
    as a whole (a batch-mate's error spends none of its retries), and its own failures in runs that succeeded."""
    count = 0
    runs = state.job_runs
    for run_id in instance.attempts:
        run = runs[run_id]
        if run.state == JobRunState.FAILED:
            count += not run.split
        elif run.failed_outputs and instance.uuid in run.failed_outputs:
            count += 1
    return count


def owed_instances(state: BuildState) -> Iterator[Instance]:
    """The outputs split batches still owe a retry: canonical and up for retry (the fold drops an entry when its
    retry is buffered or its instance replaced; one that failed otherwise since is passed over here)."""
    instances = state.instances
    for uuid in state.owed_retries:
        instance = instances.get(uuid)
        if instance is not None and not instance.superseded_seq and instance.state == InstanceState.UP_FOR_RETRY:
            yield instance


def owes_retries(state: BuildState) -> bool:
    """Whether a split batch still owes one of its outputs a retry (`_Decider._consider_owed` runs it)."""
    return any(owed_instances(state))


def runs_alone(state: BuildState, instance: Instance) -> bool:
    """Whether its next run builds it alone: its last attempt was a batch that failed as a whole and was split."""
    return bool(instance.attempts) and bool(state.job_runs[instance.attempts[-1]].split)


def retry_due_ms(state: BuildState, instance: Instance, job: Job) -> int:
    """When an instance that failed with a retryable error may be tried again."""
    last: JobRun = state.job_runs[instance.attempts[-1]]
    delay = max(job.retry.delay_ms(failed_attempts(state, instance)), last.retry_after_ms)
    return last.updated_ms + delay


def stale_runs(
    state: BuildState,
    graph: Graph,
    now_ms: int,
    timeout_ms: int,
    alive: Iterable[str],
    ownership: Ownership | None = None,
) -> list[pb.Event]:
    """Fail active runs whose heartbeats stopped (their orchestrator died); they are retried.

    A worker with buckets fails only runs of its own bucket(s): another bucket's owner may just
    be slow. A group member's failure carries its fence (the fold accepts it from the owner). A run
    of a member the group removed is failed at once: the fold refuses its heartbeats and outcomes.
    """
    alive = set(alive)
    scope = ownership.at(state) if ownership is not None else None
    events = []
    for run_id in state.active_run_ids:
        if run_id in alive:
            continue
        run = state.job_runs[run_id]
        if scope is not None and not scope.owns_run(state, run):
            continue
        removed = removed_runner(state, run_id)
        last_sign = max(run.last_heartbeat_ms, run.created_ms)
        if removed is not None:
            group, task = removed
            why = f"its worker {task} is no longer a member of group {group.name}"
        elif now_ms - last_sign > timeout_ms:
            why = f"no heartbeat for {(now_ms - last_sign) / 1000:.1f} s"
        else:
            continue
        job = graph.jobs.get(run.job_label)
        prior = max(failed_attempts(state, state.instances[uuid]) for uuid in run.instance_uuids)
        exhausted = job is None or prior + 1 >= job.retry.max_attempts
        failure = pb.JobRunFailure(
            job_run_id=run_id,
            error_class=pb.ERROR_CLASS_PERMANENT if exhausted else pb.ERROR_CLASS_RETRYABLE,
            message=f"{why}: the process running it is gone",
        )
        if scope is not None:
            scope.stamp(failure)
        events.append(_event(failure, now_ms))
    return events


def ended_runs(state: BuildState, run_ids: Iterable[str]) -> dict[str, JobRunState]:
    """Those of `run_ids` (runs in flight in this process) that the log has ended, with how: O(len(run_ids)).

    While a run is in flight here, only someone else can end it: an operator's cancel, or another
    worker failing it as stale (this process was paused past the heartbeat timeout).
    """
    ended = {}
    for run_id in run_ids:
        run = state.job_runs.get(run_id)
        if run is not None and run.state not in ACTIVE_RUN_STATES:
            ended[run_id] = run.state
    return ended


def plan_run(state: BuildState, graph: Graph, run_id: str, warehouse: str) -> RunPlan:
    """Resolve a buffered run's outputs, instance locations and inputs for execution."""
    run = state.job_runs[run_id]
    job = graph.jobs[run.job_label]
    targets: list[OutputTarget] = []
    input_locations: dict[str, str] = {}
    input_uuids: dict[str, tuple[str, ...]] = {}
    previous_locations: dict[str, str] = {}
    input_metrics: dict[str, dict[str, dict[str, float]]] = {}
    prior = 0
    for uuid in run.instance_uuids:
        instance = state.instances[uuid]
        partition = graph.resolve(instance.ref).partition
        targets.append(OutputTarget(partition, uuid, instance_location(warehouse, instance.ref, uuid)))
        if (previous := previous_live_location(state, instance)) is not None:
            previous_locations[uuid] = previous
        read: list[str] = []
        for upstream in job.inputs(partition):
            current = state.canonical_instance(upstream)
            if current is not None and current.state == InstanceState.LIVE and current.location:
                input_locations[upstream] = current.location
                read.append(current.uuid)
                if entries := state.check_results.get(current.uuid):
                    input_metrics[upstream] = recorded_metrics(entries)
        input_uuids[uuid] = tuple(read)
        prior = max(prior, failed_attempts(state, instance))
    return RunPlan(job, run_id, targets, input_locations, input_uuids, prior, previous_locations, input_metrics)


def previous_live_location(state: BuildState, instance: Instance) -> str | None:
    """Where the ref's latest earlier instance that went Live (Live still, or tainted since) keeps its data.

    Failed, canceled and never-built instances are passed over: they hold no data to compare with.
    """
    uuid = instance.previous_uuid
    while uuid is not None and (earlier := state.instances.get(uuid)) is not None:
        if earlier.state in (InstanceState.LIVE, InstanceState.TAINTED) and earlier.location:
            return earlier.location
        uuid = earlier.previous_uuid
    return None


def instance_location(warehouse: str, ref: str, uuid: str) -> str:
    """Where an instance's data goes: unique per instance, so a rebuild never overwrites older data."""
    return f"{warehouse.rstrip('/')}/{ref}/_instance={uuid}"


def _has_active_want(state: BuildState, ref: str) -> bool:
    return next(iter(state.active_wants_for_ref(ref)), None) is not None


def _is_live(state: BuildState, ref: str) -> bool:
    instance = state.canonical_instance(ref)
    return instance is not None and instance.state == InstanceState.LIVE


def _event(payload: Message, now_ms: int) -> pb.Event:
    return envelope(payload, source=ORCHESTRATOR, timestamp_ms=now_ms)
