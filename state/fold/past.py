"""The state as it was right after any seq the live state has folded, read from its histories: no replay.

`PastState(live, seq, clock_ms)` answers the reads a `BuildState` answers (the same
attributes and methods the API, the web pages and `state/queries/lineage.py` use),
each record rebuilt on demand as of `seq` from what the live record holds and its
history (state/fold/history.py). It copies nothing up front and holds nothing
after the read: a read as of N costs the records it touches, not a past state.

How each field of a record is found as of N:
- Its state and `updated_seq`: the record's own if its latest change is at or before
  N, else the newest history entry at or before N; an instance's Building entries
  are its attempts' created seqs, and the creation (Missing, Idle, Queued) is implied.
- Fields set once, with the state change that set them (an instance's location,
  inputs, builder and sizes; a want's satisfiers; a run's outcome): set as of N iff
  that change is.
- Growing lists (attempts, consumers, derivative wants): the entries whose own
  record existed (or was built) by N.
- A note and what an instance waits for: the kept field changes, a run's error
  message and missing refs, and when each waited-for ref became Live.

Retention drops the history of what it drops: a read that needs a dropped
instance raises `HistoryDropped` (the API's 410).
"""

from __future__ import annotations

import itertools
from bisect import bisect_right
from collections.abc import Callable, Iterator, Mapping, Sequence
from functools import cached_property
from typing import Any, Protocol, TypeVar, runtime_checkable

from partbuild.state.fold.build_state import BuildState
from partbuild.state.fold.checks import CheckEntry, PastCheckResults
from partbuild.state.fold.history import (
    RecordTables,
    dropped_deltas,
    entries,
    field_at,
    heartbeat_at,
    instance_state_at,
    run_entries,
    versions_at,
)
from partbuild.state.fold.rechecks import CheckRequest, PastCheckRequests, past_pending
from partbuild.state.fold.records import (
    ACTIVE_RUN_STATES,
    TERMINAL_WANT_STATES,
    Instance,
    InstanceState,
    JobRun,
    JobRunState,
    Rejection,
    Want,
    WantState,
)
from partbuild.state.fold.view import StateView

_LIVE = InstanceState.LIVE
_UPSTREAM_BUILDING = InstanceState.UPSTREAM_BUILDING
_FAILED_RUN = JobRunState.FAILED
_RUNNING = JobRunState.RUNNING

R = TypeVar("R")
_Created = TypeVar("_Created", Instance, Want, JobRun)  # the records kept in creation order


class HistoryDropped(LookupError):
    """A read of the past needs an instance that retention dropped (and its history with it)."""

    def __init__(self, what: str, seq: int) -> None:
        super().__init__(f"{what} as of seq {seq} was dropped by retention, and its history with it")
        self.seq = seq


# ----------------------------------------------------------------- records as of a seq


def _changes(state: RecordTables, instance: Instance) -> list[tuple[int, int]]:
    """(seq, state) of its kept changes and its latest, oldest first (Building entries are not kept)."""
    kept = list(entries(state.instance_histories.get(instance.uuid, 0)))
    kept.reverse()
    kept.append((instance.updated_seq, instance.state))
    return kept


def became_live_seq(state: RecordTables, instance: Instance) -> int | None:
    """When it became Live (None if it never did)."""
    return next((at for at, now in _changes(state, instance) if now == _LIVE), None)


def built_seq(state: RecordTables, instance: Instance) -> int | None:
    """When its data was set (its location, inputs, sizes): its builder's success, or its observation."""
    if instance.built_by is not None:
        return state.job_runs[instance.built_by].updated_seq
    return became_live_seq(state, instance)


def _version_learned_after(state: RecordTables, instance: Instance, seq: int) -> bool:
    """Whether its version was learned after `seq` (a change from Live to Live: state/fold/instances.py)."""
    changes = _changes(state, instance)
    return any(
        before == _LIVE and after == _LIVE and at > seq for (_, before), (at, after) in itertools.pairwise(changes)
    )


