"""What changed between two seqs: instances created, state changes, canonical pointers moved, read from the
live state's histories (state/fold/history.py) with the same rules the reads of the past use
(state/fold/past.py), so a change listed at seq N is exactly a difference between the states as of N-1 and N.

A change at seq N from `from_state` to `to_state` means: as of N-1 the record was in `from_state` (None: it
did not exist yet) and as of N in `to_state`. Several moves of one record within one event are one change
(its state before the event to its state after it), and a move that ends where it began (an observed
instance learning its version: Live to Live) is none. Instances that retention dropped are gone with their
histories: their changes are not listed.
"""

from __future__ import annotations

from bisect import insort
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from functools import partial
from itertools import takewhile
from typing import Any, Final, Literal, TypeVar, cast

from partbuild.state.fold.build_state import BuildState
from partbuild.state.fold.history import entries, run_entries
from partbuild.state.fold.past import instance_state_at, want_state_at
from partbuild.state.fold.records import Instance, InstanceState, JobRun, JobRunState, Want, WantState
from partbuild.state.fold.touched import Touched

# The kinds of change, in the order changes at one seq are listed.
ChangeKind = Literal["instance_created", "instance_state", "want_state", "job_run_state", "canonical_moved"]
INSTANCE_CREATED: Final = "instance_created"
INSTANCE_STATE: Final = "instance_state"
WANT_STATE: Final = "want_state"
JOB_RUN_STATE: Final = "job_run_state"
CANONICAL_MOVED: Final = "canonical_moved"
KINDS: tuple[ChangeKind, ...] = (INSTANCE_CREATED, INSTANCE_STATE, WANT_STATE, JOB_RUN_STATE, CANONICAL_MOVED)
_KIND_ORDER = {kind: index for index, kind in enumerate(KINDS)}

State = InstanceState | WantState | JobRunState
_R = TypeVar("_R", Instance, Want, JobRun)


@dataclass(frozen=True, slots=True)
class Change:
    """One change at `seq`. `id`: the instance's UUID, the want's or job run's id, or the ref whose canonical
    pointer moved. A want or job run created is a state change from None; an instance created is its own
    kind (to the state it was created in) and moves its ref's canonical pointer (from_uuid None: the ref's
    first instance)."""

    seq: int
    kind: ChangeKind
    id: str
    ref: str | None = None
    from_state: State | None = None
    to_state: State | None = None
    from_uuid: str | None = None
    to_uuid: str | None = None

    @property
    def key(self) -> tuple[int, int, str]:
        """Where it sorts: by seq, then kind (in KINDS' order), then id."""
        return self.seq, _KIND_ORDER[self.kind], self.id


def changes_between(state: BuildState, first: int, last: int) -> list[Change]:
    """Every change in (`first`, `last`] (0 <= first < last <= head), sorted by `Change.key`.

    O(records): it scans every instance, want and job run (skipping at once those unchanged since `first`),
    and walks the few changes of each record changed since.
    """
    if not 0 <= first <= last <= state.head_seq:
        raise ValueError(f"need 0 <= first <= last <= head ({state.head_seq}), got {first} and {last}")

    def created_by_last(table: dict[str, _R]) -> Iterator[_R]:  # creation order: stop at the first after
        return takewhile(lambda record: record.created_seq <= last, table.values())

    tables = (created_by_last(state.instances), created_by_last(state.wants), created_by_last(state.job_runs))
    return _changes_of_records(state, first, last, *tables)


def changes_of(state: BuildState, first: int, last: int, touched: Touched) -> list[Change]:
    """`changes_between(state, first, last)` when every record changed after `first` is in `touched`
    (tracked since `first` or earlier): O(records touched), not O(records)."""
    if touched.since > first:
        raise ValueError(f"tracked since seq {touched.since}, after the first seq {first}")
    instances = filter(None, map(state.instances.get, touched.instances))  # None: dropped, with its changes
    wants = map(state.wants.__getitem__, touched.wants)
    runs = map(state.job_runs.__getitem__, touched.runs)
    return _changes_of_records(state, first, last, instances, wants, runs)


