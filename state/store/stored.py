"""Reads from the state store alone: a record, a ref's canonical and served instance, or the whole state, now
or as of any seq up to its watermark.

`StoredRecords` answers from the rows of state/store/records.py, no live state: the tables a read of the past
looks up are mappings that read a row the first time a key is asked for, all in one snapshot of the
database, and the record as of N is rebuilt by the very functions that rebuild it from the live state
(state/fold/past.py). It answers as of the rows' own watermark, where they are whole (`open_stored`; None
before they ever were): every record that existed at that seq is in its row as of it or later, and none is
missing that a row names. The changes' watermark may run ahead of it for a while (a projecting server that
began tracking past it writes the spans before, scanned, then its records: state/store/projector.py); reads
are then as of the rows' watermark, never refused.

`stored_state(stored, seq, ...)` is the whole state as of `seq`: a `PastState` over `StoredRecords`, which
holds every table it reads (walking a table reads all its rows, in creation order: by created seq, then key,
where the live state keeps the order records were made within one event), its counts from the store's.
"""

from __future__ import annotations

import threading
from array import array
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cached_property
from itertools import islice
from typing import Any, Final, TypeVar, cast

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from partbuild.state.db import begin_snapshot
from partbuild.state.fold.build_state import BuildState
from partbuild.state.fold.checks import CheckEntry
from partbuild.state.fold.history import CLOCK_MARK_EVERY, HEARTBEAT_PAIR, version_of_key
from partbuild.state.fold.past import PastState, canonical_at, instance_at, run_at, served_at, want_at
from partbuild.state.fold.rechecks import CheckRequest
from partbuild.state.fold.records import Instance, JobRun, Rejection, Want
from partbuild.state.fold.view import StateView
from partbuild.state.log.live import clock_after
from partbuild.state.log.store import EventLog
from partbuild.state.queries.cells import GRID_STATES, CheckPairs, cell_states
from partbuild.state.schema import state_projections
from partbuild.state.store.cells import cells_between, cells_of, checks_of
from partbuild.state.store.changes import PROJECTION as CHANGES
from partbuild.state.store.driver import DriverQuery
from partbuild.state.store.records import (
    CHECK_REQUEST,
    CLOCK,
    CLOCK_CHUNK,
    INSTANCE,
    REF,
    REJECTION,
    RUN,
    RUN_VERSION,
    VERSION,
    WANT,
    Key,
    RecordStore,
    clock_key,
    loads,
    rejection_key,
)
from partbuild.state.store.records import (
    PROJECTION as RECORDS,
)
from partbuild.state.store.run_versions import runs_of_other_versions

CountsReader = Callable[[int], dict[str, dict[str, int]] | None]

V = TypeVar("V")


class _Rows(Mapping[str, V]):
    """One part of one kind of row, by key (a missing row, or a part that is None, is a missing key); walked,
    every row of the kind is read, in the order `StoredRecords.walk` gives."""

    def __init__(self, stored: StoredRecords, kind: int, part: Callable[[Any], V | None]) -> None:
        self._stored = stored
        self._kind = kind
        self._part = part

    def __getitem__(self, key: str) -> V:
        decoded = self._stored.decoded(self._kind, key)
        value = None if decoded is None else self._part(decoded)
        if value is None:
            raise KeyError(key)
        return value

    def __iter__(self) -> Iterator[str]:
        part, decoded = self._part, self._stored.decoded
        return (key for key in self._stored.walk(self._kind) if part(decoded(self._kind, key)) is not None)

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def __reversed__(self) -> Iterator[str]:
        part, decoded = self._part, self._stored.decoded
        return (key for key in reversed(self._stored.walk(self._kind)) if part(decoded(self._kind, key)) is not None)


class _WantsByRef(Mapping[str, list[str]]):
    """`BuildState.wants_by_ref`: ref -> every want naming it, in creation order, from `state_want_refs`."""

    def __init__(self, stored: StoredRecords) -> None:
        self._stored = stored
        self._read: dict[str, list[str]] = {}

    def __getitem__(self, ref: str) -> list[str]:
        found = self._read.get(ref)
        if found is None:
            found = self._read[ref] = self._stored.wants_of_ref(ref)
        if not found:
            raise KeyError(ref)
        return found

    def __iter__(self) -> Iterator[str]:
        return iter(self._stored.refs_wanted())

    def __len__(self) -> int:
        return len(self._stored.refs_wanted())