def instance_at(state: RecordTables, instance: Instance, seq: int) -> Instance:
    """A fresh copy of a live instance as it was as of `seq` (at or after its creation)."""
    now, entered = instance_state_at(state, instance, seq)
    past = Instance(instance.uuid, instance.ref, now, instance.created_seq, instance.previous_uuid)
    past.updated_seq = entered
    superseded = instance.superseded_seq
    past.superseded_seq = superseded if superseded <= seq else 0
    runs = state.job_runs
    past.attempts = tuple(run_id for run_id in instance.attempts if runs[run_id].created_seq <= seq)
    built = built_seq(state, instance)
    if built is not None and built <= seq:
        past.built_by = instance.built_by
        past.inputs = instance.inputs
        past.location = instance.location
        past.row_count = instance.row_count
        past.byte_count = instance.byte_count
        past.metadata = instance.metadata
        learned_later = instance.version is not None and _version_learned_after(state, instance, seq)
        past.version = None if learned_later else instance.version
    if instance.consumers:
        consumers = [uuid for uuid in instance.consumers if _built_by_then(state, uuid, seq)]
        past.consumers = (consumers[0],) if len(consumers) == 1 else consumers or None
    past.note = _note_at(state, instance, past.attempts, seq)
    if now == _UPSTREAM_BUILDING:
        past.waiting_on = dict.fromkeys(_waiting_at(state, instance, entered, seq))
    return past


def _built_by_then(state: RecordTables, uuid: str, seq: int) -> bool:
    consumer = state.instances.get(uuid)
    if consumer is None:
        return False
    built = built_seq(state, consumer)
    return built is not None and built <= seq


def _note_at(state: RecordTables, instance: Instance, attempts: tuple[str, ...], seq: int) -> str | None:
    """Its note as of `seq`: the newest kept note, or its newest failed run's message if that came later."""
    kept = field_at(state, instance.uuid, "note", seq)
    note, noted = kept if kept is not None else (None, 0)
    for run_id in attempts:
        run = state.job_runs[run_id]
        if run.state == _FAILED_RUN and noted < run.updated_seq <= seq:
            note, noted = run.error_message or None, run.updated_seq
    return note


def _waiting_at(state: RecordTables, instance: Instance, began: int, seq: int) -> list[str]:
    """The refs an instance Upstream-building since `began` still waited for as of `seq`."""
    kept = field_at(state, instance.uuid, "waits", seq)
    if kept is not None and kept[1] == began:
        refs: Sequence[str] = kept[0]
    else:  # its job run found them missing: those not Live then
        runs = (state.job_runs[run_id] for run_id in instance.attempts)
        run = next((r for r in runs if r.updated_seq == began and r.state == JobRunState.DEP_MISS), None)
        refs = [] if run is None else [ref for ref in run.missing_refs if not _live_at(state, ref, began)]
    return [ref for ref in refs if not _became_live(state, ref, began, seq)]


def _live_at(state: RecordTables, ref: str, seq: int) -> bool:
    uuid = canonical_at(state, ref, seq)
    return uuid is not None and instance_state_at(state, state.instances[uuid], seq)[0] == _LIVE


def _became_live(state: RecordTables, ref: str, after: int, seq: int) -> bool:
    """Whether an instance of `ref` became Live while canonical, after `after` and at or before `seq`."""
    uuid = state.canonical.get(ref)
    while uuid is not None:
        instance = state.instances.get(uuid)
        if instance is None:  # dropped by retention: it and older ones are beyond what can be told
            return False
        if instance.created_seq <= seq:
            became = became_live_seq(state, instance)
            superseded = instance.superseded_seq
            if became is not None and after < became <= seq and (not superseded or became <= superseded):
                return True
        if instance.created_seq <= after:
            return False
        uuid = instance.previous_uuid
    return False


def canonical_at(state: RecordTables, ref: str, seq: int) -> str | None:
    """The UUID of the canonical instance of `ref` as of `seq` (None: it had none)."""
    uuid = state.canonical.get(ref)
    while uuid is not None:
        instance = state.instances.get(uuid)
        if instance is None:
            first = state.first_created.get(ref)
            if first is not None and seq < first:
                return None  # it had no instance yet
            raise HistoryDropped(f"the instance of {ref!r} canonical", seq)
        if instance.created_seq <= seq:
            return uuid
        uuid = instance.previous_uuid
    return None