class ChangeScan:
    """`changes_between` for the spans of one pass over the log, up to `until`, reading each record once.

    `changes_between` per span reads every record each time: quadratic in the log, for an audit or a first
    projection that goes through it a span at a time. A scan lists the records held when it is made, reaches
    them in creation order as the spans get to them, and files each under the `width`-seq buckets its
    changes fall in: it holds the records with changes still to come. It lists only changes at or before
    `until`, and records' histories only grow, so the state may fold on between calls (read it under its
    read lock); a record the state no longer holds (dropped by retention) lists nothing, as there.
    """

    def __init__(self, state: BuildState, until: int, width: int) -> None:
        if not 0 <= until <= state.head_seq or width < 1:
            raise ValueError(f"need 0 <= until <= head ({state.head_seq}) and width >= 1, got {until} and {width}")
        self.until = until
        self.width = width
        self._tables: tuple[list[Any], ...] = (
            list(state.instances.values()),
            list(state.wants.values()),
            list(state.job_runs.values()),
        )
        self._reached = [0, 0, 0]
        self._filed: dict[int, tuple[list[Any], list[Any], list[Any]]] = {}
        self._first = 0

    def changes(self, state: BuildState, first: int, last: int) -> list[Change]:
        """`changes_between(state, first, last)`; `first` at or after the previous call's (the same again: a
        span whose write failed is listed again)."""
        if not self._first <= first <= last <= self.until:
            raise ValueError(f"need {self._first} <= first <= last <= {self.until}, got {first} and {last}")
        self._first = first
        width = self.width
        for index in [key for key in self._filed if (key + 1) * width <= first]:
            del self._filed[index]  # wholly at or before `first`: listed by an earlier call (or jumped over)
        self._reach(state, first, last)
        found: tuple[dict[int, Any], ...] = ({}, {}, {})  # by id(): a record filed under several buckets
        for index in sorted(key for key in self._filed if key * width < last):
            for table, records in enumerate(self._filed[index]):
                found[table].update((id(record), record) for record in records)
        held, reached = state.instances, cast("dict[int, Instance]", found[0])
        instances = [instance for instance in reached.values() if held.get(instance.uuid) is instance]  # not dropped
        return _changes_of_records(state, first, last, instances, found[1].values(), found[2].values())

    def _reach(self, state: BuildState, first: int, last: int) -> None:
        """File the records created by `last` under the buckets of their changes after `first`."""
        seqs: tuple[Callable[[Any], set[int]], ...] = (partial(_instance_seqs, state), _want_seqs, _run_seqs)
        for table, records in enumerate(self._tables):
            at = self._reached[table]
            while at < len(records) and records[at].created_seq <= last:
                record = records[at]
                for index in {(seq - 1) // self.width for seq in seqs[table](record) if first < seq <= self.until}:
                    self._filed.setdefault(index, ([], [], []))[table].append(record)
                at += 1
            self._reached[table] = at


def changes_by_span(state: BuildState, last: int, span: int) -> Iterator[tuple[int, int, list[Change]]]:
    """`(first, end, changes_between(state, first, end))` for the spans (0, span], (span, 2 span], ... up to
    `last`, in order, reading each record once (`ChangeScan`)."""
    scan = ChangeScan(state, last, span)
    for first in range(0, last, span):
        end = min(last, first + span)
        yield first, end, scan.changes(state, first, end)


def _changes_of_records(
    state: BuildState,
    first: int,
    last: int,
    instances: Iterable[Instance],
    wants: Iterable[Want],
    runs: Iterable[JobRun],
) -> list[Change]:
    """The changes in (first, last] of these records (those created after `last` or unchanged since `first`
    have none), sorted by `Change.key`."""
    found: list[Change] = []
    for instance in instances:
        if instance.created_seq <= last and instance.updated_seq > first:
            found.extend(_instance_changes(state, instance, first, last))
    for want in wants:
        if want.created_seq <= last and want.updated_seq > first:
            found.extend(_want_changes(want, first, last))
    for run in runs:
        if run.created_seq <= last and run.updated_seq > first:
            found.extend(_run_changes(run, first, last))
    found.sort(key=_key)
    return found


def _key(change: Change) -> tuple[int, int, str]:
    return change.key


def _instance_seqs(state: BuildState, instance: Instance) -> set[int]:
    """Every seq at which the instance may have changed (its Building ones are its attempts' creations)."""
    seqs = {instance.created_seq, instance.updated_seq}
    seqs.update(at for at, _ in entries(state.instance_histories.get(instance.uuid, 0)))
    runs = state.job_runs
    seqs.update(runs[run_id].created_seq for run_id in instance.attempts)
    return seqs


def _want_seqs(want: Want) -> set[int]:
    seqs = {want.created_seq, want.updated_seq}
    seqs.update(at for at, _ in entries(want.history))
    return seqs


def _run_seqs(run: JobRun) -> set[int]:
    seqs = {run.created_seq, run.updated_seq}
    seqs.update(at for at, _, _ in run_entries(run.history))
    return seqs


def _instance_changes(state: BuildState, instance: Instance, first: int, last: int) -> Iterator[Change]:
    """Its creation (with the canonical move) and state changes in (first, last]."""
    uuid, ref = instance.uuid, instance.ref
    before = instance_state_at(state, instance, first)[0] if instance.created_seq <= first else None
    for seq in sorted(at for at in _instance_seqs(state, instance) if first < at <= last):
        now = instance_state_at(state, instance, seq)[0]
        if seq == instance.created_seq:
            yield Change(seq, INSTANCE_CREATED, uuid, ref, None, now)
            # Every new instance becomes its ref's canonical one (state/fold/transitions.py new_canonical).
            yield Change(seq, CANONICAL_MOVED, ref, ref, from_uuid=instance.previous_uuid, to_uuid=uuid)
        elif now != before:
            yield Change(seq, INSTANCE_STATE, uuid, ref, before, now)
        before = now


def _want_changes(want: Want, first: int, last: int) -> Iterator[Change]:
    before = want_state_at(want, first)[0] if want.created_seq <= first else None
    for seq in sorted(at for at in _want_seqs(want) if first < at <= last):
        now = want_state_at(want, seq)[0]
        if now != before:
            yield Change(seq, WANT_STATE, want.want_id, None, before, now)
        before = now


def run_state_at(run: JobRun, seq: int) -> JobRunState:
    """A job run's state as of `seq` (at or after its creation): past.run_at's, without copying the run."""
    if run.updated_seq <= seq:
        return run.state
    for at, kind, _ in run_entries(run.history):
        if at <= seq:
            return JobRunState(kind)
    return JobRunState.QUEUED


def _run_changes(run: JobRun, first: int, last: int) -> Iterator[Change]:
    before = run_state_at(run, first) if run.created_seq <= first else None
    for seq in sorted(at for at in _run_seqs(run) if first < at <= last):
        now = run_state_at(run, seq)
        if now != before:
            yield Change(seq, JOB_RUN_STATE, run.job_run_id, None, before, now)
        before = now


# ----------------------------------------------------------------- one page


def changes_page(
    state: BuildState, first: int, last: int, limit: int, after: tuple[int, int, str] | None = None
) -> list[Change]:
    """The first `limit` changes in (`first`, `last`] whose key is after `after`: one page of `changes_between`.

    Every record's changes come in key order, and records in creation order, so a page stops looking as
    soon as it is full: at a record whose changes start after the page's last one (its next ones come
    later still), and, for records created after that, at the first (nothing later can come before).
    A page near `first` costs the records created up to its last change, not the whole range's.
    """
    if not 0 <= first <= last <= state.head_seq:
        raise ValueError(f"need 0 <= first <= last <= head ({state.head_seq}), got {first} and {last}")
    floor = (first + 1, -1, "") if after is None or after < (first + 1, -1, "") else after
    page: list[tuple[tuple[int, int, str], Change]] = []
    tables: tuple[tuple[Iterable[Any], Callable[[Any], Iterator[Change]]], ...] = (
        (state.instances.values(), lambda instance: _instance_changes(state, instance, first, last)),
        (state.wants.values(), lambda want: _want_changes(want, first, last)),
        (state.job_runs.values(), lambda run: _run_changes(run, first, last)),
    )
    floor_seq = floor[0]
    for records, changes_of in tables:
        for record in records:
            if record.updated_seq < floor_seq:  # its latest change (a Building too) is before the floor
                continue
            if record.created_seq > last or (len(page) >= limit and record.created_seq > page[-1][0][0]):
                break  # creation order: every later record's changes come after the page's
            for change in changes_of(record):
                key = change.key
                if key <= floor:
                    continue
                if len(page) >= limit and key >= page[-1][0]:
                    break  # its later changes come later still
                insort(page, (key, change))
                del page[limit:]
    return [change for _, change in page]
