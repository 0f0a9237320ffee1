"""The records of the live state in the `state_records` table: a point read, now or as of a seq, is one row.

A row holds a record as the live state held it at the row's `seq` (the head when it was written), with
what a read of the past needs to tell it as of any earlier seq: an instance with its packed state
changes and kept fields, a want (without the fold's tally), a job run, a ref with its canonical pointer,
what it serves and its kept `serving` changes (state/fold/history.py); a run's heartbeats after the first
are rows of their own (`state_heartbeats`), each written once, so a long run's row is not rewritten with all
of them at each heartbeat. A read as of N rebuilds the record from its row with the same functions that
rebuild it from the live state (state/fold/past.py; state/store/stored.py), so the two cannot disagree.

Rows are written two ways, both keeping the newer of two rows of one record (`write_newer_rows`):
- A projector pass in which the fold tracked every record it changed (`Touched`) writes the rows of those
  records in the transaction that moves the changes' watermark, and moves the `records` watermark with it
  when the rows are known whole: the watermark was at the pass's first seq (every earlier change is in),
  or this process wrote every record it held since it began tracking (`dump`).
- `dump`: every record of the live state, a chunk at a time, without a watermark: what a process does
  once when it finds the `records` watermark behind its own (a new table, a process that was not
  projecting while another one moved the watermark).
So at the watermark W every record that existed is in its row as of W or later (a later row serves a read
of the past as well as the live record does), and no dropped record has one. The rows have a format (the
records' fields, `ENCODING`). The newest format owns them: a process of an older one writes no rows and
reads none (its reads of the past use its memory), and a process of a newer one clears them and writes them
all again. So two versions of partbuild projecting one database during a rolling upgrade do not take the
rows from each other in turn, each writing every record again.
"""

from __future__ import annotations

import hashlib
import io
import pickle
from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from enum import IntEnum
from typing import TYPE_CHECKING, Any, Final

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from partbuild.state.db import begin_write, delete_keys, insert_ignoring_conflicts, write_newer_rows
from partbuild.state.fold.history import CLOCK_MARK_EVERY, HEARTBEAT_PAIR, version_key, version_of_key
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
from partbuild.state.log.snapshot import SnapshotError, StateUnpickler
from partbuild.state.schema import state_cells, state_heartbeats, state_projections, state_want_refs
from partbuild.state.schema import state_records as table
from partbuild.state.store.cells import CellRow, cell_row, write_cells
from partbuild.state.store.driver import DriverQuery, KeyedQueries
from partbuild.state.store.row_versions import clear_floor, keep_versions, lock_for_rows, prune_versions
from partbuild.state.store.run_versions import run_of_key, run_version_keys, version_value

if TYPE_CHECKING:
    from partbuild.state.fold.build_state import BuildState
    from partbuild.state.fold.touched import Touched


# Bump when what a row holds changes: `row_value`, or the fields of a record (the fingerprint, pinned by
# tests/state/store/test_record_store.py, says when). A higher number is a newer format, which owns the rows.
ENCODING: Final = 9  # 4: an instance's check results and a want's cause in their rows; versions, check requests,
# rejections and the clock's marks in rows of their own; 5: a record's created seq in a column of its own; 6: the
# seq a run or a want ended at, too; 7: the wants by ref in rows of their own (`state_want_refs`); 8: each ref's
# grid cell (`state_cells`); 9: each job run's code version in a row of its own (state/store/run_versions.py)


def _fingerprint() -> str:
    """The fields of the records pickled in a row, in order (a body holds their values)."""
    layout = repr([ENCODING, *((cls.__name__, cls.__slots__) for cls in (Instance, Want, JobRun))])
    return hashlib.sha256(layout.encode()).hexdigest()[:12]


FINGERPRINT: Final = _fingerprint()
# The `records` watermark's row, by format (`records:<ENCODING>:<FINGERPRINT>`): rows of another format are
# not read; a process of a newer one clears them and writes every record again (`dump`) before it moves
# its watermark (`take_rows`). The first rows' names carried no number: theirs was 3.
PROJECTION: Final = f"records:{ENCODING}:{FINGERPRINT}"
_UNNUMBERED_ENCODING = 3
# The `kind` column. Besides the records and refs: a small record's versions (groups, bucket layouts, sources,
# subscriptions, schedules, reactions: `name/key`), a request to run checks again, a rejected event (its seq,
# zero-padded: key order is seq order), the clock's marks (CLOCK_CHUNK of them a row, by chunk) and each job
# run's code version (state/store/run_versions.py).
INSTANCE, WANT, RUN, REF, VERSION, CHECK_REQUEST, REJECTION, CLOCK, RUN_VERSION = range(9)
KIND_NAMES: Final = (
    "instance",
    "want",
    "job run",
    "ref",
    "version",
    "check request",
    "rejection",
    "clock",
    "job run's code version",
)
CLOCK_CHUNK: Final = 1024
Row = tuple[int, str, int, bytes, int | None, int | None]  # kind, id, seq, body, created, closed
Key = tuple[int, str]


