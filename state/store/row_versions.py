"""The records' rows as they were before a write replaced or deleted them: what a working set reads its cold
records back from when another process wrote their rows past its fold's head.

A working set (state/fold/cold.py) reads a cold record back as of its own fold's head h: the row, when it was
written at or before h; else the version of it that held from its `seq` until the write that replaced it
(`until`), with seq <= h < until. Every write of the rows (a projector's pass, a dump, the rows a retention
deletes) first copies each row it replaces or deletes into `state_record_versions`, when a working set may
still read as of a seq before that write:
- a live working set's registered head (`state_projectors.head`: the least seq it may still read as of,
  beaten every few seconds, registered before its first read); a copy is kept when the write's seq is after
  the least such head;
- the newest checkpoint (`versions-floor`): a start after a crash loads it and reads its cold records back as
  of its seq once; a row as of the floor is copied once, by the first write past it.
A version no reader can ask for (until at or before the least head, and not the floor's) is pruned, and the
bound is kept (`versions-pruned`): a read that finds nothing as of a seq before it cannot tell "none then"
from "pruned" (the reader's registration went stale: it was paused or cut off longer than
`PROJECTOR_STALE_MS`), so it refuses (`VersionsPruned`) rather than decide on an absent record. A read that
finds a version is right whatever was pruned: a pruned version is older than any that holds at h.

Only the kinds a working set reads back are copied (instances, wants, job runs, refs): the other rows are
read by their seq (heartbeats, the wants by ref) or not read back at all.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Final

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from partbuild.state.db import insert_ignoring_conflicts, upsert
from partbuild.state.fold.cold import ReadBackRefused
from partbuild.state.log.events import wall_clock_ms
from partbuild.state.schema import (
    PROJECTOR_STALE_MS,
    state_projections,
    state_projectors,
    state_record_versions,
    state_records,
)

CHANGES_WATERMARK: Final = "changes"  # the `state_projections` row each pass's compare and set holds
FLOOR: Final = "versions-floor"  # the `state_projections` row that holds the newest checkpoint's seq
PRUNED: Final = "versions-pruned"  # and the one that holds the bound versions were pruned to
COPIED_KINDS: Final = frozenset((0, 1, 2, 3))  # instances, wants, job runs, refs (state/store/records.py)
_CHUNK: Final = 500
versions = state_record_versions


class VersionsPruned(ReadBackRefused):
    """A record read back as of a seq before the bound its rows' versions were pruned to."""

    def __init__(self, at: int, bound: int) -> None:
        super().__init__(
            f"the state store's row versions were pruned up to seq {bound}, after this fold's seq {at}: this "
            "working set's registration went stale (paused or cut off), so it cannot read its cold records back"
        )


# ----------------------------------------------------------------- the seqs readers may read as of


def _named_seq(conn: Connection, name: str) -> int | None:
    found = conn.execute(sa.select(state_projections.c.seq).where(state_projections.c.name == name))
    return found.scalar_one_or_none()


def _raise_named_seq(conn: Connection, name: str, seq: int) -> None:
    """Set a named seq to `seq` unless it is there or past it already: one statement, so two working sets
    saving their first checkpoints at once do not both insert it."""
    conn.execute(upsert(conn, state_projections, ["name"], ["seq"], only_up="seq").values(name=name, seq=seq))


def floor(conn: Connection) -> int | None:
    """The seq of the newest checkpoint the versions are kept for (None: none is)."""
    return _named_seq(conn, FLOOR)


def pruned_bound(conn: Connection) -> int:
    """The seq the versions were pruned to (0: never)."""
    return _named_seq(conn, PRUNED) or 0


def least_head(conn: Connection, now_ms: int | None = None, *, besides: str | None = None) -> int | None:
    """The least head a live working set registered (None: none did), in the caller's transaction; `now_ms`:
    the wall clock's (milliseconds) by default; `besides`: a holder left out."""
    now_ms = wall_clock_ms() if now_ms is None else now_ms
    live = state_projectors.c
    query = sa.select(sa.func.min(live.head)).where(
        live.working_set.is_(True), live.head.is_not(None), live.beat_ms >= now_ms - PROJECTOR_STALE_MS
    )
    if besides is not None:
        query = query.where(live.holder != besides)
    found = conn.execute(query).scalar_one_or_none()
    return None if found is None else int(found)


def set_floor(conn: Connection, seq: int) -> None:
    """Keep the rows as of a checkpoint at `seq` from now on, in the caller's transaction (the floor only moves
    up: a working set behind another saves a checkpoint the next start does not load); the versions kept for
    the floor before are pruned where no live head needs them."""
    _raise_named_seq(conn, FLOOR, seq)
    _delete_unread(conn, pruned_bound(conn), floor(conn))


def clear_floor(conn: Connection) -> None:
    """No versions (the rows were deleted, for a newer format): they go with the floor, in the caller's
    transaction."""
    conn.execute(sa.delete(versions))
    conn.execute(sa.delete(state_projections).where(state_projections.c.name == FLOOR))