class _Fields(Mapping[str, tuple[object, ...]]):
    """`BuildState.fields`: kept by instance UUID (in the instance's row) or by ref (in the ref's); read by key."""

    def __init__(self, stored: StoredRecords) -> None:
        self._stored = stored

    def __getitem__(self, key: str) -> tuple[object, ...]:
        # The row read already that has the key answers for it, fields kept or not (a UUID and a ref are never
        # one string); else both rows are read in one statement (the key says not which).
        stored = self._stored
        decoded = None
        for kind in (INSTANCE, REF):
            if stored.has_read(kind, key) and (decoded := stored.decoded(kind, key)) is not None:
                break
        else:
            stored.read_either(INSTANCE, REF, key)
            decoded = stored.decoded(INSTANCE, key)
            if decoded is None:
                decoded = stored.decoded(REF, key)
        if decoded is None or decoded[2] is None:
            raise KeyError(key)
        return decoded[2]

    def __iter__(self) -> Iterator[str]:
        raise TypeError("kept fields are read by key, not walked")

    def __len__(self) -> int:
        raise TypeError("kept fields are read by key, not counted")


_KEPT_CLOCKS: Final = 10_000  # the clocks of this many seqs kept at most (each read as of a seq needs one)

# The kinds whose point read also reads what a read of them goes on to read (`StoredRecords.prefetch`).
_FOLLOWED: Final = frozenset((REF, INSTANCE))


