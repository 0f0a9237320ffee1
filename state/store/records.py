"""The records of the live state in the `state_records` table: a point read, now or as of a seq, is one row.

A row holds a record as the live state held it at the row's `seq` (the head when it was written), with
what a read of the past needs to tell it as of any earlier seq: an instance with its packed state
changes and kept fields, a want (without the fold's tally), a job run with its heartbeats, a ref with its
canonical pointer, what it serves and its kept `serving` changes (state/fold/history.py). A read as of N
rebuilds the record from its row with the same functions that rebuild it from the live state
(state/fold/past.py; state/store/stored.py), so the two cannot disagree.

Rows are written two ways, both keeping the newer of two rows of one record (`write_newer_rows`):
- A projector pass in which the fold tracked every record it changed (`Touched`) writes the rows of those
  records in the transaction that moves the changes' watermark, and moves the `records` watermark with it
  when the rows are known whole: the watermark was at the pass's first seq (every earlier change is in),
  or this process wrote every record it held since it began tracking (`dump`).
- `dump`: every record of the live state, a chunk at a time, without a watermark: what a process does
  once when it finds the `records` watermark behind its own (a new table, a process that was not
  projecting while another one moved the watermark).
So at the watermark W every record that existed is in its row as of W or later (a later row serves a read
of the past as well as the live record does), and no dropped record has one.
"""

from __future__ import annotations

import hashlib
import io
import pickle
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from partbuild.state.db import begin_write, delete_keys, write_newer_rows
from partbuild.state.fold.records import Instance, JobRun, Want
from partbuild.state.log.snapshot import StateUnpickler
from partbuild.state.schema import state_projections
from partbuild.state.schema import state_records as table

if TYPE_CHECKING:
    from partbuild.state.fold.build_state import BuildState
    from partbuild.state.fold.touched import Touched


def _format() -> str:
    """The rows' format: the fields of the records pickled in them, in order (a body holds their values)."""
    layout = repr([(cls.__name__, cls.__slots__) for cls in (Instance, Want, JobRun)])
    return hashlib.sha256(layout.encode()).hexdigest()[:12]


# The `records` watermark's row, by format: rows of another format are not read, and a process of this one
# writes every record again (`dump`) before it moves its watermark (`clear_other_formats`).
PROJECTION: Final = f"records:{_format()}"
INSTANCE, WANT, RUN, REF = 0, 1, 2, 3  # the `kind` column
KIND_NAMES: Final = ("instance", "want", "job run", "ref")
Row = tuple[int, str, int, bytes]  # kind, id, seq, body
Key = tuple[int, str]


# ----------------------------------------------------------------- encoding


def _dumps(value: object) -> bytes:
    return pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)


def loads(body: bytes) -> Any:
    """A row's body, decoded by an unpickler that builds nothing but the state's own classes."""
    return StateUnpickler(io.BytesIO(body)).load()


def body_of(state: BuildState, kind: int, key: str) -> bytes | None:
    """The body of one record's row as `state` holds it (None: it holds no such record)."""
    if kind == INSTANCE:
        instance = state.instances.get(key)
        if instance is None:
            return None
        return _dumps((instance, state.instance_histories.get(key, 0), state.fields.get(key)))
    if kind == WANT:
        want = state.wants.get(key)
        if want is None:
            return None
        if want.tally is not None:  # the fold's bookkeeping of an active want: no read needs it
            want = Want.__new__(Want)
            want.__setstate__(state.wants[key].__getstate__())
            want.tally = None
        return _dumps(want)
    if kind == RUN:
        run = state.job_runs.get(key)
        if run is None:
            return None
        beats = state.run_heartbeats.get(key)
        return _dumps((run, bytes(beats) if beats else None))
    canonical = state.canonical.get(key)
    first, fields, serving = state.first_created.get(key), state.fields.get(key), state.serving.get(key)
    if canonical is None and first is None and fields is None:
        return None
    return _dumps((canonical, first, fields, serving))


def rows_of(state: BuildState, keys: Iterable[Key]) -> tuple[list[Row], list[Key]]:
    """(the rows of these records as `state` holds them at its head, the keys of those it does not hold)."""
    rows: list[Row] = []
    gone: list[Key] = []
    seq = state.head_seq
    for kind, key in keys:
        body = body_of(state, kind, key)
        if body is None:
            gone.append((kind, key))
        else:
            rows.append((kind, key, seq, body))
    return rows, gone


