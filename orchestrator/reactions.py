"""Reactions declared on jobs, and the pure evaluation of what they want (the loop appends the firings).

    Job("daily", ..., reactions=[on_upstream_change(debounce=timedelta(seconds=30))])
    Job("hourly", ..., reactions=[on_source_arrival()])

`on_upstream_change`: an input of a partition of the job got a new Live instance in place of the one the
partition was built from (a new source version observed, an upstream rebuilt after a taint). The fold
already marks what was built from the old data stale or withdraws it (state/fold/instances.py); the reaction
wants those partitions again, so downstream data follows its inputs without anyone asking. It looks one level
down only: the direct consumers of the superseded instance whose job declares the reaction and that are
not Live now. In a chain daily -> weekly where both declare it, the daily reacts to the raw day, and the
weekly reacts once the daily's new instance is Live (not at once): the weekly is never built from a daily
about to change, and a weekly reading seven dailies that change within its debounce window is wanted once.
A partition that stayed Live (data moved with its strong version, or observed without versions) is not
rebuilt: the reaction follows the fold's taints and makes none of its own. A partition of the job that reads
the changed ref and failed (its own error or check, or upstream) is wanted again too: fixed input data, or a
failed upstream now Live, is what it waited for, and no person has to ask.

`on_source_arrival`: a source partition observed for the first time (no earlier instance of it was ever
Live) wants the job's partitions that read it. By default the graph inverts the job's pattern: each output
pattern whose fields the source's pattern also has is filled from the source ref, and kept if the job's
`inputs` of it name the source ref. Give `affected(source_ref) -> refs` when that cannot work (a weekly
reading seven days).

Evaluation is incremental: `Reactor.read` takes the log's events since the last step (never a scan of the
partitions); `changes_in` turns them into instance changes; `Reactor.due` debounces them per (job, wanted
ref) within each reaction's window and fires at most `max_per_step` wants a step, oldest due first, the
rest kept for the next step, never dropped. A firing stays pending until its want is in the state (an
append that conflicted is simply fired again). Each firing is one `ReactionFired` with one want whose id is
derived from the cause (state/fold/reactions.py), so two orchestrators never fire the same reaction twice.
Only the owner of the wanted ref's bucket fires it.

`on_code_change`: the job's Live partitions built by another code version than its current one (stale,
state/rules/staleness.py) are tainted and wanted again, newest partitions first (oldest last), at most
`max_per_step` a step: the taint (guarded by the instance it names, and cascading to what was built from
it, as any taint does; out of date rather than wrong, so each instance whose job serves stale data stays
readable until its rebuild goes Live) and the `ReactionFired` go in one append, so the want rebuilds the partition
instead of finding it Live. Nothing upstream is touched. It is evaluated on steps after the log moved (the
index of runs by version reads only the job's runs of other versions), not on idle ones.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.fold.reactions import KIND_NAMES, reaction_want_id
from partbuild.state.fold.records import InstanceState
from partbuild.state.log.events import envelope
from partbuild.state.rules.staleness import StaleIndex, built_version

if TYPE_CHECKING:
    from partbuild.orchestrator.graph import Graph, Job
    from partbuild.state.fold.build_state import BuildState
    from partbuild.state.fold.records import Instance
    from partbuild.state.log.store import EventLog

logger = logging.getLogger("partbuild")

MAX_PER_STEP = 200  # firings a step; the rest wait for the next one
MAX_WALK = 32  # earlier instances of a ref looked at to find what its readers were built from
MAX_TRIES = 3  # a firing the fold keeps rejecting is given up after this many appends (logged)
_WATCHED = frozenset({"partition_observed", "job_run_success"})
_ONCE_LIVE = frozenset({InstanceState.LIVE, InstanceState.TAINTED})
_FAILED_STATES = frozenset({InstanceState.FAILED, InstanceState.UPSTREAM_FAILED})


class ReactionError(ValueError):
    """A reaction that cannot be declared (its message says why)."""


Affected = Callable[[str], Iterable[str]]


@dataclass(frozen=True)
class Reaction:
    """What makes a job want its partitions again: `kind` (pb.ReactionKind), quiet for `debounce` first."""

    kind: int
    debounce: dt.timedelta = dt.timedelta(0)
    affected: Affected | None = None  # on_source_arrival: source ref -> the job's refs that read it
    ttl: dt.timedelta | None = None
    comment: str = ""

    def __post_init__(self) -> None:
        if self.kind not in KIND_NAMES:
            raise ReactionError(f"reaction kind {self.kind!r} is not one of {sorted(KIND_NAMES)}")
        if not isinstance(self.debounce, dt.timedelta) or self.debounce < dt.timedelta(0):
            raise ReactionError(f"{self.name}: debounce is a timedelta of at least zero, not {self.debounce!r}")
        if self.affected is not None and not callable(self.affected):
            raise ReactionError(f"{self.name}: affected must be a function of a source ref")

    @property
    def name(self) -> str:
        return KIND_NAMES[self.kind]

    @property
    def inverts_pattern(self) -> bool:
        """Whether the graph must invert the job's pattern to find what a source ref affects."""
        return self.kind == pb.REACTION_KIND_SOURCE_ARRIVAL and self.affected is None

    @property
    def debounce_ms(self) -> int:
        return int(self.debounce.total_seconds() * 1000)