def served_at(state: RecordTables, ref: str, seq: int) -> str | None:
    """The UUID of the instance readers got for `ref` as of `seq`: a stale one still serving then (its changes
    are kept by ref), else the canonical one if it was Live (None: nothing Live to read)."""
    kept = field_at(state, ref, "serving", seq)
    if kept is not None and kept[0] is not None:
        if kept[0] not in state.instances:  # it stopped serving later, then retention dropped it
            raise HistoryDropped(f"the instance of {ref!r} readers got", seq)
        return kept[0]
    uuid = canonical_at(state, ref, seq)
    if uuid is None or instance_state_at(state, state.instances[uuid], seq)[0] != _LIVE:
        return None
    return uuid


def want_state_at(want: Want, seq: int) -> tuple[WantState, int]:
    """(state, seq it was entered at) of a want as of `seq` (at or after its creation)."""
    if want.updated_seq <= seq:
        return want.state, want.updated_seq
    for at, old in entries(want.history):
        if at <= seq:
            return WantState(old), at
    return WantState.IDLE, want.created_seq


def want_at(state: RecordTables, want: Want, seq: int) -> Want:
    """A fresh copy of a want as it was as of `seq` (at or after its creation)."""
    past = Want.__new__(Want)
    past.__setstate__(want.__getstate__())
    past.history = 0
    past.state, past.updated_seq = want_state_at(want, seq)
    past.tally = None  # the fold's bookkeeping, not a read
    if past.state != WantState.SUCCESSFUL:
        past.satisfied_by = ()
    if past.state != WantState.CANCELED:
        past.cancel_reason = None
    if want.children:
        wants = state.wants
        past.children = [child for child in want.children if wants[child].created_seq <= seq] or None
    return past


def run_at(run: JobRun, seq: int, beats: bytearray | None = None) -> JobRun:
    """A fresh copy of a job run as it was as of `seq` (at or after its creation); `beats`: its
    `run_heartbeats` (without, its last heartbeat as of `seq` is read from the Running change alone)."""
    past = JobRun.__new__(JobRun)
    past.__setstate__(run.__getstate__())
    past.history = 0
    if run.updated_seq > seq:
        past.state, past.updated_seq, past.updated_ms = JobRunState.QUEUED, run.created_seq, run.created_ms
        for at, kind, ms in run_entries(run.history):
            if at <= seq:
                past.state, past.updated_seq, past.updated_ms = JobRunState(kind), at, ms
                break
    past.last_heartbeat_ms = _heartbeat_at(run, seq, beats)
    state = past.state
    if state != JobRunState.SUCCEEDED:
        past.inputs = ()
        past.failed_outputs = None
    if state != _FAILED_RUN:
        past.error_class = past.error_message = None
        past.retry_after_ms = 0
        past.split = None
    if state != JobRunState.DEP_MISS:
        past.missing_refs = ()
    if state != JobRunState.CANCELED:
        past.cancel_reason = None
    return past


def _heartbeat_at(run: JobRun, seq: int, beats: bytearray | None) -> int:
    """When a job run's newest heartbeat by `seq` came (0: none): the first made it Running (a change of its
    history, or its state), the later ones are its `run_heartbeats`."""
    newest, when = heartbeat_at(beats, seq)
    if newest:
        return when
    if run.state == _RUNNING and run.updated_seq <= seq:
        return run.updated_ms
    for at, kind, ms in run_entries(run.history):
        if kind == _RUNNING and at <= seq:
            return ms
    return 0


# ----------------------------------------------------------------- the tables as of a seq


