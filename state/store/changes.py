"""Every change by seq, in the `state_changes` table: a page of `/changes` is one range scan of the key.

The rows are `changes_between` (state/queries/changes.py) of the live state, written a span of seqs at a
time in one transaction that moves the watermark from the span's first seq to its last (a compare and set:
two projectors of one database never write the same span twice, and a span computed from a state behind
the watermark is dropped). Rows are never updated: the changes in a span are final once the live state has
folded it. Retention is the exception, as in the live state: a dropped instance's changes are gone with it,
so a span holding an `InstanceRetention` (accepted or not: the state's own rules decided what went) also
deletes the rows of every instance the state no longer holds: the ids are read from the table and the rows
deleted in one pass, paid once per retention. The counts by state that a span's changes make
(state/store/counts.py) are written in the same transaction, under the same watermark.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, Final

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from partbuild.state.db import begin_write, bulk_insert, insert_ignoring_conflicts
from partbuild.state.fold.records import InstanceState, JobRunState, WantState
from partbuild.state.queries.changes import (
    CANONICAL_MOVED,
    INSTANCE_CREATED,
    INSTANCE_STATE,
    JOB_RUN_STATE,
    KINDS,
    WANT_STATE,
    Change,
    State,
)
from partbuild.state.schema import events, state_counts, state_projections
from partbuild.state.schema import state_changes as table
from partbuild.state.store.counts import CountRow, count_rows, counts_at, counts_by_name
from partbuild.state.store.records import RecordPass, RecordStore, write_pass
from partbuild.state.store.row_stream import row_chunks
from partbuild.state.store.row_versions import CHANGES_WATERMARK

PROJECTION: Final = CHANGES_WATERMARK
INSTANCE_RETENTION: Final = "instance_retention"  # the event type column's value
_RANK = {kind: rank for rank, kind in enumerate(KINDS)}
_STATES: dict[str, type[InstanceState] | type[WantState] | type[JobRunState]] = {
    INSTANCE_CREATED: InstanceState,
    INSTANCE_STATE: InstanceState,
    WANT_STATE: WantState,
    JOB_RUN_STATE: JobRunState,
}
# The instances a retention dropped, for one DELETE (`_delete_dropped`); private to the connection.
_gone = sa.Table(
    "state_changes_gone", sa.MetaData(), sa.Column("uuid", sa.String(36), primary_key=True), prefixes=["TEMPORARY"]
)


class ChangeStore:
    """The `state_changes` table of one database and its watermark; see the module docstring."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self.records = RecordStore(engine)  # written in the same transactions (`write`'s `records`)

    def watermark(self) -> int:
        """The seq the rows are written up to (0: nothing projected yet)."""
        with self._engine.connect() as conn:
            return changes_watermark(conn)

    def write(
        self,
        first: int,
        last: int,
        changes: Sequence[Change],
        dropped: Callable[[Iterable[str]], set[str]],
        dropped_deltas: Iterable[tuple[int, int, int]] = (),
        records: RecordPass | None = None,
        *,
        retention: bool | None = None,
    ) -> bool:
        """Write the changes in (`first`, `last`] and the counts they make, and move the watermark from
        `first` to `last`.

        False, writing nothing, when the watermark is not at `first` (another projector moved it).
        `dropped(ids)`: which of these instance UUIDs the state no longer holds; asked only when the span
        holds a retention. `dropped_deltas`: what instances retention dropped added to the counts in the span
        (`history.dropped_deltas_between`). `records`: a tracking pass's rows of the records it changed,
        written in the same transaction (state/store/records.py). `retention`: whether the span holds a
        retention, when the caller knows (a scratch store, whose database holds no log); else read from the log.
        """
        rows = [change_row(change) for change in changes]
        # Bounded as an append is (state/db.py): a projector of another process stopped inside its span (its
        # row lock on the watermark held) ends or is given up on, so this one fails and retries, never hangs.
        with begin_write(self._engine, bounded=True) as conn:
            if not _move_watermark(conn, first, last):
                return False
            # No key can be written twice: the compare and set lets one writer write a span, and a span holds
            # one change per (seq, kind, id) and one count per (kind, state, seq).
            bulk_insert(conn, table, rows)
            bulk_insert(conn, state_counts, count_rows(counts_at(conn, first), changes, dropped_deltas))
            if retention if retention is not None else _retention_between(conn, first, last):
                _delete_dropped(conn, dropped)
            if records is not None:
                write_pass(conn, first, last, records)
        return True

    def write_rows(
        self, first: int, last: int, change_rows: Sequence[tuple[object, ...]], counts: Sequence[CountRow]
    ) -> bool:
        """`write` of rows made elsewhere (`change_row`s and `count_rows`, by a bounded replay whose child
        process writes them: state/store/scratch_writer.py), for a span that holds no retention; False, writing
        nothing, when the watermark is not at `first`."""
        with begin_write(self._engine, bounded=True) as conn:
            if not _move_watermark(conn, first, last):
                return False
            bulk_insert(conn, table, change_rows)
            bulk_insert(conn, state_counts, counts)
        return True

    def count_rows(self, first: int, last: int) -> list[CountRow]:
        """The count rows written for (`first`, `last`], in seq, kind, state order."""
        query = (
            sa.select(state_counts.c.kind, state_counts.c.state, state_counts.c.seq, state_counts.c.total)
            .where(state_counts.c.seq > first, state_counts.c.seq <= last)
            .order_by(state_counts.c.seq, state_counts.c.kind, state_counts.c.state)
        )
        with self._engine.connect() as conn:
            return [(row.kind, row.state, row.seq, row.total) for row in conn.execute(query)]

    def counts(self, seq: int) -> dict[str, dict[str, int]] | None:
        """`BuildState.counts()` as of `seq`, from the rows; None while the watermark is before `seq`."""
        with self._engine.connect() as conn:
            return counts_by_name(counts_at(conn, seq)) if changes_watermark(conn) >= seq else None

    def retention_between(self, first: int, last: int) -> bool:
        """Whether an `InstanceRetention` was appended in (`first`, `last`] (accepted or not)."""
        with self._engine.connect() as conn:
            return _retention_between(conn, first, last)

    def rows(self, first: int, last: int) -> list[tuple[Any, ...]]:
        """Every row in (`first`, `last`], in key order, as `change_row` gives them (the audit compares these:
        no `Change` is built for a row that agrees)."""
        query = sa.select(table).where(table.c.seq > first, table.c.seq <= last)
        with self._engine.connect() as conn:
            return [tuple(row) for row in conn.execute(query.order_by(table.c.seq, table.c.kind, table.c.id))]

    def refs_changed(self, first: int, last: int, most: int) -> set[str] | None:
        """The refs whose instances were created, changed state or became canonical in (`first`, `last`]: at
        most `most` of them, else None (a range scan of the key; the caller makes sure the watermark is at
        `last` or beyond)."""
        kinds = [_RANK[kind] for kind in (INSTANCE_CREATED, INSTANCE_STATE, CANONICAL_MOVED)]
        query = (
            sa.select(table.c.ref)
            .where(table.c.seq > first, table.c.seq <= last, table.c.kind.in_(kinds))
            .distinct()
            .limit(most + 1)
        )
        with self._engine.connect() as conn:
            found = set(conn.execute(query).scalars())
        return None if len(found) > most else found

    def page(self, first: int, last: int, limit: int, after: tuple[int, int, str] | None = None) -> list[Change]:
        """`changes_page` of the live state, from the rows: the first `limit` changes in (`first`, `last`]
        after the key `after`. The caller makes sure the watermark is at `last` or beyond."""
        # One lower bound on seq: given two, SQLite's planner may range from the lower one.
        lowest = first + 1 if after is None else max(first + 1, after[0])
        query = sa.select(table).where(table.c.seq >= lowest, table.c.seq <= last)
        if after is not None:
            query = query.where(sa.tuple_(table.c.seq, table.c.kind, table.c.id) > sa.tuple_(*after))
        query = query.order_by(table.c.seq, table.c.kind, table.c.id).limit(limit)
        with self._engine.connect() as conn:
            return [row_change(row) for row in conn.execute(query)]