def on_upstream_change(
    debounce: dt.timedelta = dt.timedelta(0), ttl: dt.timedelta | None = None, comment: str = ""
) -> Reaction:
    """Want the job's partitions whose inputs got a new Live instance (see the module's docstring)."""
    return Reaction(pb.REACTION_KIND_UPSTREAM_CHANGE, debounce, None, ttl, comment)


def on_source_arrival(
    debounce: dt.timedelta = dt.timedelta(0),
    affected: Affected | None = None,
    ttl: dt.timedelta | None = None,
    comment: str = "",
) -> Reaction:
    """Want the job's partitions that read a source partition observed for the first time."""
    return Reaction(pb.REACTION_KIND_SOURCE_ARRIVAL, debounce, affected, ttl, comment)


def on_code_change(ttl: dt.timedelta | None = None, comment: str = "") -> Reaction:
    """Taint and want again the job's Live partitions built by another code version (see the module's docstring)."""
    return Reaction(pb.REACTION_KIND_CODE_CHANGE, dt.timedelta(0), None, ttl, comment)


def reaction_problem(job: Job, reactions: Sequence[object]) -> str | None:
    """Why a job's reactions cannot be declared, or None."""
    if not all(isinstance(reaction, Reaction) for reaction in reactions):
        return (
            "reactions must be made by on_upstream_change(), on_source_arrival() or on_code_change() "
            "(orchestrator/reactions.py)"
        )
    kinds = [reaction.kind for reaction in reactions]  # type: ignore[attr-defined]
    if len(set(kinds)) != len(kinds):
        return "a reaction kind is declared twice"
    return None


@dataclass(frozen=True)
class Change:
    """A partition got a new Live instance: `uuid`, in place of `previous` ("" : first observed)."""

    ref: str
    uuid: str
    previous: str
    seq: int


def changes_in(state: BuildState, events: Iterable[tuple[int, pb.Event]]) -> list[Change]:
    """The instance changes the folded `events` made (rejected ones made none), the last per ref."""
    instances, canonical = state.instances, state.canonical
    found: dict[str, Change] = {}
    for seq, event in events:
        kind = event.WhichOneof("payload")
        if kind == "partition_observed":
            refs: Iterable[str] = (event.partition_observed.partition_ref,)
        else:
            run = state.job_runs.get(event.job_run_success.job_run_id)
            refs = () if run is None else [instances[u].ref for u in run.instance_uuids if u in instances]
        for ref in refs:
            uuid = canonical.get(ref)
            instance = instances.get(uuid) if uuid is not None else None
            if instance is None or instance.state != InstanceState.LIVE or instance.updated_seq < seq:
                continue  # rejected, or changed again later in the batch (that event says so)
            previous = _built_from_before(state, instance)
            found[ref] = Change(ref, instance.uuid, previous.uuid if previous is not None else "", seq)
    return [*found.values()]


def _built_from_before(state: BuildState, instance: Instance) -> Instance | None:
    """The earlier instance of the ref this one replaces for its readers: the nearest that was Live once (Live
    still, or tainted) and fed a build, else the nearest Live once; None if none was (a first arrival).

    Versions v1, v2, v3 observed before anything read v2: v3 replaces v1, what the daily was built from, so a
    debounced reaction restarts its window and names v3 (was v1).
    """
    instances = state.instances
    nearest: Instance | None = None
    uuid = instance.previous_uuid
    steps = 0
    while uuid is not None and (earlier := instances.get(uuid)) is not None and steps < MAX_WALK:
        if earlier.state in _ONCE_LIVE:
            if earlier.consumers:
                return earlier
            nearest = nearest or earlier
        uuid = earlier.previous_uuid
        steps += 1
    return nearest