class _PastTable(Mapping[str, R]):
    """A table of the live state (instances, wants, job runs) as of a seq: records rebuilt when read."""

    def __init__(self, past: PastState, table: dict[str, Any]) -> None:
        self._past = past
        self._table = table
        self._seq = past.head_seq

    def _rebuild(self, record: Any) -> R:
        raise NotImplementedError

    def __getitem__(self, key: str) -> R:
        record = self._table[key]
        if record.created_seq > self._seq:
            raise KeyError(key)
        return self._rebuild(record)

    def __contains__(self, key: object) -> bool:
        record = self._table.get(key)  # type: ignore[call-overload]  # any key, as Mapping.__contains__ takes
        return record is not None and record.created_seq <= self._seq

    def __iter__(self) -> Iterator[str]:
        seq = self._seq
        for key, record in self._table.items():  # creation order: stop at the first one created later
            if record.created_seq > seq:
                return
            yield key

    def __len__(self) -> int:
        return sum(1 for _ in self)


class _PastInstances(_PastTable[Instance]):
    def _rebuild(self, record: Instance) -> Instance:
        return instance_at(self._past.live, record, self._seq)


class _PastWants(_PastTable[Want]):
    def _rebuild(self, record: Want) -> Want:
        return want_at(self._past.live, record, self._seq)


class _PastRuns(_PastTable[JobRun]):
    def _rebuild(self, record: JobRun) -> JobRun:
        return run_at(record, self._seq, self._past.live.run_heartbeats.get(record.job_run_id))


class _PastCanonical(Mapping[str, str]):
    """ref -> UUID of its canonical instance as of a seq."""

    def __init__(self, past: PastState) -> None:
        self._live = past.live
        self._seq = past.head_seq

    def __getitem__(self, ref: str) -> str:
        uuid = canonical_at(self._live, ref, self._seq)
        if uuid is None:
            raise KeyError(ref)
        return uuid

    def __contains__(self, ref: object) -> bool:
        return (
            isinstance(ref, str)
            and ref in self._live.canonical
            and canonical_at(self._live, ref, self._seq) is not None
        )

    def __iter__(self) -> Iterator[str]:
        for ref in self._live.canonical:
            if ref in self:
                yield ref

    def __len__(self) -> int:
        return sum(1 for _ in self)


class _PastWantsByRef(Mapping[str, list[str]]):
    """ref -> every want naming it by a seq, in creation order."""

    def __init__(self, past: PastState) -> None:
        self._live = past.live
        self._seq = past.head_seq

    def __getitem__(self, ref: str) -> list[str]:
        wants, seq = self._live.wants, self._seq
        listed = [want_id for want_id in self._live.wants_by_ref[ref] if wants[want_id].created_seq <= seq]
        if not listed:
            raise KeyError(ref)
        return listed

    def __iter__(self) -> Iterator[str]:
        for ref in self._live.wants_by_ref:
            if ref in self:
                yield ref

    def __len__(self) -> int:
        return sum(1 for _ in self)


class _PastRejections(Sequence[Rejection]):
    """The rejections up to a seq: a prefix of the live list, not a copy."""

    def __init__(self, rejections: list[Rejection], seq: int) -> None:
        self._rejections = rejections
        self._len = bisect_right(rejections, seq, key=_rejection_seq)

    def __len__(self) -> int:
        return self._len

    def __getitem__(self, index: Any) -> Any:
        return self._rejections[: self._len][index] if isinstance(index, slice) else self._item(index)

    def _item(self, index: int) -> Rejection:
        if index < 0:
            index += self._len
        if not 0 <= index < self._len:
            raise IndexError(index)
        return self._rejections[index]


def _rejection_seq(rejection: Rejection) -> int:
    return rejection.seq


