"""What the live state keeps so that a read as of any seq it has folded needs no replay.

Four kinds of history, each as small as the question it answers:

- **State changes** of instances, wants and job runs, packed into one Python int
  per record (`Want.history`, `JobRun.history`, and for instances
  `BuildState.instance_histories` by UUID): each change before the latest (which
  is the record's own `state` at `updated_seq`) is a fixed-width entry
  `seq << 4 | state` (a job run's also carries the event time), the newest in
  the low bits. No object per change, and nothing for a record changed once: an
  observed instance (Live when created) and an instance built once (its
  creation and its Building are implied) keep nothing, which is most instances,
  so theirs live in a side dict rather than a slot every instance would pay for.
  `entries()` walks them newest first, so "the state as of N" stops at the
  first entry at or before N.
- **Field changes** (`BuildState.fields`): the few fields that can change again
  after they were set and cannot be told from the state changes (an instance's
  `note`; the refs a wait began with, from which what it still waits for as of
  any seq follows) keep each value they took with its seq, per record, flat
  `(seq, field, value, ...)`. Most records never have one.
- **Versions of the small records** (`BuildState.versions`): groups, bucket
  layouts and rotations, sources and subscriptions are few and change seldom;
  every change keeps a pickled copy with its seq, found again by bisection.

- **Dropped instances' counts** (`BuildState.dropped_changes`): retention drops an
  instance's history with it; what it added to the counts by state at each seq it
  changed stays (`keep_dropped`, 8 bytes a change), so counts as of an earlier seq
  still count it.
- **Heartbeats** (`BuildState.run_heartbeats`): a job run's heartbeats after the
  first, (seq, ms) pairs packed in place, searched for a read as of a seq.

Everything else a past read needs follows from these and from what never
changes once set (an instance's ref, inputs and location; a want's refs; a
run's instances): see state/fold/past.py. Histories are derived from the log,
not new facts: the digest leaves them out, snapshots carry them.
"""

from __future__ import annotations

import pickle
import struct
from bisect import bisect_right
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import quote, unquote

from partbuild.state.fold.records import Instance, InstanceState, JobRun, Want

if TYPE_CHECKING:
    from partbuild.state.fold.build_state import BuildState


class RecordTables(Protocol):
    """What a read of one record as of a seq looks up (state/fold/past.py): the live state's tables, or the
    state store's rows of them (state/store/stored.py)."""

    @property
    def instances(self) -> Mapping[str, Instance]: ...
    @property
    def wants(self) -> Mapping[str, Want]: ...
    @property
    def job_runs(self) -> Mapping[str, JobRun]: ...
    @property
    def canonical(self) -> Mapping[str, str]: ...
    @property
    def first_created(self) -> Mapping[str, int]: ...
    @property
    def fields(self) -> Mapping[str, tuple[object, ...]]: ...
    @property
    def instance_histories(self) -> Mapping[str, int]: ...


# An entry of an instance's or a want's history: seq << 4 | state (states fit in 4 bits).
STATE_BITS = 4
STATE_MASK = (1 << STATE_BITS) - 1
SEQ_BITS = 44  # seqs up to 17.6e12: far beyond any log
ENTRY_BITS = STATE_BITS + SEQ_BITS
ENTRY_MASK = (1 << ENTRY_BITS) - 1
# A job run's entry adds the event time (ms since epoch, 44 bits: until the year 2527) above it.
MS_BITS = 44
RUN_ENTRY_BITS = ENTRY_BITS + MS_BITS
RUN_ENTRY_MASK = (1 << RUN_ENTRY_BITS) - 1
MS_MASK = (1 << MS_BITS) - 1
# A job run's heartbeats after the first (which made it Running: a state change) are not entries of its
# history: each is a (seq, ms) pair appended to `BuildState.run_heartbeats[run id]`, a bytearray read in
# place. A packed-int history grew by a copy of itself per heartbeat, and a read walked every one: a 24 h
# run at the default 5 s (17,280 heartbeats) took 236 ms to read as of a seq.
HEARTBEAT_PAIR = struct.Struct("<qq")


def entry(seq: int, state: int) -> int:
    """One state change, packed."""
    return seq << STATE_BITS | state


def entries(history: int) -> Iterator[tuple[int, int]]:
    """(seq, state) of every entry of an instance's or want's history, newest first."""
    while history:
        packed = history & ENTRY_MASK
        yield packed >> STATE_BITS, packed & STATE_MASK
        history >>= ENTRY_BITS