# ----------------------------------------------------------------- encoding

# A record is pickled as the tuple of its fields (`__getstate__`) with its state enum as a plain int: no class
# names in each row (a third of an instance's row), and rows decode into fresh records (`_record`).
_RecordClass = type[Instance] | type[Want] | type[JobRun]
_CLASSES: Final[dict[int, tuple[_RecordClass, type[IntEnum]]]] = {
    0: (Instance, InstanceState),
    1: (Want, WantState),
    2: (JobRun, JobRunState),
}
_STATE_AT: Final = {cls: cls.__slots__.index("state") for cls, _ in _CLASSES.values()}


def _fields(record: Instance | Want | JobRun) -> tuple[Any, ...]:
    values = record.__getstate__()
    at = _STATE_AT[type(record)]
    return (*values[:at], int(values[at]), *values[at + 1 :])


def _record(kind: int, values: tuple[Any, ...]) -> Any:
    cls, states = _CLASSES[kind]
    record: Any = cls.__new__(cls)
    record.__setstate__(values)
    record.state = states(record.state)
    return record


def _dumps(value: object) -> bytes:
    return pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)


def decoded(body: bytes) -> tuple[Any, ...]:
    """A row's body as `row_value` gave it, by an unpickler that builds nothing but the state's own classes."""
    value = StateUnpickler(io.BytesIO(body)).load()
    if not isinstance(value, tuple):
        raise SnapshotError(f"a state store row holds a {type(value).__name__}, not a tuple")
    return value


def comparable(kind: int, value: tuple[Any, ...] | None) -> tuple[Any, ...] | None:
    """A row's value (`decoded`, or `row_value`'s) as two processes' are compared: a small record's versions
    unpickled (each is kept pickled, and two processes pickle an equal set of strings in different orders:
    their hash seeds differ)."""
    if kind != VERSION or value is None:
        return value
    return tuple((seq, StateUnpickler(io.BytesIO(copy)).load()) for seq, copy in value)


def loads(kind: int, body: bytes) -> Any:
    """A row's body, decoded: an instance row is (Instance, packed history, kept fields, check results), a want
    row (Want, cause), a run row (JobRun,), a ref row (canonical UUID, first created seq, kept fields, served
    UUID), each None where absent; the other kinds' rows are `row_value`'s tuples as they are."""
    value = decoded(body)
    if kind in (INSTANCE, WANT, RUN):
        return (_record(kind, value[0]), *value[1:])
    return value


def row_value(state: BuildState, kind: int, key: str) -> tuple[Any, ...] | None:
    """What one record's row holds, as `state` holds it (None: it holds no such record)."""
    return _VALUES[kind](state, key)


def _instance_value(state: BuildState, key: str) -> tuple[Any, ...] | None:
    instance = state.instances.get(key)
    if instance is None:
        return None
    history, fields = state.instance_histories.get(key, 0), state.fields.get(key)
    return (_fields(instance), history, fields, state.check_results.get(key))


def _want_value(state: BuildState, key: str) -> tuple[Any, ...] | None:
    want = state.wants.get(key)
    if want is None:
        return None
    values = _fields(want)
    if want.tally is not None:  # the fold's bookkeeping of an active want: no read needs it
        at = _TALLY_AT
        values = (*values[:at], None, *values[at + 1 :])
    return (values, state.want_causes.get(key))


def _run_value(state: BuildState, key: str) -> tuple[Any, ...] | None:
    run = state.job_runs.get(key)
    return None if run is None else (_fields(run),)


def _ref_value(state: BuildState, key: str) -> tuple[Any, ...] | None:
    canonical = state.canonical.get(key)
    first, fields, serving = state.first_created.get(key), state.fields.get(key), state.serving.get(key)
    if canonical is None and first is None and fields is None:
        return None
    return (canonical, first, fields, serving)