class PastState:
    """The reads of a BuildState as of `head_seq`, answered from the live state `live` (see the module)."""

    broken = False

    def __init__(self, live: BuildState, seq: int, clock: Callable[[], int]) -> None:
        """As of `seq` (at most the live head); `clock()` tells the log's clock then, asked only if read."""
        if seq > live.head_seq:
            raise ValueError(f"seq {seq} is after the live state's head {live.head_seq}")
        self.live = live
        self.head_seq = seq
        self._clock = clock
        self.instances: Mapping[str, Instance] = _PastInstances(self, live.instances)
        self.wants: Mapping[str, Want] = _PastWants(self, live.wants)
        self.job_runs: Mapping[str, JobRun] = _PastRuns(self, live.job_runs)
        self.canonical: Mapping[str, str] = _PastCanonical(self)
        self.wants_by_ref: Mapping[str, list[str]] = _PastWantsByRef(self)
        self.check_results: Mapping[str, tuple[CheckEntry, ...]] = PastCheckResults(live.check_results, seq)
        # Where the counts as of a seq may be read without a scan (the state store, state/store/counts.py):
        # it answers None when it has not got them yet (its watermark is before the seq).
        self.counts_reader: Callable[[int], dict[str, dict[str, int]] | None] | None = None

    # The rejections and the checks requests, made when read: a live state's are at hand, but the state store's
    # are walked (every row of their kind), which a read that looks at neither must not pay for.
    @cached_property
    def rejections(self) -> Sequence[Rejection]:
        return _PastRejections(self.live.rejections, self.head_seq)

    @cached_property
    def check_requests(self) -> Mapping[str, CheckRequest]:
        return PastCheckRequests(self.live.check_requests, self.head_seq)

    @cached_property
    def clock_ms(self) -> int:
        """The log's clock as of the seq: the largest timestamp of an event applied by then."""
        return self._clock()

    @cached_property
    def pending_check_requests(self) -> dict[str, None]:
        """Checks requests not answered as of the seq, oldest first."""
        return past_pending(self.check_requests)

    # The small records, as of the seq (versions: state/fold/history.py).
    @cached_property
    def groups(self) -> dict[str, Any]:
        return versions_at(self.live, "groups", self.head_seq)

    @cached_property
    def sources(self) -> dict[str, Any]:
        return versions_at(self.live, "sources", self.head_seq)

    @cached_property
    def subscriptions(self) -> dict[str, Any]:
        return versions_at(self.live, "subscriptions", self.head_seq)

    @cached_property
    def schedules(self) -> dict[str, Any]:
        return versions_at(self.live, "schedules", self.head_seq)

    @cached_property
    def reactions(self) -> dict[str, Any]:
        return _present(versions_at(self.live, "reactions", self.head_seq))

    @cached_property
    def reaction_pending(self) -> dict[str, Any]:
        return _present(versions_at(self.live, "reaction_pending", self.head_seq))

    @property
    def want_causes(self) -> dict[str, str]:
        """Set with each want and never changed: looked up for a want that exists as of the seq, it is as then."""
        return self.live.want_causes

    @cached_property
    def bucket_layouts(self) -> dict[str, tuple[int, int]]:
        return versions_at(self.live, "bucket_layouts", self.head_seq)

    @cached_property
    def bucket_runs(self) -> dict[str, int]:
        return versions_at(self.live, "bucket_runs", self.head_seq)

    @property
    def active_run_ids(self) -> dict[str, None]:
        """Job runs queued or running as of the seq, oldest first (a scan of the runs created by then)."""
        return {
            run_id: None
            for run_id, run in _maybe_open(self.live, "job_runs", self.head_seq)
            if _active(run, self.head_seq)
        }

    @cached_property
    def active_wants_by_ref(self) -> dict[str, dict[str, None]]:
        """ref -> the wants naming it that were not terminal as of the seq, in creation order (a scan of the
        wants created by then). Its refs are those of the live index then; their order may differ from it."""
        seq = self.head_seq
        active: dict[str, dict[str, None]] = {}
        for want_id, want in _maybe_open(self.live, "wants", seq):
            now = want.state if want.updated_seq <= seq else want_state_at(want, seq)[0]
            if now not in TERMINAL_WANT_STATES:
                for ref in want.refs:
                    active.setdefault(ref, {})[want_id] = None
        return active

    @cached_property
    def wanted_instance_counts(self) -> list[int]:
        """By state: the canonical instances of the refs active wants named as of the seq."""
        counts = [0] * len(InstanceState)
        for ref in self.active_wants_by_ref:
            instance = self.canonical_instance(ref)
            if instance is not None:
                counts[instance.state] += 1
        return counts

    def canonical_instance(self, ref: str) -> Instance | None:
        uuid = canonical_at(self.live, ref, self.head_seq)
        return None if uuid is None else self.instances[uuid]

    def served_instance(self, ref: str) -> Instance | None:
        uuid = served_at(self.live, ref, self.head_seq)
        return None if uuid is None else self.instances[uuid]

    @cached_property
    def serving(self) -> dict[str, str]:
        """ref -> the stale Live instance readers got as of the seq (a scan of the refs with kept changes)."""
        served = {}
        for ref in self.live.canonical:
            kept = field_at(self.live, ref, "serving", self.head_seq)
            if kept is not None and kept[0] is not None:
                served[ref] = kept[0]
        return served

    def active_wants_for_ref(self, ref: str) -> Iterator[Want]:
        for want_id in self.wants_by_ref.get(ref, ()):
            want = self.wants[want_id]
            if want.state not in TERMINAL_WANT_STATES:
                yield want

    def counts(self) -> dict[str, dict[str, int]]:
        """How many instances, wants and job runs were in each state: from `counts_reader` when it has them
        (the store's index), else a scan of every record (the instances retention dropped since from
        `dropped_changes`)."""
        seq, live = self.head_seq, self.live
        stored = self.counts_reader(seq) if self.counts_reader is not None else None
        if stored is not None:
            return stored
        instances = [0] * len(InstanceState)
        for _, instance in _created_by(live.instances, seq):
            # Inline: most records have not changed since, and this visits every one of them.
            instances[instance.state if instance.updated_seq <= seq else instance_state_at(live, instance, seq)[0]] += 1
        for dropped_state, delta in dropped_deltas(live, seq).items():  # dropped since: as they were then
            instances[dropped_state] += delta
        wants = [0] * len(WantState)
        for _, want in _created_by(live.wants, seq):
            wants[want.state if want.updated_seq <= seq else want_state_at(want, seq)[0]] += 1
        runs = [0] * len(JobRunState)
        for _, run in _created_by(live.job_runs, seq):
            runs[run.state if run.updated_seq <= seq else run_at(run, seq).state] += 1
        return {
            "instances": {s.name.lower(): instances[s] for s in InstanceState},
            "wants": {s.name.lower(): wants[s] for s in WantState},
            "job_runs": {s.name.lower(): runs[s] for s in JobRunState},
        }