def run_entry(seq: int, state: int, ms: int) -> int:
    """One state change of a job run, with the event's time."""
    return (ms & MS_MASK) << ENTRY_BITS | seq << STATE_BITS | state


def run_entries(history: int) -> Iterator[tuple[int, int, int]]:
    """(seq, state, event ms) of every entry of a job run's history, newest first."""
    while history:
        packed = history & RUN_ENTRY_MASK
        yield (packed & ENTRY_MASK) >> STATE_BITS, packed & STATE_MASK, packed >> ENTRY_BITS
        history >>= RUN_ENTRY_BITS


def heartbeat_at(beats: bytearray | None, seq: int) -> tuple[int, int]:
    """(seq, ms) of the newest heartbeat in `beats` (a run's `run_heartbeats`) at or before `seq`; (0, 0): none.

    A binary search over the pairs in place: O(log heartbeats), nothing copied."""
    if not beats:
        return 0, 0
    pairs = memoryview(beats).cast("q")
    index = bisect_right(pairs[0::2], seq) - 1
    return (pairs[2 * index], pairs[2 * index + 1]) if index >= 0 else (0, 0)


def instance_state_at(state: RecordTables, instance: Instance, seq: int) -> tuple[InstanceState, int]:
    """(state, seq it was entered at) of a held instance as of `seq` (at or after its creation)."""
    if instance.updated_seq <= seq:
        return instance.state, instance.updated_seq
    best_state, best_seq = InstanceState.MISSING, instance.created_seq
    for at, old in entries(state.instance_histories.get(instance.uuid, 0)):
        if at <= seq:
            best_state, best_seq = InstanceState(old), at
            break
    runs = state.job_runs
    for run_id in instance.attempts:  # a job run's buffer made it Building at the run's created seq
        created = runs[run_id].created_seq
        if best_seq < created <= seq:
            best_state, best_seq = InstanceState.BUILDING, created
    return best_state, best_seq


def keep_dropped(state: BuildState, instance: Instance, seq: int) -> None:
    """Retention drops `instance` at `seq`: keep what it added to the counts by state at each seq it changed
    (`BuildState.dropped_changes`: +1 or -1 to a state at a seq, 8 bytes each), so counts as of an earlier seq
    still count it. A dropped instance keeps 3 or 4 of them (about 30 bytes) of the hundreds it held."""
    runs = state.job_runs
    seqs = {instance.created_seq, instance.updated_seq}
    seqs.update(at for at, _ in entries(state.instance_histories.get(instance.uuid, 0)))
    seqs.update(runs[run_id].created_seq for run_id in instance.attempts)
    changes = state.dropped_changes
    before: int | None = None
    for at in sorted(seqs):
        now = instance_state_at(state, instance, at)[0]
        if now != before:
            _add_delta(changes, at, now, 1)
            if before is not None:
                _add_delta(changes, at, before, -1)
            before = now
    _add_delta(changes, seq, instance.state, -1)


_DELTA = struct.Struct("<q")  # seq << 5 | state << 1 | (1 if -1 else 0): instance states fit in 4 bits


def _add_delta(changes: bytearray, seq: int, state: int, delta: int) -> None:
    changes += _DELTA.pack(seq << 5 | state << 1 | (delta < 0))


def dropped_deltas(state: BuildState, seq: int) -> dict[int, int]:
    """What the instances retention dropped add to the counts by state as of `seq` (state -> delta)."""
    totals: dict[int, int] = {}
    for code in memoryview(state.dropped_changes).cast("q"):
        if code >> 5 <= seq:
            kind = code >> 1 & 15
            totals[kind] = totals.get(kind, 0) + (-1 if code & 1 else 1)
    return totals


# ----------------------------------------------------------------- field changes


def keep_field(state: BuildState, key: str, seq: int, field: str, value: Any) -> None:
    """Keep that `field` of record `key` took `value` at `seq` (share `value` between records where it can)."""
    fields = state.fields
    fields[key] = (*fields.get(key, ()), seq, field, value)
    touched = state.touched
    if touched is not None:  # kept by ref ("serving") or by instance UUID
        (touched.refs if field == "serving" else touched.instances).add(key)


def field_at(state: RecordTables, key: str, field: str, seq: int) -> tuple[Any, int] | None:
    """(the value `field` of record `key` took last at or before `seq`, when): None if it took none."""
    kept: tuple[Any, ...] | None = state.fields.get(key)  # (seq, field, value) flattened, oldest first
    if kept:
        for index in range(len(kept) - 3, -1, -3):
            if kept[index] <= seq and kept[index + 1] == field:
                return kept[index + 2], kept[index]
    return None