def _version_value(state: BuildState, key: str) -> tuple[Any, ...] | None:
    """Every version of one small record: (seq, pickled copy), oldest first (None once deleted, for some)."""
    name, item = version_of_key(key)
    versions = state.versions.get(name, {}).get(item)
    return None if versions is None else tuple(versions)


def _check_request_value(state: BuildState, key: str) -> tuple[Any, ...] | None:
    request = state.check_requests.get(key)
    return None if request is None else tuple(request)


def _rejection_value(state: BuildState, key: str) -> tuple[Any, ...] | None:
    if not (key.isascii() and key.isdigit()):  # no id this kind is written with (a tampered row, for the audit)
        return None
    rejections, seq = state.rejections, int(key)
    index = bisect_left(rejections, seq, key=_rejection_seq)
    if index == len(rejections) or rejections[index].seq != seq:
        return None
    return rejections[index].__getstate__()


def _rejection_seq(rejection: Rejection) -> int:
    return rejection.seq


def _clock_value(state: BuildState, key: str) -> tuple[Any, ...] | None:
    if not (key.isascii() and key.isdigit()):
        return None
    start = int(key) * CLOCK_CHUNK
    marks = state.clock_marks[start : start + CLOCK_CHUNK]
    return tuple(marks) if marks else None


_VALUES: Final = (
    _instance_value,
    _want_value,
    _run_value,
    _ref_value,
    _version_value,
    _check_request_value,
    _rejection_value,
    _clock_value,
    version_value,
)


def rejection_key(seq: int) -> str:
    return f"{seq:012d}"


def clock_key(chunk: int) -> str:
    return f"{chunk:09d}"


def body_of(state: BuildState, kind: int, key: str) -> bytes | None:
    """The body of one record's row as `state` holds it (None: it holds no such record)."""
    value = row_value(state, kind, key)
    return None if value is None else _dumps(value)


_TALLY_AT: Final = Want.__slots__.index("tally")


Beat = tuple[str, int, int]  # a heartbeat's row: run id, seq, ms
WantRef = tuple[str, int, str]  # a row of the wants by ref: ref, the want's created seq, want id


@dataclass(frozen=True)
class Rows:
    """What to write of some records: their rows, the keys of those the state no longer holds, heartbeats."""

    rows: Sequence[Row]
    gone: Sequence[Key]
    beats: Sequence[Beat]
    want_refs: Sequence[WantRef] = ()
    cells: Sequence[CellRow] = ()  # the grid cells of the refs whose rows or instances' rows these are
    cells_gone: Sequence[str] = ()  # refs among those with no cell
    at: int = 0  # the head the rows are as of: the seq a deletion of `gone` is at


def rows_of(
    state: BuildState, keys: Iterable[Key], beats_after: int = 0, *, instance_cells: bool = True, cells: bool = True
) -> Rows:
    """The rows of these records as `state` holds them at its head, the keys of those it does not hold, and
    the runs' heartbeats after seq `beats_after` (those before are written already). The cells: of the refs
    among the keys, and of the instances' refs unless `instance_cells` is False (a dump: every ref with a cell
    has a canonical pointer, so a key of its own in `all_keys`, and is written with it, once); none without
    `cells` (a store no grid reads: a bounded replay's scratch rows)."""
    rows: list[Row] = []
    gone: list[Key] = []
    beats: list[Beat] = []
    want_refs: list[WantRef] = []
    cell_refs: dict[str, None] = {}  # a ref's cell changes with its row and with its instances' (state/store/cells.py)
    seq = state.head_seq
    for kind, key in keys:
        if kind == REF and cells:
            cell_refs[key] = None
        body = body_of(state, kind, key)
        if body is None:
            gone.append((kind, key))
            continue
        rows.append((kind, key, seq, body, created_of(state, kind, key), closed_of(state, kind, key)))
        if kind == RUN:
            beats.extend(beats_of(state, key, beats_after))
        elif kind == WANT:
            want_refs.extend(want_refs_of(state.wants[key]))
        elif kind == INSTANCE and instance_cells and cells:
            cell_refs[state.instances[key].ref] = None
    cell_rows, cells_gone = _cells_of(state, cell_refs)
    return Rows(rows, gone, beats, want_refs, cell_rows, cells_gone, seq)