@runtime_checkable
class OpenIndex(Protocol):
    """Records that name the job runs or wants that may have been active as of a seq without a scan of them all
    (the state store's rows, state/store/stored.py): every one that was, in creation order, maybe a few more."""

    def open_at(self, table: str, seq: int) -> list[str]: ...


def _maybe_open(live: BuildState, table: str, seq: int) -> Iterator[tuple[str, Any]]:
    """(id, record) of the job runs or wants (`table`) that may have been active as of `seq`, oldest first:
    from the records' own index when they have one, else every one created by then."""
    records = getattr(live, table)
    if isinstance(live, OpenIndex):
        return ((key, records[key]) for key in live.open_at(table, seq))
    return _created_by(records, seq)


def _created_by(table: dict[str, _Created], seq: int) -> Iterator[tuple[str, _Created]]:
    for key, record in table.items():
        if record.created_seq > seq:
            return
        yield key, record


def _active(run: JobRun, seq: int) -> bool:
    if run.updated_seq <= seq:
        return run.state in ACTIVE_RUN_STATES
    return run_at(run, seq).state in ACTIVE_RUN_STATES


def _present(records: dict[str, Any]) -> dict[str, Any]:
    """Records kept with deletions (None once deleted, fold/reaction_notes.py): those that existed then."""
    return {key: record for key, record in records.items() if record is not None}


def live_state(state: StateView) -> BuildState:
    """The live state a read answers from: `state` itself, or the one a past state reads."""
    if isinstance(state, PastState):
        return state.live
    if isinstance(state, BuildState):
        return state
    raise TypeError(f"not a state: {type(state).__name__}")