def changes_watermark(conn: Connection) -> int:
    """The seq the changes are written up to, read in `conn`'s transaction (0: nothing projected yet)."""
    found = conn.execute(sa.select(state_projections.c.seq).where(state_projections.c.name == PROJECTION))
    return found.scalar_one_or_none() or 0


def _move_watermark(conn: Connection, first: int, last: int) -> bool:
    """Compare and set, inside the write transaction (so the rows and the watermark move together)."""
    if first == 0 and changes_watermark(conn) == 0:
        insert = insert_ignoring_conflicts(conn, state_projections).values(name=PROJECTION, seq=last)
        if conn.execute(insert.returning(state_projections.c.name)).first() is not None:
            return True  # (a rowcount is not reliable for ON CONFLICT on every driver)
    moved = conn.execute(
        sa.update(state_projections)
        .where(state_projections.c.name == PROJECTION, state_projections.c.seq == first)
        .values(seq=last)
    )
    return moved.rowcount == 1


def _retention_between(conn: Connection, first: int, last: int) -> bool:
    found = conn.execute(
        sa.select(events.c.seq)
        .where(events.c.seq > first, events.c.seq <= last, events.c.event_type == INSTANCE_RETENTION)
        .limit(1)
    )
    return found.first() is not None


def _delete_dropped(conn: Connection, dropped: Callable[[Iterable[str]], set[str]]) -> None:
    """Delete the rows of the instances the state dropped: their creations, states and canonical moves.

    The created instances are read a chunk at a time (10M of them as one list: about a gigabyte) and the dropped
    ones go to a temporary table of this connection; one DELETE joins it: one pass over the rows however many
    were dropped (a DELETE per chunk of ids would pass over them once per chunk).
    """
    created = sa.select(table.c.id).where(table.c.kind == _RANK[INSTANCE_CREATED])
    _gone.create(conn)  # before the walk: SQLite refuses a schema change while a statement reads
    try:
        any_gone = False
        for chunk in row_chunks(conn, created):
            gone = dropped([uuid for (uuid,) in chunk])
            if gone:
                conn.execute(_gone.insert(), [{"uuid": uuid} for uuid in gone])
                any_gone = True
        if any_gone:
            uuids = sa.select(_gone.c.uuid)
            instance_rows = sa.and_(
                table.c.kind.in_([_RANK[INSTANCE_CREATED], _RANK[INSTANCE_STATE]]), table.c.id.in_(uuids)
            )
            moves = sa.and_(table.c.kind == _RANK[CANONICAL_MOVED], table.c.to_uuid.in_(uuids))
            conn.execute(sa.delete(table).where(sa.or_(instance_rows, moves)))
    finally:
        _gone.drop(conn)


def change_row(change: Change) -> tuple[object, ...]:
    """The change's row, in the table's column order."""
    return (
        change.seq,
        _RANK[change.kind],
        change.id,
        change.ref,
        None if change.from_state is None else int(change.from_state),
        None if change.to_state is None else int(change.to_state),
        change.from_uuid,
        change.to_uuid,
    )


def row_change(row: Sequence[Any]) -> Change:
    """The change a row (of `change_row`'s form) holds."""
    seq, rank, key, ref, from_state, to_state, from_uuid, to_uuid = row
    kind = KINDS[rank]
    states = _STATES.get(kind)
    return Change(
        seq=seq,
        kind=kind,
        id=key,
        ref=ref,
        from_state=_state(states, from_state),
        to_state=_state(states, to_state),
        from_uuid=from_uuid,
        to_uuid=to_uuid,
    )


def _state(states: type[InstanceState] | type[WantState] | type[JobRunState] | None, value: int | None) -> State | None:
    return None if states is None or value is None else states(value)