def _cells_of(state: BuildState, refs: Iterable[str]) -> tuple[list[CellRow], list[str]]:
    """The rows of these refs' cells, and the refs among them with none."""
    cells: list[CellRow] = []
    gone: list[str] = []
    for ref in refs:
        row = cell_row(state, ref, created_of(state, REF, ref) or 0)
        if row is None:
            gone.append(ref)
        else:
            cells.append(row)
    return cells, gone


def want_refs_of(want: Want) -> Iterator[WantRef]:
    """The rows of the wants by ref that `want` makes: one per ref it names."""
    return ((ref, want.created_seq, want.want_id) for ref in dict.fromkeys(want.refs))


def created_of(state: BuildState, kind: int, key: str) -> int | None:
    """The `created` column of a record's row: its created seq; a ref's, its first instance's (following
    `previous_uuid`: where retention dropped it, the seq the fold kept, else 0, a lower bound)."""
    if kind in (INSTANCE, WANT, RUN):
        record = (state.instances, state.wants, state.job_runs)[kind].get(key)
        return None if record is None else record.created_seq
    if kind == RUN_VERSION:
        run = run_of_key(state, key)
        return None if run is None else run.created_seq
    if kind != REF:
        return None
    instances, uuid, first = state.instances, state.canonical.get(key), None
    while uuid is not None:
        instance = instances.get(uuid)
        if instance is None:
            return state.first_created.get(key, 0)
        first, uuid = instance.created_seq, instance.previous_uuid
    return first if first is not None else state.first_created.get(key, 0)


def closed_of(state: BuildState, kind: int, key: str) -> int | None:
    """The `closed` column of a record's row: a job run's or a want's last change once it ended (a seq at or
    after the one it ended at); None while it is active, and for the other kinds."""
    if kind == RUN:
        run = state.job_runs.get(key)
        return None if run is None or run.state in ACTIVE_RUN_STATES else run.updated_seq
    if kind == WANT:
        want = state.wants.get(key)
        return None if want is None or want.state not in TERMINAL_WANT_STATES else want.updated_seq
    return None


def beats_of(state: BuildState, run_id: str, after: int) -> Iterator[Beat]:
    """A run's heartbeats after its first, after seq `after`, as rows."""
    packed = state.run_heartbeats.get(run_id)
    if packed:
        pairs = memoryview(packed).cast("q")
        for index in range(bisect_right(pairs[0::2], after) * 2, len(pairs), 2):
            yield run_id, pairs[index], pairs[index + 1]