def touched_keys(touched: Touched) -> Iterator[Key]:
    """The records a pass tracked, as keys of the table."""
    for kind, keys in ((INSTANCE, touched.instances), (WANT, touched.wants), (RUN, touched.runs), (REF, touched.refs)):
        for key in keys:
            yield kind, key


def all_keys(state: BuildState) -> list[Key]:
    """Every record the state holds, as keys of the table (refs: those with a pointer or a kept change)."""
    refs = dict.fromkeys(state.canonical)
    refs.update(dict.fromkeys(state.first_created))
    refs.update((key, None) for key in state.fields if key not in state.instances)
    return [
        *((INSTANCE, key) for key in state.instances),
        *((WANT, key) for key in state.wants),
        *((RUN, key) for key in state.job_runs),
        *((REF, key) for key in refs),
    ]


# ----------------------------------------------------------------- the table


@dataclass(frozen=True)
class RecordPass:
    """The rows a tracking pass writes: of every record the fold changed in it (`rows_of`), and whether this
    process wrote every record since it began tracking (`whole`: the rows are whole at the pass's end)."""

    rows: Sequence[Row]
    gone: Sequence[Key]
    whole: bool


def write_rows(conn: Connection, rows: Sequence[Row], gone: Sequence[Key]) -> None:
    """Write these rows (keeping a newer one already there) and delete the rows of records that are gone,
    in the caller's transaction."""
    write_newer_rows(conn, table, rows, "seq")
    delete_keys(conn, table, gone)


def write_pass(conn: Connection, first: int, last: int, records: RecordPass) -> None:
    """A tracking pass's rows, in the transaction that moves the changes' watermark from `first` to `last`;
    the records' watermark moves with it when the rows are whole: it was at `first`, or `records.whole`."""
    clear_other_formats(conn)
    write_rows(conn, records.rows, records.gone)
    if records.whole or records_watermark(conn) == first:
        move_records_watermark(conn, last)


def records_watermark(conn: Connection) -> int:
    """The seq up to which every record is in its row (0: not yet)."""
    found = conn.execute(sa.select(state_projections.c.seq).where(state_projections.c.name == PROJECTION))
    return found.scalar_one_or_none() or 0


def move_records_watermark(conn: Connection, last: int) -> None:
    """Set the `records` watermark to `last`, in the caller's transaction (which holds the changes' watermark)."""
    moved = conn.execute(sa.update(state_projections).where(state_projections.c.name == PROJECTION).values(seq=last))
    if moved.rowcount != 1:
        conn.execute(sa.insert(state_projections).values(name=PROJECTION, seq=last))


def clear_other_formats(conn: Connection) -> None:
    """Delete the rows of another format, with its watermark, when this format has no watermark yet."""
    others = state_projections.c.name.like("records:%") & (state_projections.c.name != PROJECTION)
    if conn.execute(sa.select(state_projections.c.name).where(others).limit(1)).first() is not None:
        conn.execute(sa.delete(state_projections).where(others))
        conn.execute(sa.delete(table))


class RecordStore:
    """The `state_records` table of one database: see the module docstring."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._engine = engine

    def watermark(self) -> int:
        """The seq up to which every record is in its row (0: not yet)."""
        with self._engine.connect() as conn:
            return records_watermark(conn)

    def dump(self, rows: Sequence[Row], gone: Sequence[Key] = ()) -> None:
        """Write a chunk of rows outside any pass (`dump`): no watermark moves."""
        with begin_write(self._engine, bounded=True) as conn:
            clear_other_formats(conn)
            write_rows(conn, rows, gone)

    def rows(self, conn: Connection, keys: Iterable[Key]) -> dict[Key, tuple[int, bytes]]:
        """(seq, body) of the rows of these keys that exist, read in `conn`'s transaction."""
        wanted = list(keys)
        found: dict[Key, tuple[int, bytes]] = {}
        for start in range(0, len(wanted), 500):
            chunk = wanted[start : start + 500]
            query = sa.select(table.c.kind, table.c.id, table.c.seq, table.c.body).where(
                sa.tuple_(table.c.kind, table.c.id).in_(chunk)
            )
            for row in conn.execute(query):
                found[(row.kind, row.id)] = (row.seq, row.body)
        return found

    def all_rows(self) -> Iterator[tuple[int, str, int, bytes]]:
        """Every row, in key order (the audit's walk)."""
        with self._engine.connect() as conn:
            query = sa.select(table.c.kind, table.c.id, table.c.seq, table.c.body).order_by(table.c.kind, table.c.id)
            for row in conn.execution_options(yield_per=5000).execute(query):
                yield row.kind, row.id, row.seq, row.body