# ----------------------------------------------------------------- writes


def keep_versions(
    conn: Connection,
    rows: Sequence[tuple[int, str, int]],
    gone: Iterable[tuple[int, str]],
    gone_at: int,
    now_ms: int | None = None,
    writer: str | None = None,
) -> None:
    """Copy the rows these writes replace (`rows`: kind, id and the seq written) or delete (`gone`, at seq
    `gone_at`) where a reader may ask for them (module doc), in the caller's transaction, before it writes.
    `writer`: the registered holder writing, if any, whose own head does not count (it reads as of its head,
    never before what it writes itself; a working set alone keeps no versions but its checkpoint's).
    On PostgreSQL the caller holds the changes' watermark row (its compare and set, or `lock_for_rows`), so a
    working set registering meanwhile waits for this transaction (`wait_for_writes`) before its first read."""
    writes: dict[tuple[int, int], list[str]] = {}
    for kind, key, seq in rows:
        if kind in COPIED_KINDS:
            writes.setdefault((kind, seq), []).append(key)
    for kind, key in gone:
        if kind in COPIED_KINDS:
            writes.setdefault((kind, gone_at), []).append(key)
    if not writes:
        return
    least, kept_for = least_head(conn, now_ms, besides=writer), floor(conn)
    columns = [state_records.c.kind, state_records.c.id, state_records.c.seq, state_records.c.body]
    for (kind, seq), ids in writes.items():
        if least is not None and seq > least:
            older = state_records.c.seq < seq  # a live working set may read as of any seq from its head on
        elif kept_for is not None and kept_for < seq:
            older = state_records.c.seq <= kept_for  # only a start from the checkpoint reads as of it
        else:
            continue
        for start in range(0, len(ids), _CHUNK):
            replaced = sa.select(*columns[:2], sa.literal(seq, sa.BigInteger()), *columns[2:]).where(
                state_records.c.kind == kind, state_records.c.id.in_(ids[start : start + _CHUNK]), older
            )
            insert = insert_ignoring_conflicts(conn, versions)
            conn.execute(insert.from_select(["kind", "id", "until", "seq", "body"], replaced))


def prune_versions(conn: Connection, written_to: int, now_ms: int | None = None) -> None:
    """Delete the versions no reader can ask for any more, in the caller's transaction (after the writes of a
    pass up to `written_to`): those until the least live head, or until `written_to` when no working set is
    live, except the floor's."""
    least = least_head(conn, now_ms)
    bound = least if least is not None else written_to
    if bound > pruned_bound(conn):
        _delete_unread(conn, bound, floor(conn))
        _raise_named_seq(conn, PRUNED, bound)


def _delete_unread(conn: Connection, bound: int, kept_for: int | None) -> None:
    unread = versions.c.until <= bound
    if kept_for is not None:  # the versions that held at the floor stay
        unread &= ~((versions.c.seq <= kept_for) & (versions.c.until > kept_for))
    conn.execute(sa.delete(versions).where(unread))


# ----------------------------------------------------------------- reads


def versions_at(conn: Connection, kind: int, ids: Sequence[str], at: int) -> dict[str, tuple[int, bytes]]:
    """(seq, body) of the version of each of these ids that held at seq `at`, where one was kept."""
    found: dict[str, tuple[int, bytes]] = {}
    v = versions.c
    for start in range(0, len(ids), _CHUNK):
        query = sa.select(v.id, v.seq, v.body).where(
            v.kind == kind, v.id.in_(ids[start : start + _CHUNK]), v.seq <= at, v.until > at
        )
        found.update((key, (int(seq), bytes(body))) for key, seq, body in conn.execute(query))
    return found


def check_not_pruned(conn: Connection, at: int, *, checkpoint: bool = False) -> None:
    """Raise `VersionsPruned` when a read as of `at` that found no row may have missed a pruned version
    (`checkpoint`: a read as of the floor, whose versions are kept while it is the floor)."""
    bound = pruned_bound(conn)
    if at < bound and not (checkpoint and floor(conn) == at):
        raise VersionsPruned(at, bound)


def lock_for_rows(conn: Connection) -> None:
    """Hold the changes' watermark row (PostgreSQL) in a write of rows outside a pass (a dump): a working set
    registering waits for it (`wait_for_writes`), as it waits for a pass's compare and set."""
    if conn.dialect.name == "postgresql":
        named = state_projections.c.name == CHANGES_WATERMARK
        conn.execute(sa.select(state_projections.c.seq).where(named).with_for_update())


def wait_for_writes(conn: Connection) -> None:
    """Wait until every write of rows in flight ends (PostgreSQL: they hold the changes' watermark row), in the
    caller's transaction: those that began before a working set registered its head may not have seen it, so
    it reads nothing until they end. SQLite's writers take turns: nothing to wait for."""
    if conn.dialect.name == "postgresql":
        named = state_projections.c.name == CHANGES_WATERMARK
        conn.execute(sa.select(state_projections.c.seq).where(named).with_for_update(read=True))