class StoredRecords:
    """The records as of the store's watermark (`head_seq`), read from its rows: see the module docstring."""

    def __init__(self, records: RecordStore, conn: Connection | None, head_seq: int) -> None:
        """The records as of `head_seq`, read in `conn`'s snapshot; with None, in the snapshot each thread
        binds (`bound`): one object, and what it has decoded, serves every read of that watermark."""
        self.head_seq = head_seq
        self._records = records
        self._local = threading.local()
        self._local.conn = conn
        self._decoded: dict[Key, Any] = {}
        self.instances: Mapping[str, Instance] = _Rows(self, INSTANCE, _first)
        self.instance_histories: Mapping[str, int] = _Rows(self, INSTANCE, _second)
        self.wants: Mapping[str, Want] = _Rows(self, WANT, _first)
        self.job_runs: Mapping[str, JobRun] = _Rows(self, RUN, _first)
        self.canonical: Mapping[str, str] = _Rows(self, REF, _first)
        self.first_created: Mapping[str, int] = _Rows(self, REF, _second)
        self.serving: Mapping[str, str] = _Rows(self, REF, _fourth)
        self.fields: Mapping[str, tuple[object, ...]] = _Fields(self)
        self.check_results: Mapping[str, tuple[CheckEntry, ...]] = _Rows(self, INSTANCE, _fourth)
        # What made each want something made (a tick, a firing): read by want; walked newest first (`reversed`).
        self.want_causes: Mapping[str, str] = _Rows(self, WANT, _second)
        self.wants_by_ref: Mapping[str, list[str]] = _WantsByRef(self)
        self.run_heartbeats: Mapping[str, bytearray] = _Beats(self)
        self._walked: dict[int, list[str]] = {}
        self._beats: dict[str, bytearray] = {}
        self._clocks: dict[int, int] = {}  # seq -> the log's clock as of it

    @property
    def _conn(self) -> Connection:
        conn: Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            raise RuntimeError("the stored records are read in a snapshot: bind one first (`bound`)")
        return conn

    @contextmanager
    def bound(self, conn: Connection) -> Iterator[StoredRecords]:
        """Read in `conn`'s snapshot (one of the same watermark) in this thread while the block runs."""
        self._local.conn = conn
        try:
            yield self
        finally:
            self._local.conn = None

    @property
    def decoded_rows(self) -> int:
        """How many rows were read and decoded so far (a cache of them is bounded by its owner)."""
        return len(self._decoded)

    def decoded(self, kind: int, key: str) -> Any:
        """The decoded body of one row (None: there is none), read once per key."""
        found = self._decoded.get((kind, key), self)
        if found is self:
            if kind in _FOLLOWED:  # what a read of it reads next comes in the same go
                self.prefetch(kind, (key,))
                return self._decoded[(kind, key)]
            row = self._records.rows(self._conn, [(kind, key)]).get((kind, key))
            found = self._decoded[(kind, key)] = None if row is None else loads(kind, row[1])
        return found

    def has_read(self, kind: int, key: str) -> bool:
        """Whether the row of this key was read (found or not)."""
        return (kind, key) in self._decoded

    def read_either(self, first: int, second: int, key: str) -> None:
        """Read the rows of `key` of these two kinds, unless read already, in one statement."""
        decoded = self._decoded
        if (first, key) not in decoded or (second, key) not in decoded:
            found = self._records.rows_of_id(self._conn, key, (first, second))
            for kind in (first, second):
                row = found.get((kind, key))
                decoded.setdefault((kind, key), None if row is None else loads(kind, row[1]))

    def prefetch(self, kind: int, keys: Iterable[str]) -> None:
        """Read the rows of these keys not read yet, 500 a statement (a grid's refs, a page's records): the
        lookups that follow find them decoded, where one at a time each would be a statement of its own. A
        ref's canonical instance comes with it; an instance's job runs and its consumers (with their builders)
        with it, as its rebuild as of a seq reads them all (`instance_at`); a job run's heartbeats with it."""
        keys = list(keys)
        missing = self._read(kind, keys)
        if kind == REF:
            uuids = [body[0] for key in missing if (body := self._decoded[key]) is not None and body[0] is not None]
            self.prefetch(INSTANCE, uuids)
        elif kind == INSTANCE:
            self._read_what_instances_name(missing)
        elif kind == RUN:
            runs = list(dict.fromkeys(key for key in keys if key not in self._beats))
            if runs:
                self._beats.update(self._records.beats_of_runs(self._conn, runs))

    def _read(self, kind: int, keys: Iterable[str]) -> list[Key]:
        """Read and decode the rows of these keys not read yet; the keys read now."""
        missing = list(dict.fromkeys((kind, key) for key in keys if (kind, key) not in self._decoded))
        for start in range(0, len(missing), 500):
            chunk = missing[start : start + 500]
            found = self._records.rows(self._conn, chunk)
            for key in chunk:
                row = found.get(key)
                self._decoded[key] = None if row is None else loads(kind, row[1])
        return missing

    def _read_what_instances_name(self, read: list[Key]) -> None:
        """The rows of the instances' consumers, then of their runs and the consumers' builders, two statements
        (or a few, 500 keys a statement) for them all."""
        instances = [body[0] for key in read if (body := self._decoded[key]) is not None]
        consumers = [uuid for instance in instances for uuid in instance.consumers or ()]
        self._read(INSTANCE, consumers)
        builders = (body[0].built_by for uuid in consumers if (body := self._decoded[(INSTANCE, uuid)]) is not None)
        self._read(RUN, [*(run_id for instance in instances for run_id in instance.attempts), *filter(None, builders)])

    def walk(self, kind: int) -> list[str]:
        """The keys of every row of `kind`, each row read and decoded once: records in creation order (created
        seq, then key), the others in key order."""
        walked = self._walked.get(kind)
        if walked is None:
            keys = []
            for key, body in self._records.scan(self._conn, kind):
                self._decoded[(kind, key)] = loads(kind, body)
                keys.append(key)
            if kind in (INSTANCE, WANT, RUN):
                keys.sort(key=lambda key: (self._decoded[(kind, key)][0].created_seq, key))
            else:
                keys.sort()
            walked = self._walked[kind] = keys
        return walked

    # What else a read of the whole state looks up (`PastState`), each walked once per snapshot.

    @cached_property
    def rejections(self) -> list[Rejection]:
        """The rejected events, by seq."""
        found = []
        for key in self.walk(REJECTION):
            rejection = Rejection.__new__(Rejection)
            rejection.__setstate__(self.decoded(REJECTION, key))
            found.append(rejection)
        return found

    @cached_property
    def check_requests(self) -> dict[str, CheckRequest]:
        """Requests to run checks again, in the order they were asked for."""
        requests = {key: cast("CheckRequest", self.decoded(CHECK_REQUEST, key)) for key in self.walk(CHECK_REQUEST)}
        return dict(sorted(requests.items(), key=lambda item: (item[1][1], item[0])))

    @cached_property
    def versions(self) -> dict[str, dict[object, list[tuple[int, bytes]]]]:
        """The small records' versions by attribute and key, each attribute's keys in first-version order."""
        found: dict[str, dict[object, list[tuple[int, bytes]]]] = {}
        walked = sorted(self.walk(VERSION), key=lambda key: (self.decoded(VERSION, key)[0][0], key))
        for row_id in walked:
            name, key = version_of_key(row_id)
            found.setdefault(name, {})[key] = list(self.decoded(VERSION, row_id))
        return found

    def open_at(self, table: str, seq: int) -> list[str]:
        """The job runs or wants (`table`) created by `seq` whose rows say they had not ended by then, in creation
        order, their rows read: every one active as of `seq` (a row ends a record only once it has), and those
        that ended after it (`OpenIndex`, state/fold/past.py)."""
        kind = RUN if table == "job_runs" else WANT
        found = self._records.open_at(self._conn, kind, seq, self.head_seq)
        for key, body in found:
            self._decoded.setdefault((kind, key), loads(kind, body))
        return [key for key, _ in found]

    def wants_of_ref(self, ref: str) -> list[str]:
        """The wants naming `ref`, in creation order (up to the watermark)."""
        return self._records.wants_of_ref(self._conn, ref, self.head_seq)

    @cached_property
    def _refs_wanted(self) -> list[str]:
        return self._records.refs_wanted(self._conn, self.head_seq)

    def refs_wanted(self) -> list[str]:
        """Every ref a want named (up to the watermark), sorted: a walk, for the rare read of them all."""
        return self._refs_wanted

    def runs_created(self, after: int) -> Iterator[JobRun]:
        """The job runs created after seq `after` (up to the watermark), oldest first, in this snapshot."""
        for key, body in self._records.created(self._conn, RUN, after, self.head_seq):
            self._decoded.setdefault((RUN, key), loads(RUN, body))
            yield self._decoded[(RUN, key)][0]

    def runs_of_other_versions(self, job_label: str, current: str, after: int) -> list[JobRun]:
        """The runs of `job_label` created after seq `after` (up to the watermark) by a code version other than
        `current`, oldest first: their version rows' ranges, then their own rows by key."""
        conn = self._conn
        run_ids = runs_of_other_versions(conn, RUN_VERSION, job_label, current, after, self.head_seq)
        self.prefetch(RUN, run_ids)
        return [body[0] for run_id in run_ids if (body := self._decoded[(RUN, run_id)]) is not None]

    def cells_between(self, first: str, last: str) -> Iterator[Sequence[Any]]:
        """(ref, cell, since, created, checks) of the grid cells of the refs from `first` to `last`, in key order."""
        return cells_between(self._conn, first, last)

    def cells_of(self, refs: Sequence[str]) -> dict[str, Sequence[Any]]:
        """ref -> (ref, cell, since, created, checks) of those of `refs` with a grid cell, by key."""
        return cells_of(self._conn, refs)

    def clock_mark(self, seq: int) -> tuple[int, int]:
        """(a seq at or before `seq`, the log's clock then), from the clock's rows: `history.clock_mark`'s."""
        index = (seq + 1) // CLOCK_MARK_EVERY - 1
        if index < 0:
            return 0, 0
        marks = self.decoded(CLOCK, clock_key(index // CLOCK_CHUNK))
        if marks is None or index % CLOCK_CHUNK >= len(marks):
            raise ValueError(f"the state store keeps no clock mark for seq {seq}")
        return (index + 1) * CLOCK_MARK_EVERY - 1, marks[index % CLOCK_CHUNK]

    def beats(self, run_id: str) -> bytearray:
        """A run's heartbeats after its first, packed as the live state packs them (empty: none)."""
        found = self._beats.get(run_id)
        if found is None:
            found = self._beats[run_id] = self._records.beats(self._conn, run_id)
        return found

    def clock_as_of(self, seq: int, log: EventLog) -> int:
        """The log's clock as of `seq`: its mark's, moved by the events the fold applied after it (read once per
        seq: it never changes)."""
        found = self._clocks.get(seq)
        if found is None:
            if len(self._clocks) >= _KEPT_CLOCKS:
                self._clocks.clear()
            mark = self.clock_mark(seq)
            rejected = self.rejections_between(mark[0], seq)
            found = self._clocks[seq] = clock_after(log, mark, seq, rejected.__contains__)
        return found

    def rejections_between(self, first: int, last: int) -> set[int]:
        """The seqs in (first, last] whose events were rejected: one range of their rows' keys."""
        keys = self._records.ids_between(self._conn, REJECTION, rejection_key(first + 1), rejection_key(last))
        return {int(key) for key in keys}

    def _seq(self, seq: int | None) -> int:
        if seq is None:
            return self.head_seq
        if seq > self.head_seq:
            raise ValueError(f"the state store holds the records up to seq {self.head_seq}, not {seq}")
        return seq

    def instance(self, uuid: str, seq: int | None = None) -> Instance | None:
        """The instance as of `seq` (default: the watermark); None if it did not exist then."""
        at = self._seq(seq)
        found = self.instances.get(uuid)
        return None if found is None or found.created_seq > at else instance_at(self, found, at)

    def want(self, want_id: str, seq: int | None = None) -> Want | None:
        """The want as of `seq` (default: the watermark); None if it did not exist then."""
        at = self._seq(seq)
        found = self.wants.get(want_id)
        return None if found is None or found.created_seq > at else want_at(self, found, at)

    def job_run(self, run_id: str, seq: int | None = None) -> JobRun | None:
        """The job run as of `seq` (default: the watermark); None if it did not exist then."""
        at = self._seq(seq)
        found = self.job_runs.get(run_id)
        if found is None or found.created_seq > at:
            return None
        beat = self._records.heartbeat(self._conn, run_id, at)  # the newest by then is all a read needs
        return run_at(found, at, None if beat is None else bytearray(HEARTBEAT_PAIR.pack(*beat)))

    def canonical_uuid(self, ref: str, seq: int | None = None) -> str | None:
        """The UUID of the canonical instance of `ref` as of `seq` (None: it had none)."""
        return canonical_at(self, ref, self._seq(seq))

    def served_uuid(self, ref: str, seq: int | None = None) -> str | None:
        """The UUID of the instance readers got for `ref` as of `seq` (None: nothing Live to read)."""
        return served_at(self, ref, self._seq(seq))


class _Beats(Mapping[str, bytearray]):
    """`BuildState.run_heartbeats`: a run's heartbeats after its first, packed, read by run id."""

    def __init__(self, stored: StoredRecords) -> None:
        self._stored = stored

    def __getitem__(self, run_id: str) -> bytearray:
        packed = self._stored.beats(run_id)
        if not packed:
            raise KeyError(run_id)
        return packed

    def __iter__(self) -> Iterator[str]:
        raise TypeError("heartbeats are read by run, not walked")

    def __len__(self) -> int:
        raise TypeError("heartbeats are read by run, not counted")


def stored_state(stored: StoredRecords, seq: int, log: EventLog, counts: CountsReader) -> PastState:
    """The whole state as of `seq` (at most the store's watermark), read from the rows alone (see the module)."""
    # StoredRecords holds every table a PastState reads of its live state, in the forms it reads them.
    past = PastState(cast(BuildState, stored), seq, lambda: stored.clock_as_of(seq, log))
    past.counts_reader = counts
    return past


def _first(body: Any) -> Any:
    return body[0]


def _second(body: Any) -> Any:
    return body[1]


def _fourth(body: Any) -> Any:
    return body[3]


# The two watermarks a read needs, in one statement on the driver's cursor.
_WATERMARKS: Final = DriverQuery(
    sa.select(state_projections.c.name, state_projections.c.seq).where(
        state_projections.c.name.in_(
            [sa.bindparam(name, type_=state_projections.c.name.type) for name in ("changes", "records")]
        )
    )
)


@contextmanager
def open_stored(records: RecordStore, kept: StoredRecords | None = None) -> Iterator[StoredRecords | None]:
    """The store's records in one snapshot of the database, as of the rows' watermark (where they are whole; the
    changes' may be ahead of it), or None while they never were (being written for the first time). `kept`:
    records of an earlier read, used again (with what they decoded) when the watermark is still theirs."""
    with begin_snapshot(records.engine) as conn:
        marks: dict[str, int] = {
            name: seq for name, seq in _WATERMARKS.all(conn, {"changes": CHANGES, "records": RECORDS})
        }
        head = min(marks.get(CHANGES, 0), marks.get(RECORDS, 0))
        if not head:
            yield None
        elif kept is not None and kept.head_seq == head:
            with kept.bound(conn):
                yield kept
        else:
            yield StoredRecords(records, conn, head)


def prefetched(state: StateView, kind: int, keys: Iterable[str], chunk: int = 100) -> Iterable[str]:
    """`keys`, as they come; when `state` reads the store's rows (a read replica's), the rows of each `chunk`
    of them are read in one statement before they are yielded (`StoredRecords.prefetch`). Any other state gets
    `keys` themselves: nothing is added to its loops."""
    stored = stored_of(state)
    return keys if stored is None else _in_batches(stored, kind, keys, chunk)


def grid_cells(state: StateView, refs: Sequence[str]) -> list[tuple[str, str]]:
    """`cell_states(state, refs)`, `refs` sorted. When `state` reads the store's rows, a ref's cell comes from its
    row in `state_cells`, read by one range scan, where that row says it held at the state's seq (from its
    `since` on), none where the ref's first instance came after it; only the rest are looked up in their
    records' rows (as of an early seq: the refs whose cell changed since)."""
    stored = stored_of(state)
    if stored is None or not refs:
        return cell_states(state, refs)
    at_watermark = state.head_seq == stored.head_seq  # no row then: no canonical instance, no cell
    rows = (
        (ref, cast("tuple[int, int, int]", tuple(row[1:4])) if row else None) for ref, row in _cell_rows(stored, refs)
    )
    return _as_of(state, ((ref, row) for ref, row in rows if row is not None or not at_watermark))


def held_cells(state: StateView, refs: Sequence[str]) -> HeldCells:
    """The cells of `refs` (sorted) at the store's watermark, from its cells (`state`: a read of the store's rows
    at its watermark), with the seq since which each has held and its ref's created seq (`cells_as_of`)."""
    stored = stored_of(state)
    assert stored is not None and state.head_seq == stored.head_seq, "the store's cells at its watermark"
    held = HeldCells([], array("q"), array("q"), [])
    names = GRID_STATES
    texts: dict[str, str] = {}  # one string per distinct checks text: most refs of a job share a few
    for ref, row in _cell_rows(stored, refs) if refs else ():
        if row is not None:
            held.cells.append((ref, names[row[1]]))
            held.since.append(row[2])
            held.created.append(row[3])
            held.checks.append(None if row[4] is None else texts.setdefault(row[4], row[4]))
    return held


def cells_as_of(state: StateView, held: HeldCells, low: int, high: int) -> list[tuple[str, str]]:
    """The cells of `held.cells[low:high]` as of `state`'s seq (at or before the watermark they were held at):
    `grid_cells`, with the rows read once per watermark, not per request."""
    since, created = held.since, held.created
    return _as_of(
        state, ((ref, (cell, since[i], created[i])) for i, (ref, cell) in enumerate(held.cells[low:high], low))
    )


@dataclass(frozen=True)
class HeldCells:
    """Cells at a watermark, with the seq since which each (and its checks) has held, its ref's created seq and
    the latest checks of the instance its readers get, as its row holds them (JSON pairs; aligned)."""

    cells: list[tuple[str, str]]
    since: array[int]
    created: array[int]
    checks: list[str | None]


def held_checks(
    state: StateView, held: HeldCells, low: int, cells: Sequence[tuple[str, str]], name: str | None, result: str | None
) -> list[bool | None]:
    """`stored_checks` of `cells` (those of `cells_as_of(state, held, low, ...)`), from the checks `held` keeps:
    no statement; each distinct checks text is read once."""
    seq, since, texts, refs = state.head_seq, held.since, held.checks, held.cells
    said: dict[str | None, bool] = {}
    verdicts: list[bool | None] = []
    index = low
    for ref, _ in cells:
        while refs[index][0] != ref:  # one created after the seq asked: not among `cells`
            index += 1
        if since[index] > seq:
            verdicts.append(None)
            continue
        text = texts[index]
        if (verdict := said.get(text)) is None:
            said[text] = verdict = _checked(checks_of(text), name, result)
        verdicts.append(verdict)
    return verdicts


def _checked(pairs: CheckPairs, name: str | None, result: str | None) -> bool:
    """Whether the pairs hold a check of that name (any: None) with that result (any: None)."""
    return any((name is None or n == name) and (result is None or r == result) for n, r in pairs)


def _as_of(state: StateView, rows: Iterable[tuple[str, tuple[Any, int, int] | None]]) -> list[tuple[str, str]]:
    """The cells as of `state`'s seq of refs with their (cell, since, created) at a later watermark (a cell as a
    GRID_STATES name or number; None: no row, look it up): the cell where it held then, none where the ref
    came after, the rest looked up in their records' rows (a batch)."""
    seq, names = state.head_seq, GRID_STATES
    cells: list[tuple[str, str | None]] = []
    slow: list[str] = []
    for ref, row in rows:
        if row is not None:
            cell, since, created = row
            if since <= seq:
                cells.append((ref, cell if isinstance(cell, str) else names[cell]))
                continue
            if created > seq:
                continue
        slow.append(ref)
        cells.append((ref, None))
    if not slow:
        return cast("list[tuple[str, str]]", cells)
    looked_up = dict(cell_states(state, prefetched(state, REF, slow, chunk=500)))
    return [(ref, found) for ref, name in cells if (found := name or looked_up.get(ref)) is not None]


def stored_checks(
    state: StateView, cells: Sequence[tuple[str, str]], name: str | None, result: str | None
) -> list[bool | None] | None:
    """Whether the latest checks of the instance readers of each cell's ref get have a check of that name (any:
    None) with that result (any: None), from the store's cells where their rows say they held at the state's
    seq; None where they do not (look that one up), and None for them all when `state` does not read the
    store's rows (its records are in memory). `cells` sorted by ref."""
    stored = stored_of(state)
    if stored is None:
        return None
    seq, verdicts = state.head_seq, list[bool | None]()
    for _, row in _cell_rows(stored, [ref for ref, _ in cells]) if cells else ():
        if row is None or row[2] > seq:
            verdicts.append(None)
            continue
        verdicts.append(_checked(checks_of(row[4]), name, result))
    return verdicts


def _cell_rows(stored: StoredRecords, refs: Sequence[str]) -> Iterator[tuple[str, Sequence[Any] | None]]:
    """Each of `refs` (sorted) with its row of the store's cells (None: it has none), by one range scan."""
    rows = stored.cells_between(refs[0], refs[-1])
    row = next(rows, None)
    for ref in refs:
        while row is not None and row[0] < ref:  # another node's ref in the range
            row = next(rows, None)
        yield ref, row if row is not None and row[0] == ref else None


def read_ahead(state: StateView, kind: int, keys: Iterable[str]) -> None:
    """When `state` reads the store's rows, read those of these keys now, 500 a statement (a page about to look
    each one up); any other state: nothing (its records are in memory)."""
    stored = stored_of(state)
    if stored is not None:
        stored.prefetch(kind, keys)


def read_from_store(state: StateView) -> bool:
    """Whether `state` reads the store's rows (a read replica's), not a live state's memory."""
    return stored_of(state) is not None


def stored_of(state: StateView) -> StoredRecords | None:
    """The store's rows `state` reads (a read replica's), or None: it reads a live state's memory."""
    stored = state.live if isinstance(state, PastState) else None
    return stored if isinstance(stored, StoredRecords) else None


def _in_batches(stored: StoredRecords, kind: int, keys: Iterable[str], chunk: int) -> Iterator[str]:
    it = iter(keys)
    while batch := list(islice(it, chunk)):
        stored.prefetch(kind, batch)
        yield from batch
