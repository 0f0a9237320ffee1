"""The orchestrator's reactions at work: changes read from the log, firings noted in it, then fired.

What a reaction owes is derivable from the log (issue 35), so no restart, crash or change of a bucket's
owner forgets it:

- each step reads the events folded since the last one (`read`: never a scan of the partitions) and turns
  the changes into firings (orchestrator/reactions.py says which changes call for which firing);
- a firing due later (its debounce window: the cause's time plus the reaction's debounce, the same for
  every reader) is noted in the log, `ReactionsNoted`, with the seq up to which this reactor examined the
  changes for its scopes (its cursor); the fold keeps both (state/fold/reaction_notes.py);
- due firings, its own and those the fold holds (noted by an earlier process, or by the bucket's previous
  owner), fire as `ReactionFired`, oldest due first, at most `max_per_step` a step; a firing whose
  partition went Live meanwhile, or that cannot fire (its job gone from the graph, the reaction no longer
  declared, its want appended and rejected by the fold `MAX_TRIES` times), is settled in the log, the last
  with its reason; an append that did not land (it conflicted with another writer's) is no try;
- a reactor starting, or gaining a bucket, reads the changes after the cursor of each scope it now owns;
  a scope never noted starts at the oldest cursor any scope has, or, in a log no reactor ever noted, at
  the head (what happened before reactions were durable is not reacted to).

A firing noted but not yet in the fold (the append conflicted) stays in memory and is noted again; a
firing is a want whose id comes from its cause, so two reactors, or one that restarted, fire it once.
The cursor is written with the step's other reaction events, or once `CURSOR_LAG_CHANGES` changes that owed
nothing went by since (a restart reads at most about that many again); an idle log gets no event, and
neither does a restart that finds nothing owed.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from partbuild.orchestrator.reactions import (
    _FAILED_STATES,
    _WATCHED,
    MAX_PER_STEP,
    MAX_TRIES,
    AffectedError,
    Change,
    Reaction,
    _live,
    _producer,
    affected_refs,
    changes_in,
    code_change_events,
)
from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.fold.reaction_notes import PendingRow, pending_key
from partbuild.state.fold.reactions import KIND_NAMES, reaction_want_id
from partbuild.state.fold.records import InstanceState
from partbuild.state.log.events import envelope
from partbuild.state.queries.staleness import StaleIndex, built_version

if TYPE_CHECKING:
    from partbuild.orchestrator.graph import Graph, Job
    from partbuild.state.fold.build_state import BuildState
    from partbuild.state.fold.records import Instance
    from partbuild.state.log.store import EventLog

logger = logging.getLogger("partbuild")

FIRST_RETRY_MS = 1_000  # a change whose evaluation raised is read again after this, doubling
MAX_RETRY_MS = 300_000
CURSOR_LAG_CHANGES = 1_000  # changes owing nothing read since the cursor was last written: write it again


@dataclass(frozen=True)
class ReactionScope:
    """Which refs a reactor acts for: `keys` it notes cursors under, `key_of(ref)` among them, `owns(ref)`."""

    keys: tuple[str, ...]
    key_of: Callable[[str], str]
    owns: Callable[[str], bool]


def everything(owns: Callable[[str], bool] | None = None) -> ReactionScope:
    """The scope of an orchestrator alone: every ref, under the one key ""."""
    return ReactionScope(("",), lambda ref: "", owns or (lambda ref: True))


@dataclass
class Reactor:
    """This orchestrator's reactions: where it read the log to, and the firings it noted not yet folded."""

    graph: Graph
    max_per_step: int = MAX_PER_STEP
    seen_head: int = -1  # the last seq read from the log (-1: not started)
    next_due_ms: int | None = None
    evaluated: set[str] = field(default_factory=set)  # the scope keys whose changes were read to seen_head
    unrecorded: dict[str, PendingRow] = field(default_factory=dict)  # noted, not in the fold yet
    settling: dict[str, pb.ReactionSettled] = field(default_factory=dict)
    _fresh: list[tuple[int, pb.Event]] = field(default_factory=list)
    _catch_up: list[tuple[int, pb.Event, frozenset[str]]] = field(default_factory=list)
    _tries: dict[tuple[str, str], int] = field(default_factory=dict)  # firings appended, the fold rejected them
    _attempts: list[tuple[str, str]] = field(default_factory=list)  # fired by the last `due`: tries once appended
    _unwritten: int = 0  # changes read since the cursor was last written
    # seq -> (when it is read again, its backoff, the event, its scope keys): changes whose evaluation raised
    _retrying: dict[int, tuple[int, int, pb.Event, frozenset[str]]] = field(default_factory=dict)
    _scanned_head: int = -1

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

    # ----------------------------------------------------------------- reading the log

    def read(self, log: EventLog, head: int, scope: ReactionScope, cursors: Mapping[str, int]) -> None:
        """Take the events folded after the last read, up to `head`; a scope key new to this reactor reads
        from its cursor (`cursors`: the fold's, as of `head`)."""
        gained = [key for key in scope.keys if key not in self.evaluated]
        if self.seen_head < 0:
            self.seen_head = _start(scope.keys, cursors, head)
        elif gained:
            start = _start(gained, cursors, head)
            if start < self.seen_head:
                keys = frozenset(gained)
                self._catch_up += [(seq, event, keys) for seq, event in _watched(log, start, self.seen_head)]
        self.evaluated = set(scope.keys)
        if head > self.seen_head:
            self._fresh += _watched(log, self.seen_head, head)
            self.seen_head = head
        self._unwritten += len(self._fresh)

    def owes(self, state: BuildState, owns: Callable[[str], bool]) -> bool:
        """Whether a firing is pending or debouncing here (noted or not), or changes wait to be read."""
        self._forget_folded(state)  # what landed since the last step is owed no more
        if self.unrecorded or self.settling or self._fresh or self._catch_up or self._retrying:
            return True
        return any(owns(row.partition_ref) for row in state.reaction_pending.values())

    # ----------------------------------------------------------------- one step

    def due(
        self,
        state: BuildState,
        now_ms: int,
        owns: Callable[[str], bool],
        source: pb.EventSource,
        scope: ReactionScope | None = None,
    ) -> list[pb.Event]:
        """The step's reaction events: firings due at `now_ms`, and the notes of what is owed later."""
        if not (self.declared or state.reaction_pending or self.settling):
            return []
        scope = scope or everything(owns)
        self._attempts = []  # the last step's firings, never `appended`: their append did not land, no try
        self._forget_folded(state)
        retried = self._retry_due(now_ms)
        noted = self._note_changes(state, scope, now_ms)
        for seq in retried:
            if self._retrying[seq][0] <= now_ms:  # read again without failing (a failure moves its time on)
                del self._retrying[seq]
        events: list[pb.Event] = []
        if noted or state.head_seq != self._scanned_head or (self.next_due_ms or 0) <= now_ms:
            events = self._fire(state, now_ms, scope.owns, source)
        if self.code_change and state.head_seq != self.code_seen_head:
            events += self.fire_code_changes(state, now_ms, scope.owns, source, self.max_per_step - len(events) // 2)
        notes = self._notes(state, events)
        return [*events, *([envelope(notes, source=source, timestamp_ms=now_ms)] if notes is not None else [])]

    def appended(self) -> None:
        """The events of the last `due` landed in the log: each firing among them was tried once (if the fold
        accepted it, it is owed no more; if not, it counts towards `MAX_TRIES`)."""
        for tried in self._attempts:
            self._tries[tried] = self._tries.get(tried, 0) + 1
        self._attempts = []

    def _forget_folded(self, state: BuildState) -> None:
        """Drop what the fold holds now: notes it keeps (or that fired), settlements it made."""
        pending, wants = state.reaction_pending, state.wants
        for key, row in list(self.unrecorded.items()):
            kept = pending.get(key)
            folded = kept is not None and kept.cause_seq >= row.cause_seq
            if folded or reaction_want_id(row.job, row.kind, row.cause_instance_uuid, row.partition_ref) in wants:
                del self.unrecorded[key]
        for key, settled in list(self.settling.items()):
            kept = pending.get(key)
            if kept is None or kept.cause_instance_uuid != settled.cause_instance_uuid:
                del self.settling[key]
        if self._tries:  # only firings still owed keep their count of tries
            self._tries = {
                tried: n for tried, n in self._tries.items() if tried[0] in pending or tried[0] in self.unrecorded
            }

    def _note_changes(self, state: BuildState, scope: ReactionScope, now_ms: int) -> bool:
        """Turn the changes read into firings; a newer change of the same (job, ref) restarts its window."""
        batches: list[tuple[list[tuple[int, pb.Event]], frozenset[str] | None]] = []
        if self._fresh:
            batches.append((self._fresh, None))
            self._fresh = []
        if self._catch_up:
            for keys in {keys for _, _, keys in self._catch_up}:
                batches.append(([(seq, event) for seq, event, k in self._catch_up if k == keys], keys))
            self._catch_up = []
        noted = False
        for events, only in batches:
            keys = only if only is not None else frozenset(scope.keys)
            by_seq = dict(events)
            for change in changes_in(state, events):
                try:
                    affected = list(self._affected(state, change))
                except Exception as exc:  # one change's failure stops neither the others nor the loop: read again
                    self._failed(change, by_seq[change.seq], keys, now_ms, exc)
                    continue
                for job, reaction, ref in affected:
                    if scope.owns(ref) and scope.key_of(ref) in keys:
                        noted = self._note(state, job, reaction, ref, change) or noted
        return noted

    def _failed(self, change: Change, event: pb.Event, keys: frozenset[str], now_ms: int, exc: Exception) -> None:
        """Keep a change whose evaluation raised, to read again after a backoff (the cursor stays before it); a
        declaration's function that raised is recorded as its reaction's error (shown with the reaction)."""
        kept = self._retrying.get(change.seq)
        backoff = min(kept[1] * 2, MAX_RETRY_MS) if kept is not None else FIRST_RETRY_MS
        if isinstance(exc, AffectedError):
            reason = f"{exc}; read again in {backoff // 1000} s"[:1024]
            key = pending_key(exc.job, exc.kind, change.ref)
            self.settling[key] = pb.ReactionSettled(
                job=exc.job,
                kind=exc.kind,
                partition_ref=change.ref,
                cause_instance_uuid=change.uuid,
                reason=reason,
                failed=True,
            )  # type: ignore[arg-type]
        logger.exception(
            "reactions to %s (seq %d) could not be evaluated: tried again in %d ms", change.ref, change.seq, backoff
        )
        self._retrying[change.seq] = (now_ms + backoff, backoff, event, keys)

    def _retry_due(self, now_ms: int) -> list[int]:
        """Changes whose evaluation failed and whose backoff passed: read again this step; their seqs."""
        due = [seq for seq, (retry_at, *_) in sorted(self._retrying.items()) if retry_at <= now_ms]
        self._catch_up += [(seq, self._retrying[seq][2], self._retrying[seq][3]) for seq in due]
        return due

    def _note(self, state: BuildState, job: str, reaction: Reaction, ref: str, change: Change) -> bool:
        key = pending_key(job, reaction.kind, ref)
        known = self.unrecorded.get(key) or state.reaction_pending.get(key)
        if known is not None and known.cause_seq >= change.seq:
            return False  # noted already (read again after a restart), or a newer cause is
        if reaction_want_id(job, reaction.kind, change.uuid, ref) in state.wants:
            return False  # fired already
        due = change.at_ms + reaction.debounce_ms
        self.unrecorded[key] = PendingRow(
            job, reaction.kind, ref, change.ref, change.uuid, change.previous, change.seq, due, 0
        )
        return True

    def _fire(
        self, state: BuildState, now_ms: int, owns: Callable[[str], bool], source: pb.EventSource
    ) -> list[pb.Event]:
        """ReactionFired for the due firings, oldest due first, at most `max_per_step`; the rest wait."""
        self._scanned_head = state.head_seq
        events: list[pb.Event] = []
        next_due: int | None = None
        for key, row in sorted(self._owed(state, owns), key=lambda item: item[1].due_ms):
            if row.due_ms > now_ms or len(events) >= self.max_per_step:
                next_due = row.due_ms if next_due is None else min(next_due, row.due_ms)
                break  # in due order: the rest are later, or wait for the next step's batch
            problem = self._cannot_fire(state, row)
            if problem is not None:
                reason, failed = problem
                self.settling[key] = _settled(row, reason, failed)
                self.unrecorded.pop(key, None)  # settled: owed no more, whether the fold ever held it or not
                if failed:
                    logger.warning(
                        "reaction %s of job %s on %s: %s", KIND_NAMES[row.kind], row.job, row.partition_ref, reason
                    )
                continue
            self._attempts.append((key, row.cause_instance_uuid))
            events.append(fired_event(row, self.graph.jobs[row.job], now_ms, source))
            next_due = now_ms  # due again at once, should the append conflict
        self.next_due_ms = next_due
        return events

    def _owed(self, state: BuildState, owns: Callable[[str], bool]) -> Iterator[tuple[str, PendingRow]]:
        """The firings owed here: the fold's and this reactor's unfolded ones, of owned refs, not being settled."""
        for key, row in state.reaction_pending.items():
            if key not in self.unrecorded and key not in self.settling and owns(row.partition_ref):
                yield key, row
        for key, row in self.unrecorded.items():
            if key not in self.settling and owns(row.partition_ref):  # a bucket lost since: noted, not fired here
                yield key, row

    def _cannot_fire(self, state: BuildState, row: PendingRow) -> tuple[str, bool] | None:
        """(why, whether that is a failure) for a firing that must not fire, else None."""
        name = KIND_NAMES[row.kind]
        job = self.graph.jobs.get(row.job)
        if job is None:
            return f"job {row.job} is not in the graph: its {name} firing for {row.partition_ref} cannot fire", True
        if all(reaction.kind != row.kind for reaction in job.reactions):
            return f"job {row.job} no longer declares {name}: its firing for {row.partition_ref} is dropped", True
        if reaction_want_id(row.job, row.kind, row.cause_instance_uuid, row.partition_ref) in state.wants:
            return "fired", False
        if _live(state, row.partition_ref):
            return "its partition went Live meanwhile", False
        tries = self._tries.get((pending_key(row.job, row.kind, row.partition_ref), row.cause_instance_uuid), 0)
        if tries >= MAX_TRIES:
            return f"the log rejected its want of {row.partition_ref} {tries} times", True
        return None

    def _notes(self, state: BuildState, fired: list[pb.Event]) -> pb.ReactionsNoted | None:
        """What this step owes the log: unfolded firings, settlements and the cursor, or None (nothing moved)."""
        cursors = state.reaction_cursors
        keys = sorted(self.evaluated)
        lagging = self._unwritten >= CURSOR_LAG_CHANGES
        unset = any(key not in cursors for key in keys)
        if not (self.unrecorded or self.settling or fired or lagging or unset) or self.seen_head < 0:
            return None
        self._unwritten = 0
        fired_keys = {_fired_key(event) for event in fired}
        return pb.ReactionsNoted(
            upto_seq=min([self.seen_head, *(seq - 1 for seq in self._retrying)]),  # a change to read again is owed
            scopes=keys,
            pending=[_pending_message(row) for key, row in self.unrecorded.items() if key not in fired_keys],
            settled=list(self.settling.values()),
        )

    # ----------------------------------------------------------------- what a change calls for

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

    # ----------------------------------------------------------------- on_code_change

    def fire_code_changes(
        self, state: BuildState, now_ms: int, owns: Callable[[str], bool], source: pb.EventSource, room: int
    ) -> list[pb.Event]:
        """A taint and a ReactionFired for each stale Live partition of a job with on_code_change, newest
        partitions first, at most `room`; complete, it is not evaluated again until the log moves. Derived from
        the state (its stale instances) at every step, it owes nothing between steps."""
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


def _start(keys: Iterable[str], cursors: Mapping[str, int], head: int) -> int:
    """Where to read changes from for `keys`: their oldest cursor; a key never noted from the oldest cursor
    of any scope (the layout changed), or the head if no reactor ever noted one."""
    found = [cursors[key] if key in cursors else min(cursors.values(), default=head) for key in keys]
    return min(found, default=head)


def _watched(log: EventLog, after: int, upto: int) -> list[tuple[int, pb.Event]]:
    """The events that may be changes (observations, successes), after `after` up to `upto`."""
    found = []
    for page in log.iter_payload_pages(after_seq=after, upto_seq=upto):
        for seq, payload in page:
            event = pb.Event()
            event.ParseFromString(payload)
            if event.WhichOneof("payload") in _WATCHED:
                found.append((seq, event))
    return found


def _settled(row: PendingRow, reason: str, failed: bool) -> pb.ReactionSettled:
    return pb.ReactionSettled(
        job=row.job,
        kind=row.kind,  # type: ignore[arg-type]
        partition_ref=row.partition_ref,
        cause_instance_uuid=row.cause_instance_uuid,
        reason=reason,
        failed=failed,
    )


def _pending_message(row: PendingRow) -> pb.ReactionPending:
    return pb.ReactionPending(
        job=row.job,
        kind=row.kind,  # type: ignore[arg-type]
        partition_ref=row.partition_ref,
        cause_ref=row.cause_ref,
        cause_instance_uuid=row.cause_instance_uuid,
        previous_instance_uuid=row.previous_instance_uuid,
        cause_seq=row.cause_seq,
        due_ms=row.due_ms,
    )


def _fired_key(event: pb.Event) -> str:
    fired = event.reaction_fired
    return pending_key(fired.job, fired.kind, fired.want.partition_refs[0]) if fired.job else ""


def fired_event(row: PendingRow, job: Job, now_ms: int, source: pb.EventSource) -> pb.Event:
    """The ReactionFired of a firing, with its one want (its ttl and comment: the job's reaction's)."""
    reaction = next(reaction for reaction in job.reactions if reaction.kind == row.kind)
    want = pb.WantCreate(
        want_id=reaction_want_id(row.job, row.kind, row.cause_instance_uuid, row.partition_ref),
        partition_refs=[row.partition_ref],
        ttl_seconds=int(reaction.ttl.total_seconds()) if reaction.ttl is not None else 0,
        comment=reaction.comment,
    )
    fired = pb.ReactionFired(
        job=row.job,
        kind=row.kind,  # type: ignore[arg-type]
        cause_ref=row.cause_ref,
        cause_instance_uuid=row.cause_instance_uuid,
        previous_instance_uuid=row.previous_instance_uuid,
        want=want,
    )
    return envelope(fired, source=source, timestamp_ms=now_ms)