# ----------------------------------------------------------------- versions of small records

_EVERY = object()  # keep_versions' default: every key of the attributes may have changed

# BuildState attributes whose values are versioned whole (a dict of name -> small record or value).
VERSIONED = ("groups", "bucket_layouts", "bucket_runs", "sources", "subscriptions", "schedules")


def keep_versions(state: BuildState, seq: int, names: tuple[str, ...], only: Any = _EVERY) -> None:
    """Keep a copy of every value of the named attributes that differs from its newest version.

    `only`: the one key that may have changed (its record alone is compared), instead of every key.
    """
    for name in names:
        kept = state.versions.setdefault(name, {})
        records = getattr(state, name)
        for key in records if only is _EVERY else (only,) if only in records else ():
            copy = pickle.dumps(records[key], protocol=pickle.HIGHEST_PROTOCOL)
            versions = kept.get(key)
            if versions is None:
                kept[key] = [(seq, copy)]
            elif versions[-1][1] != copy and pickle.loads(versions[-1][1]) != records[key]:
                # (equal values may pickle apart: an equal set of strings iterates in another order)
                versions.append((seq, copy))
            else:
                continue
            touch_version(state, name, key)


def touch_version(state: BuildState, name: str, key: object) -> None:
    """Track that record `key` of attribute `name` kept a new version (for the state store's row of them)."""
    if state.touched is not None:
        state.touched.versions.add(version_key(name, key))


def version_key(name: str, key: object) -> str:
    """The id of the state store's row of a small record's versions: `name/key`, the key percent-encoded (a
    reaction's holds a NUL, which PostgreSQL text cannot)."""
    return f"{name}/{quote(str(key), safe='')}"


def version_of_key(row_id: str) -> tuple[str, str]:
    """(attribute name, record key) of a versions row's id."""
    name, _, key = row_id.partition("/")
    return name, unquote(key)


def versioned(
    apply: Callable[..., None], names: tuple[str, ...], key_of: Callable[[Any], Any] | None = None
) -> Callable[..., None]:
    """`apply`, then keep the versions of the named attributes it may have changed (of `key_of(event)` only)."""

    def apply_and_keep(state: BuildState, seq: int, plan: Any, event: Any) -> None:
        apply(state, seq, plan, event)
        keep_versions(state, seq, names, _EVERY if key_of is None else key_of(event))

    apply_and_keep.__doc__ = apply.__doc__
    return apply_and_keep


def versions_at(state: BuildState, name: str, seq: int) -> dict[Any, Any]:
    """The attribute `name` (one of VERSIONED) as it was as of `seq`: fresh copies, in first-creation order."""
    found = {}
    for key, versions in state.versions.get(name, {}).items():
        index = bisect_right(versions, seq, key=_seq_of) - 1
        if index >= 0:
            found[key] = pickle.loads(versions[index][1])
    return found


def _seq_of(version: tuple[int, bytes]) -> int:
    return version[0]


# ----------------------------------------------------------------- the clock

CLOCK_MARK_EVERY = 64  # the clock is kept every this many seqs; a past clock reads the few events after the mark


def mark_clock(state: BuildState, seq: int) -> None:
    """Before folding `seq`: keep the clock as of each multiple of CLOCK_MARK_EVERY (minus one) passed."""
    marks = state.clock_marks
    while len(marks) < seq // CLOCK_MARK_EVERY:
        marks.append(state.clock_ms)
    state.next_clock_mark = (len(marks) + 1) * CLOCK_MARK_EVERY


def clock_mark(state: BuildState, seq: int) -> tuple[int, int]:
    """(a seq at or before `seq`, the clock as of it): a past clock is this and the applied events after it."""
    index = min((seq + 1) // CLOCK_MARK_EVERY, len(state.clock_marks)) - 1
    if index < 0:
        return 0, 0
    return (index + 1) * CLOCK_MARK_EVERY - 1, state.clock_marks[index]


def dropped_deltas_between(state: BuildState, first: int, last: int, start: int = 0) -> list[tuple[int, int, int]]:
    """(seq, state, +1 or -1) of what dropped instances added to the counts by state in (`first`, `last`].

    `start`: a byte offset into `dropped_changes` before which no delta falls in the range (those of
    instances dropped before `first`: each delta's seq is at or before its instance's drop).
    """
    found = []
    for code in memoryview(state.dropped_changes)[start:].cast("q"):
        seq = code >> 5
        if first < seq <= last:
            found.append((seq, code >> 1 & 15, -1 if code & 1 else 1))
    return found