@dataclass
class _Pending:
    job: str
    reaction: Reaction
    ref: str  # the job's partition it wants
    change: Change
    due_ms: int
    tries: int = 0
    _want_id: str = ""

    @property
    def want_id(self) -> str:
        """Made when first asked for (at the firing): a change replaced within its window never needs one."""
        if not self._want_id:
            self._want_id = reaction_want_id(self.job, self.reaction.kind, self.change.uuid, self.ref)
        return self._want_id


@dataclass
class Reactor:
    """This orchestrator's reactions: the changes seen, and the firings waiting for their window."""

    graph: Graph
    max_per_step: int = MAX_PER_STEP
    seen_head: int = -1  # the last seq read from the log (-1: not started; starts at the head)
    pending: dict[tuple[str, int, str], _Pending] = field(default_factory=dict)
    next_due_ms: int | None = None
    _fresh: list[tuple[int, pb.Event]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.upstream: dict[str, Reaction] = {}
        self.arrival: list[tuple[Job, Reaction]] = []
        self.code_change: list[tuple[Job, Reaction]] = []
        for job in self.graph.jobs.values():
            for reaction in job.reactions:
                if reaction.kind == pb.REACTION_KIND_UPSTREAM_CHANGE:
                    self.upstream[job.label] = reaction
                elif reaction.kind == pb.REACTION_KIND_SOURCE_ARRIVAL:
                    self.arrival.append((job, reaction))
                else:
                    self.code_change.append((job, reaction))
        self.stale = StaleIndex()
        self.code_seen_head = -1  # the head the code-change firings were last complete at

    @property
    def declared(self) -> bool:
        return bool(self.upstream or self.arrival or self.code_change)

    def read(self, log: EventLog, head: int) -> None:
        """Take the events appended after the last read, up to `head` (the state's head: all folded)."""
        if self.seen_head < 0:
            self.seen_head = head  # what happened before this orchestrator started is not reacted to
        if head <= self.seen_head:
            return
        fresh = self._fresh
        for page in log.iter_payload_pages(after_seq=self.seen_head, upto_seq=head):
            for seq, payload in page:
                event = pb.Event()
                event.ParseFromString(payload)
                if event.WhichOneof("payload") in _WATCHED:
                    fresh.append((seq, event))
        self.seen_head = head

    def due(
        self, state: BuildState, now_ms: int, owns: Callable[[str], bool], source: pb.EventSource
    ) -> list[pb.Event]:
        """The firings due at `now_ms`: the fresh changes added to the pending ones, then the due ones fired."""
        if self._fresh:
            fresh, self._fresh = self._fresh, []
            self.note(state, changes_in(state, fresh), now_ms, owns)
        events: list[pb.Event] = []
        if self.pending and (self.next_due_ms is None or now_ms >= self.next_due_ms):
            events = self.fire(state, now_ms, owns, source)
        if self.code_change and state.head_seq != self.code_seen_head:
            events += self.fire_code_changes(state, now_ms, owns, source, self.max_per_step - len(events) // 2)
        return events

    def fire_code_changes(
        self, state: BuildState, now_ms: int, owns: Callable[[str], bool], source: pb.EventSource, room: int
    ) -> list[pb.Event]:
        """A taint and a ReactionFired for each stale Live partition of a job with on_code_change, newest
        partitions first, at most `room`; complete, it is not evaluated again until the log moves."""
        self.stale.update(state)
        events: list[pb.Event] = []
        for job, reaction in self.code_change:
            current = job.code_version
            if current is None:
                continue
            # More than `room`: some may be another worker's, or wanted already.
            for instance in self.stale.stale(state, job.label, current, room * 4 + 16):
                if len(events) >= 2 * room:
                    return events  # the rest on the next step (the head moves with this append)
                built = built_version(state, instance)
                want_id = reaction_want_id(job.label, reaction.kind, instance.uuid, instance.ref)
                if built is None or want_id in state.wants or not owns(instance.ref):
                    continue
                events += code_change_events(job.label, reaction, instance, built, current, want_id, now_ms, source)
        self.code_seen_head = state.head_seq
        return events

    def note(self, state: BuildState, changes: Iterable[Change], now_ms: int, owns: Callable[[str], bool]) -> None:
        """Add the firings `changes` call for; a newer change of the same (job, ref) restarts its window."""
        for change in changes:
            for job, reaction, ref in self._affected(state, change):
                if not owns(ref):
                    continue
                due = now_ms + reaction.debounce_ms
                self.pending[(job, reaction.kind, ref)] = _Pending(job, reaction, ref, change, due)
                self.next_due_ms = due if self.next_due_ms is None else min(self.next_due_ms, due)

    def _affected(self, state: BuildState, change: Change) -> Iterable[tuple[str, Reaction, str]]:
        """(job, reaction, ref) for each partition a change makes a reaction want: those not Live now."""
        yield from self._failed_downstream(state, change)
        instances = state.instances
        if change.previous:
            previous = instances.get(change.previous)
            for uuid in (previous.consumers or ()) if previous is not None else ():
                consumer = instances.get(uuid)
                if consumer is None:
                    continue
                job = self._built_by(state, consumer)
                if job is not None and job in self.upstream and not _live(state, consumer.ref):
                    yield job, self.upstream[job], consumer.ref
            return
        if not self.arrival or self._source_of(change.ref) is None:
            return
        for job, reaction in self.arrival:
            for ref in affected_refs(self.graph, job, reaction, change.ref):
                if not _live(state, ref):
                    yield job.label, reaction, ref

    def _failed_downstream(self, state: BuildState, change: Change) -> Iterable[tuple[str, Reaction, str]]:
        """The partitions of jobs with on_upstream_change that failed upstream because the changed ref had failed
        (`BuildState.upstream_failures`), or that read it (the job's pattern inverted) and failed: fixed input data,
        or a failed upstream now Live, is what they waited for. They were never built from an earlier instance, so
        no consumer list names them."""
        if not self.upstream or _producer(self.graph, change.ref) is None:  # a ref this graph does not know
            return
        for uuid in state.upstream_failures.get(change.ref, ()):  # those that failed because it had failed
            instance = state.instances.get(uuid)
            if instance is None or instance.superseded_seq or instance.state != InstanceState.UPSTREAM_FAILED:
                continue  # dropped, or wanted again since
            job = self._job_of(instance.ref)
            if job is not None and job in self.upstream:
                yield job, self.upstream[job], instance.ref
        for job_label, reaction in self.upstream.items():
            job = self.graph.jobs[job_label]
            for ref in affected_refs(self.graph, job, reaction, change.ref):
                current = state.canonical_instance(ref)
                if current is not None and current.state in _FAILED_STATES:
                    yield job_label, reaction, ref

    def _built_by(self, state: BuildState, consumer: Instance) -> str | None:
        """The job of an instance that has inputs: its run's (a dict read), else the graph's for its ref."""
        run = state.job_runs.get(consumer.built_by) if consumer.built_by is not None else None
        if run is not None and run.job_label in self.graph.jobs:  # a job renamed since: the graph says
            return run.job_label
        return self._job_of(consumer.ref)

    def _job_of(self, ref: str) -> str | None:
        from partbuild.orchestrator.graph import Job

        producer = _producer(self.graph, ref)
        return producer.label if isinstance(producer, Job) else None

    def _source_of(self, ref: str) -> str | None:
        from partbuild.orchestrator.graph import SourceDataset

        producer = _producer(self.graph, ref)
        return producer.name if isinstance(producer, SourceDataset) else None

    def fire(
        self, state: BuildState, now_ms: int, owns: Callable[[str], bool], source: pb.EventSource
    ) -> list[pb.Event]:
        """ReactionFired for the due firings, oldest due first, at most `max_per_step`; the rest wait."""
        events: list[pb.Event] = []
        wants = state.wants
        next_due: int | None = None
        for key, pending in sorted(self.pending.items(), key=lambda item: item[1].due_ms):
            if pending.due_ms > now_ms or len(events) >= self.max_per_step:
                next_due = pending.due_ms if next_due is None else min(next_due, pending.due_ms)
                break  # in due order: the rest are later, or wait for the next step's batch
            if pending.want_id in wants or _live(state, pending.ref) or not owns(pending.ref):
                del self.pending[key]  # fired (by us or a copy), built meanwhile, or no longer ours
                continue
            if pending.tries >= MAX_TRIES:
                logger.warning("reaction %s of job %s: the log keeps rejecting its want of %s", *_named(pending))
                del self.pending[key]
                continue
            pending.tries += 1
            events.append(fired_event(pending, now_ms, source))
            # Pending until its want is in the state: due again at once, should the append conflict.
            next_due = now_ms if next_due is None else min(next_due, now_ms)
        self.next_due_ms = next_due
        return events


def _named(pending: _Pending) -> tuple[str, str, str]:
    return pending.reaction.name, pending.job, pending.ref


def fired_event(pending: _Pending, now_ms: int, source: pb.EventSource) -> pb.Event:
    """The ReactionFired of a firing, with its one want."""
    change, reaction = pending.change, pending.reaction
    want = pb.WantCreate(
        want_id=pending.want_id,
        partition_refs=[pending.ref],
        ttl_seconds=int(reaction.ttl.total_seconds()) if reaction.ttl is not None else 0,
        comment=reaction.comment,
    )
    fired = pb.ReactionFired(
        job=pending.job,
        kind=reaction.kind,
        cause_ref=change.ref,
        cause_instance_uuid=change.uuid,
        previous_instance_uuid=change.previous,
        want=want,
    )
    return envelope(fired, source=source, timestamp_ms=now_ms)


def code_change_events(
    label: str,
    reaction: Reaction,
    instance: Instance,
    built: str,
    current: str,
    want_id: str,
    now_ms: int,
    source: pb.EventSource,
) -> list[pb.Event]:
    """The taint of a stale instance (only while it is canonical) and the firing that wants its ref again."""
    reason = f"code version of job {label} changed: built by {built}, the job's is {current} (on_code_change)"
    # Out of date, not wrong: the fold keeps it serving, stale, until the rebuild goes Live, unless its job withdraws.
    taint = pb.PartitionTaint(partition_ref=instance.ref, reason=reason, instance_uuid=instance.uuid, keep_serving=True)
    want = pb.WantCreate(
        want_id=want_id,
        partition_refs=[instance.ref],
        ttl_seconds=int(reaction.ttl.total_seconds()) if reaction.ttl is not None else 0,
        comment=reaction.comment,
    )
    fired = pb.ReactionFired(
        job=label,
        kind=reaction.kind,
        cause_ref=instance.ref,
        cause_instance_uuid=instance.uuid,
        want=want,
        built_version=built,
        current_version=current,
    )
    return [envelope(taint, source=source, timestamp_ms=now_ms), envelope(fired, source=source, timestamp_ms=now_ms)]


def affected_refs(graph: Graph, job: Job, reaction: Reaction, source_ref: str) -> list[str]:
    """The job's refs that read `source_ref`: the declaration's function, or the pattern inverted."""
    if reaction.affected is not None:
        try:
            refs = [ref for ref in reaction.affected(source_ref) if isinstance(ref, str)]
        except Exception as exc:  # the user's function: logged, never a crash of the loop
            logger.warning("on_source_arrival of job %s: affected(%r) raised %r", job.label, source_ref, exc)
            return []
        return [ref for ref in dict.fromkeys(refs) if _produced_by(graph, ref, job)]
    fields = graph.resolve(source_ref).partition.fields
    found = []
    for pattern in job.outputs:
        if set(pattern.fields) <= set(fields):  # type: ignore[union-attr]
            ref = pattern.format(**fields)  # type: ignore[union-attr]
            if _produced_by(graph, ref, job) and source_ref in graph.inputs_of(ref):
                found.append(ref)
    return found


def invertible(job: Job, source_patterns: Iterable[object]) -> bool:
    """Whether some output pattern of the job can be filled from some source's fields (the default inversion)."""
    return any(
        set(output.fields) <= set(pattern.fields)  # type: ignore[attr-defined]
        for output in job.outputs
        for pattern in source_patterns
    )


def _produced_by(graph: Graph, ref: str, job: Job) -> bool:
    return _producer(graph, ref) is job


def _producer(graph: Graph, ref: str) -> object | None:
    """The job or source that produces `ref`, or None when none (or several) does."""
    from partbuild.orchestrator.graph import GraphError

    try:
        return graph.resolve(ref).producer
    except GraphError:
        return None


def _live(state: BuildState, ref: str) -> bool:
    uuid = state.canonical.get(ref)
    return uuid is not None and state.instances[uuid].state == InstanceState.LIVE
