"""The records' rows as they were at a working set's newest checkpoint: what a start after a crash reads back.

A working set saves a checkpoint (its state, with the keys of the records only its rows hold) at a seq S, then
sets S as the floor here. From then on, every write of the rows (a projector's pass, a dump, retention's
deletions) first copies each row it is about to change or delete, if that row is as of S or earlier, into
`state_records_before` (once: the first such write after S keeps it). So for a record that went cold by S,
what it was at S is its row, or this copy when the row has moved past S since. A start after a crash loads the
checkpoint and reads each such record back once as of S (state/store/cold_rows.py, `AsOfCheckpoint`), then
replays the tail from S instead of the whole log. The next checkpoint moves the floor and clears the copies, so
they are the rows changed since the newest checkpoint, no more.

Only the kinds a working set reads back are copied (instances, wants, job runs, refs): the other rows are
read by their seq (heartbeats, the wants by ref) or not read back at all.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from partbuild.state.db import insert_ignoring_conflicts
from partbuild.state.schema import state_projections, state_records, state_records_before

FLOOR: Final = "records-before"  # the `state_projections` row that holds the newest checkpoint's seq
COPIED_KINDS: Final = frozenset((0, 1, 2, 3))  # instances, wants, job runs, refs (state/store/records.py)
_CHUNK: Final = 500


def floor(conn: Connection) -> int | None:
    """The seq of the checkpoint the copies are kept for (None: none is)."""
    found = conn.execute(sa.select(state_projections.c.seq).where(state_projections.c.name == FLOOR))
    return found.scalar_one_or_none()


def set_floor(conn: Connection, seq: int) -> None:
    """Keep copies for a checkpoint at `seq` from now on, in the caller's transaction: the copies kept for an
    earlier one are deleted (its checkpoint is no longer the newest)."""
    conn.execute(sa.delete(state_records_before))
    moved = conn.execute(sa.update(state_projections).where(state_projections.c.name == FLOOR).values(seq=seq))
    if moved.rowcount != 1:
        conn.execute(sa.insert(state_projections).values(name=FLOOR, seq=seq))


def clear_floor(conn: Connection) -> None:
    """Keep no copies (no checkpoint is to be loaded): the floor and the copies go, in the caller's transaction."""
    conn.execute(sa.delete(state_records_before))
    conn.execute(sa.delete(state_projections).where(state_projections.c.name == FLOOR))


def keep_rows_before(conn: Connection, keys: Iterable[tuple[int, str]]) -> None:
    """Copy the rows of these keys that are as of the floor or earlier, unless copied already, in the caller's
    transaction, before it changes or deletes them. Nothing without a floor."""
    at = floor(conn)
    if at is None:
        return
    by_kind: dict[int, list[str]] = {}
    for kind, key in keys:
        if kind in COPIED_KINDS:
            by_kind.setdefault(kind, []).append(key)
    columns = [state_records.c.kind, state_records.c.id, state_records.c.seq, state_records.c.body]
    for kind, ids in by_kind.items():
        for start in range(0, len(ids), _CHUNK):
            rows = sa.select(*columns).where(
                state_records.c.kind == kind,
                state_records.c.id.in_(ids[start : start + _CHUNK]),
                state_records.c.seq <= at,
            )
            insert = insert_ignoring_conflicts(conn, state_records_before)
            conn.execute(insert.from_select(["kind", "id", "seq", "body"], rows))


def row_before(conn: Connection, kind: int, key: str) -> tuple[int, bytes] | None:
    """(seq, body) of the copy of a record's row as it was at the floor, if one was kept."""
    found = conn.execute(
        sa.select(state_records_before.c.seq, state_records_before.c.body).where(
            state_records_before.c.kind == kind, state_records_before.c.id == key
        )
    ).first()
    return None if found is None else (int(found[0]), bytes(found[1]))