def touched_keys(state: BuildState, touched: Touched) -> Iterator[Key]:
    """The rows a pass writes: the records it tracked, the rejections and the clock's marks since it began."""
    tracked = (
        (INSTANCE, touched.instances),
        (WANT, touched.wants),
        (RUN, touched.runs),
        (REF, touched.refs),
        (VERSION, touched.versions),
        (CHECK_REQUEST, touched.check_requests),
    )
    for kind, keys in tracked:
        for key in keys:
            yield kind, key
    runs = state.job_runs
    for key in run_version_keys(run for run_id in touched.runs if (run := runs.get(run_id)) is not None):
        yield RUN_VERSION, key
    rejections = state.rejections
    for rejection in rejections[bisect_right(rejections, touched.since, key=_rejection_seq) :]:
        yield REJECTION, rejection_key(rejection.seq)
    first_mark = max(0, touched.since // CLOCK_MARK_EVERY - 1)  # the first mark that may have been kept since
    for chunk in range(first_mark // CLOCK_CHUNK, clock_chunks(state)):
        yield CLOCK, clock_key(chunk)


def ref_keys(state: BuildState) -> dict[str, None]:
    """The refs with a row: those with a canonical pointer, a first instance dropped or a kept change."""
    refs = dict.fromkeys(state.canonical)
    refs.update(dict.fromkeys(state.first_created))
    refs.update((key, None) for key in state.fields if key not in state.instances)
    return refs


def clock_chunks(state: BuildState) -> int:
    """How many rows the clock's marks take."""
    return -(-len(state.clock_marks) // CLOCK_CHUNK)


def kind_counts(state: BuildState) -> list[int]:
    """How many rows of each kind `state` has (`all_keys`, counted without listing them)."""
    return [
        len(state.instances),
        len(state.wants),
        len(state.job_runs),
        len(ref_keys(state)),
        sum(map(len, state.versions.values())),
        len(state.check_requests),
        len(state.rejections),
        clock_chunks(state),
        sum(1 for _ in run_version_keys(state.job_runs.values())),
    ]


def all_keys(state: BuildState) -> list[Key]:
    """Every record the state holds, as keys of the table."""
    return [
        *((INSTANCE, key) for key in state.instances),
        *((WANT, key) for key in state.wants),
        *((RUN, key) for key in state.job_runs),
        *((REF, key) for key in ref_keys(state)),
        *((VERSION, version_key(name, key)) for name, kept in state.versions.items() for key in kept),
        *((CHECK_REQUEST, key) for key in state.check_requests),
        *((REJECTION, rejection_key(rejection.seq)) for rejection in state.rejections),
        *((CLOCK, clock_key(chunk)) for chunk in range(clock_chunks(state))),
        *((RUN_VERSION, key) for key in run_version_keys(state.job_runs.values())),
    ]


# ----------------------------------------------------------------- the table


@dataclass(frozen=True)
class RecordPass:
    """What a tracking pass writes: the rows of every record the fold changed in it (`rows_of`), and whether
    this process wrote every record since it began tracking (`whole`: the rows are whole at the pass's end)."""

    rows: Rows
    whole: bool
    writer: str | None = None  # the working set writing them, if any (state/store/row_versions.py)


def write_rows(conn: Connection, rows: Rows, writer: str | None = None) -> None:
    """Write these rows (keeping a newer one already there) and heartbeats (each once), and delete the rows
    of records that are gone, in the caller's transaction (the rows replaced or deleted are first copied where
    a working set other than `writer` may read as of a seq before them: state/store/row_versions.py)."""
    keep_versions(conn, [(row[0], row[1], row[2]) for row in rows.rows], rows.gone, rows.at, writer=writer)
    write_newer_rows(conn, table, rows.rows, "seq")
    delete_keys(conn, table, rows.gone)
    if rows.beats:
        conn.execute(insert_ignoring_conflicts(conn, state_heartbeats), [_beat_row(beat) for beat in rows.beats])
    if rows.want_refs:  # written with each row of the want, once kept (its refs never change)
        named = [{"ref": ref, "created": created, "want_id": want_id} for ref, created, want_id in rows.want_refs]
        conn.execute(insert_ignoring_conflicts(conn, state_want_refs), named)
    write_cells(conn, rows.cells, rows.cells_gone)


def _beat_row(beat: Beat) -> dict[str, object]:
    return {"run_id": beat[0], "seq": beat[1], "ms": beat[2]}


def write_pass(conn: Connection, first: int, last: int, records: RecordPass) -> None:
    """A tracking pass's rows, in the transaction that moves the changes' watermark from `first` to `last`;
    the records' watermark moves with it when the rows are whole: it was at `first`, or `records.whole`.
    Nothing, when a newer format owns the rows."""
    if not take_rows(conn):
        return
    write_rows(conn, records.rows, records.writer)
    if records.whole or records_watermark(conn) == first:
        move_records_watermark(conn, last)
    prune_versions(conn, last)


def records_watermark(conn: Connection) -> int:
    """The seq up to which every record is in its row (0: not yet)."""
    found = conn.execute(sa.select(state_projections.c.seq).where(state_projections.c.name == PROJECTION))
    return found.scalar_one_or_none() or 0


def move_records_watermark(conn: Connection, last: int) -> None:
    """Set the `records` watermark to `last`, in the caller's transaction (which holds the changes' watermark)."""
    moved = conn.execute(sa.update(state_projections).where(state_projections.c.name == PROJECTION).values(seq=last))
    if moved.rowcount != 1:
        conn.execute(sa.insert(state_projections).values(name=PROJECTION, seq=last))


def _encoding_of(name: str) -> int:
    """The format number of a `records` watermark's row name."""
    parts = name.split(":")
    return int(parts[1]) if len(parts) == 3 and parts[1].isdigit() else _UNNUMBERED_ENCODING


def _other_formats(conn: Connection) -> list[str]:
    others = state_projections.c.name.like("records:%") & (state_projections.c.name != PROJECTION)
    return list(conn.execute(sa.select(state_projections.c.name).where(others)).scalars())


def newer_format(conn: Connection) -> bool:
    """Whether a newer format than this one owns the rows (written by a newer partbuild)."""
    return any(_encoding_of(name) > ENCODING for name in _other_formats(conn))


def take_rows(conn: Connection) -> bool:
    """Make the rows this format's, in the caller's transaction: False (nothing done) when a newer format owns
    them; else the rows of an older format (or another build's of this number) are deleted with their
    watermark."""
    others = _other_formats(conn)
    if not others:
        return True
    if any(_encoding_of(name) > ENCODING for name in others):
        return False
    conn.execute(sa.delete(state_projections).where(state_projections.c.name.in_(others)))
    conn.execute(sa.delete(table))
    conn.execute(sa.delete(state_heartbeats))
    conn.execute(sa.delete(state_want_refs))
    conn.execute(sa.delete(state_cells))
    clear_floor(conn)  # a checkpoint's records were in the rows just deleted
    return True


# The reads of a replica's pages, each run on the driver's cursor (state/store/driver.py).
_ONE_ROW: Final = DriverQuery(
    sa.select(table.c.seq, table.c.body).where(table.c.kind == sa.bindparam("kind"), table.c.id == sa.bindparam("id"))
)
# The rows of one id of two kinds (an instance's UUID or a ref: the kept fields are in one or the other).
_TWO_KINDS: Final = DriverQuery(
    sa.select(table.c.kind, table.c.seq, table.c.body).where(
        table.c.kind.in_([sa.bindparam(name, type_=table.c.kind.type) for name in ("kind_a", "kind_b")]),
        table.c.id == sa.bindparam("id"),
    )
)
# `kind = ? AND id IN (...)`, not a row value IN: SQLite searches the key's index with this one only (with a
# row value, the index on `kind` alone: a scan of the kind's rows).
_ROWS: Final = KeyedQueries(
    lambda names: sa.select(table.c.kind, table.c.id, table.c.seq, table.c.body).where(
        table.c.kind == sa.bindparam("kind"),
        table.c.id.in_([sa.bindparam(name, type_=table.c.id.type) for name in names]),
    )
)
_ROW_SEQS: Final = KeyedQueries(
    lambda names: sa.select(table.c.id, table.c.seq).where(
        table.c.kind == sa.bindparam("kind"),
        table.c.id.in_([sa.bindparam(name, type_=table.c.id.type) for name in names]),
    )
)
_BEATS: Final = KeyedQueries(
    lambda names: (
        sa.select(state_heartbeats.c.run_id, state_heartbeats.c.seq, state_heartbeats.c.ms)
        .where(
            state_heartbeats.c.run_id.in_([sa.bindparam(name, type_=state_heartbeats.c.run_id.type) for name in names])
        )
        .order_by(state_heartbeats.c.run_id, state_heartbeats.c.seq)
    )
)
_NEWEST_BEAT: Final = DriverQuery(
    sa.select(state_heartbeats.c.seq, state_heartbeats.c.ms)
    .where(state_heartbeats.c.run_id == sa.bindparam("run_id"), state_heartbeats.c.seq <= sa.bindparam("seq"))
    .order_by(state_heartbeats.c.seq.desc())
    .limit(1)
)
_WANTS_OF_REF: Final = DriverQuery(
    sa.select(state_want_refs.c.want_id)
    .where(state_want_refs.c.ref == sa.bindparam("ref"), state_want_refs.c.created <= sa.bindparam("upto"))
    .order_by(state_want_refs.c.created, state_want_refs.c.want_id)
)


class RecordStore:
    """The `state_records` table of one database: see the module docstring."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def watermark(self) -> int:
        """The seq up to which every record is in its row (0: not yet)."""
        with self.engine.connect() as conn:
            return records_watermark(conn)

    def newer_format(self) -> bool:
        """Whether a newer format than this one owns the rows: this process then neither writes nor reads them."""
        with self.engine.connect() as conn:
            return newer_format(conn)

    def dump(self, rows: Rows, writer: str | None = None) -> None:
        """Write a chunk of rows outside any pass (`dump`): no watermark moves (`writer`: as `write_rows`')."""
        with begin_write(self.engine, bounded=True) as conn:
            lock_for_rows(conn)
            if take_rows(conn):
                write_rows(conn, rows, writer)

    def analyze(self) -> None:
        """Have PostgreSQL's planner read the tables' statistics again (after every row was written: its
        autovacuum would, in time, where it runs). SQLite plans well without (where not, a read names its index)."""
        if self.engine.dialect.name == "postgresql":
            with self.engine.begin() as conn:
                analyzed = ", ".join(t.name for t in (table, state_heartbeats, state_want_refs, state_cells))
                conn.execute(sa.text(f"ANALYZE {analyzed}"))

    def rows(self, conn: Connection, keys: Iterable[Key]) -> dict[Key, tuple[int, bytes]]:
        """(seq, body) of the rows of these keys that exist, read in `conn`'s transaction."""
        by_kind: dict[int, list[str]] = {}
        for kind, key in keys:
            by_kind.setdefault(kind, []).append(key)
        found: dict[Key, tuple[int, bytes]] = {}
        for kind, ids in by_kind.items():
            if len(ids) == 1:  # a point read
                for seq, body in _ONE_ROW.all(conn, {"kind": kind, "id": ids[0]}):
                    found[(kind, ids[0])] = (seq, body)
                continue
            for start in range(0, len(ids), 500):
                for row_kind, key, seq, body in _ROWS.all(conn, ids[start : start + 500], kind=kind):
                    found[(row_kind, key)] = (seq, body)
        return found

    def row_seqs(self, conn: Connection, kind: int, ids: Sequence[str]) -> dict[str, int]:
        """The seq of the row of each of these ids of `kind` that has one, read in `conn`'s transaction."""
        found: dict[str, int] = {}
        for start in range(0, len(ids), 500):
            found.update((key, seq) for key, seq in _ROW_SEQS.all(conn, ids[start : start + 500], kind=kind))
        return found

    def ids_between(self, conn: Connection, kind: int, low: str, high: str) -> list[str]:
        """The ids of the rows of `kind` from `low` to `high` (both included; the keys of fixed width whose
        order is their code points'), in `conn`'s transaction: one index range."""
        ident = table.c.id.collate("C") if conn.dialect.name == "postgresql" else table.c.id
        query = sa.select(table.c.id).where(table.c.kind == kind, ident >= low, ident <= high)
        return list(conn.execute(query).scalars())

    def ids(self, conn: Connection, kind: int, prefix: str = "") -> Iterator[str]:
        """The ids of every row of `kind` that start with `prefix`, in `conn`'s transaction (an index range)."""
        query = sa.select(table.c.id).where(table.c.kind == kind)
        if prefix:  # in code point order ("C" on PostgreSQL: a locale's order may skip punctuation)
            ident = table.c.id.collate("C") if conn.dialect.name == "postgresql" else table.c.id
            query = query.where(ident >= prefix, ident < prefix + "\U0010ffff")
        for row in conn.execution_options(yield_per=5000).execute(query):
            yield row.id

    def rows_of_id(self, conn: Connection, key: str, kinds: tuple[int, int]) -> dict[Key, tuple[int, bytes]]:
        """(seq, body) of the rows of `key` of either of two kinds, in one statement, in `conn`'s transaction."""
        found = _TWO_KINDS.all(conn, {"kind_a": kinds[0], "kind_b": kinds[1], "id": key})
        return {(kind, key): (seq, body) for kind, seq, body in found}

    def scan(self, conn: Connection, kind: int) -> Iterator[tuple[str, bytes]]:
        """(id, body) of every row of `kind`, in `conn`'s transaction."""
        query = sa.select(table.c.id, table.c.body).where(table.c.kind == kind)
        for row in conn.execution_options(yield_per=5000).execute(query):
            yield row.id, row.body

    def scan_in_key_order(self, conn: Connection, kind: int, bodies: bool = True) -> Iterator[tuple[str, bytes]]:
        """`scan`, by id in the order Python sorts strings (code points: bytes of UTF-8, PostgreSQL's "C");
        without `bodies`, the ids alone (each with b"")."""
        ident = table.c.id.collate("C") if conn.dialect.name == "postgresql" else table.c.id
        body = table.c.body if bodies else sa.literal(b"", sa.LargeBinary)
        query = sa.select(table.c.id, body.label("body")).where(table.c.kind == kind).order_by(ident)
        for row in conn.execution_options(yield_per=5000).execute(query):
            yield row.id, row.body

    def created(self, conn: Connection, kind: int, after: int, upto: int) -> Iterator[tuple[str, bytes]]:
        """(id, body) of the rows of `kind` created in seqs (`after`, `upto`], by created seq then id."""
        created = table.c.created
        query = sa.select(table.c.id, table.c.body).where(table.c.kind == kind, created > after, created <= upto)
        for row in conn.execution_options(yield_per=2000).execute(query.order_by(created, table.c.id)):
            yield row.id, row.body

    def open_at(self, conn: Connection, kind: int, seq: int, head: int) -> list[tuple[str, bytes]]:
        """(id, body) of the rows of `kind` created by `seq` not closed by then (`closed` None or after it), by
        created seq then id. Which ones: from an index alone (both hold both seqs and the id), the `closed` one
        for those still open, and for those closed since `seq` the `closed` one when `seq` is late (few closed
        after it) or the `created` one when it is early (few created by it): SQLite is told which, PostgreSQL's
        planner knows from its statistics. Then the bodies of those alone, by key."""
        created, closed, ident = table.c.created, table.c.closed, table.c.id
        index = "ix_state_records_closed" if 2 * seq >= head else "ix_state_records_created"
        since = sa.select(created, ident).where(table.c.kind == kind, closed > seq, created <= seq)
        queries = (
            sa.select(created, ident)
            .where(table.c.kind == kind, closed.is_(None), created <= seq)
            .with_hint(table, "INDEXED BY ix_state_records_closed", "sqlite"),
            since.with_hint(table, f"INDEXED BY {index}", "sqlite"),
        )
        keys = sorted((row.created, row.id) for query in queries for row in conn.execute(query))
        bodies = self.rows(conn, [(kind, key) for _, key in keys])
        return [(key, bodies[(kind, key)][1]) for _, key in keys]

    def wants_of_ref(self, conn: Connection, ref: str, upto: int) -> list[str]:
        """The wants naming `ref` created by seq `upto`, in creation order, in `conn`'s transaction."""
        return [want_id for (want_id,) in _WANTS_OF_REF.all(conn, {"ref": ref, "upto": upto})]

    def refs_wanted(self, conn: Connection, upto: int) -> list[str]:
        """Every ref a want created by seq `upto` named, sorted, in `conn`'s transaction."""
        named = state_want_refs.c
        query = sa.select(named.ref).where(named.created <= upto).distinct().order_by(named.ref)
        return list(conn.execute(query).scalars())

    def all_want_refs(self) -> Iterator[WantRef]:
        """Every row of the wants by ref, in key order (the audit's walk)."""
        with self.engine.connect() as conn:
            query = sa.select(state_want_refs).order_by(*state_want_refs.primary_key.columns)
            for row in conn.execution_options(yield_per=5000).execute(query):
                yield row.ref, row.created, row.want_id

    def beats(self, conn: Connection, run_id: str, upto: int | None = None) -> bytearray:
        """A run's heartbeats after its first (by seq `upto`, if given), as `BuildState.run_heartbeats` packs
        them, in `conn`'s transaction."""
        packed = self.beats_of_runs(conn, [run_id])[run_id]
        if upto is None or not packed:
            return packed
        seqs = memoryview(packed).cast("q")[0::2]
        return packed[: bisect_right(seqs, upto) * HEARTBEAT_PAIR.size]

    def beats_of_runs(self, conn: Connection, run_ids: Sequence[str]) -> dict[str, bytearray]:
        """`beats` of each of these runs (empty: none), 500 runs a statement, in `conn`'s transaction."""
        found = {run_id: bytearray() for run_id in run_ids}
        for start in range(0, len(run_ids), 500):
            for run_id, seq, ms in _BEATS.all(conn, run_ids[start : start + 500]):
                found[run_id] += HEARTBEAT_PAIR.pack(seq, ms)
        return found

    def heartbeat(self, conn: Connection, run_id: str, seq: int) -> tuple[int, int] | None:
        """(seq, ms) of a run's newest heartbeat after its first at or before `seq` (None: none)."""
        for newest_seq, ms in _NEWEST_BEAT.all(conn, {"run_id": run_id, "seq": seq}):
            return newest_seq, ms
        return None

    def all_beats(self) -> Iterator[Beat]:
        """Every heartbeat row, by run id and seq (the audit's walk)."""
        with self.engine.connect() as conn:
            query = sa.select(state_heartbeats).order_by(state_heartbeats.c.run_id, state_heartbeats.c.seq)
            for row in conn.execution_options(yield_per=5000).execute(query):
                yield row.run_id, row.seq, row.ms

    def all_rows(self) -> Iterator[Row]:
        """Every row, in key order (the audit's walk)."""
        with self.engine.connect() as conn:
            query = sa.select(table).order_by(table.c.kind, table.c.id)
            for row in conn.execution_options(yield_per=5000).execute(query):
                yield row.kind, row.id, row.seq, row.body, row.created, row.closed
