"""The event store, split by capability: `EventLog` (append, read, replay) and `SnapshotStore`.

`EventLog.append` gives events gapless seqs in commit order; reads go by seq, by
page (replay) or by a set of seqs.

One SQL implementation serves SQLite and PostgreSQL; the only dialect seam is
`partbuild.state.db` (connection set-up and how a write transaction takes its lock).
The SQL engine stays inside `state/`: callers get a log, its snapshot store
(`EventLog.snapshots`) and its append notifications (`EventLog.append_listener`).
The operational tables beside the log are reached through `state.database.Database`.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

import sqlalchemy as sa
from sqlalchemy.engine import Dialect, Engine
from sqlalchemy.sql.compiler import SQLCompiler

from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.db import (
    AppendListener,
    WriteLockLost,
    WriteLockTimeout,
    WriteNotDone,
    begin_write,
    notify_append,
    open_append_listener,
)
from partbuild.state.engine import EngineHandle
from partbuild.state.schema import events as events_table
from partbuild.state.schema import log_head, snapshots

MAX_READ_LIMIT = 10_000
IN_LIST_LIMIT = 1_000  # seqs per IN list: far below every driver's bound on parameters
MAX_EVENT_ID_LENGTH = 64  # events.event_id is String(64)

__all__ = [
    "AppendConflict",
    "AppendResult",
    "EventLog",
    "SnapshotStore",
    "StoredEvent",
    "WriteLockLost",
    "WriteLockTimeout",
    "WriteNotDone",
    "parse_event",
]

# Tests only: "1" makes this process stop itself (SIGSTOP) inside its first append of two or more events,
# after the lock is taken and the first row written, to show a frozen writer blocks nobody for long.
STOP_IN_APPEND_ENV = "PARTBUILD_TEST_STOP_IN_APPEND"
_stop_in_append = os.environ.get(STOP_IN_APPEND_ENV) == "1"


@dataclass(frozen=True, slots=True)
class StoredEvent:
    """One row of the log: the serialized `pb.Event` plus its position and indexed columns."""

    seq: int
    event_id: str
    event_type: str
    recorded_at_ms: int
    payload: bytes

    def to_event(self) -> pb.Event:
        """Parse the payload back into the protobuf message."""
        return parse_event(self.payload)


def parse_event(payload: bytes) -> pb.Event:
    """Parse one stored payload into a `pb.Event`."""
    return pb.Event.FromString(payload)


class AppendConflict(Exception):
    """An append with `expected_head` found another writer had moved the head first."""

    def __init__(self, expected_head: int, actual_head: int) -> None:
        super().__init__(
            f"append expected the log head at seq {expected_head}, but it is at seq {actual_head}: "
            "another writer appended first; nothing was written (re-read and retry)"
        )
        self.expected_head = expected_head
        self.actual_head = actual_head


@dataclass(frozen=True)
class AppendResult:
    """The seqs given to an appended batch, both inclusive."""

    first_seq: int
    last_seq: int


class DriverStatement:
    """A Core statement compiled once for a dialect, to run on a driver cursor.

    The hot paths (batched insert, replay paging) skip SQLAlchemy's per-row
    parameter and Row processing, yet the SQL text still comes from the schema.
    """

    def __init__(self, statement: sa.ClauseElement, dialect: Dialect) -> None:
        # An insert or a select: compiled by the dialect's SQL compiler (DDL is never run this way).
        self._compiled = cast(SQLCompiler, statement.compile(dialect=dialect))
        self.sql = str(self._compiled)
        self.positional_names: list[str] | None = list(self._compiled.positiontup or []) if dialect.positional else None

    def params(self, values: Mapping[str, Any]) -> tuple[Any, ...] | Mapping[str, Any]:
        """Driver parameters for one execution, in the dialect's paramstyle."""
        full = self._compiled.construct_params(dict(values))
        if self.positional_names is None:
            return full
        return tuple(full[name] for name in self.positional_names)


_EVENT_COLUMNS = [column.name for column in events_table.columns]
# A batch of events as one INSERT on PostgreSQL: a column array per column, unnested into rows.
_PG_EVENT_ARRAYS = {
    "seq": "bigint[]",
    "event_id": "text[]",
    "event_type": "text[]",
    "recorded_at_ms": "bigint[]",
    "payload": "bytea[]",
}
_PG_INSERT_EVENTS = (
    f"INSERT INTO {events_table.name} ({', '.join(_EVENT_COLUMNS)}) "
    f"SELECT * FROM unnest({', '.join(f'%s::{_PG_EVENT_ARRAYS[name]}' for name in _EVENT_COLUMNS)})"
)


class EventLog(EngineHandle):
    """The append-only event log: gapless seqs in commit order, paged reads, fast replay.

    `engine` must come from `partbuild.state.db.create_engine_for` (its SQLite
    transaction handling is part of the guarantees) with the schema at head.
    `EventLog.open(url)` opens the log alone; `Database.open(url)` the log and
    the operational stores beside it.
    """

    def __init__(self, engine: Engine) -> None:
        super().__init__(engine)
        self.snapshots = SnapshotStore(engine)
        dialect = engine.dialect
        self._insert = DriverStatement(events_table.insert(), dialect)
        if self._insert.positional_names not in (None, _EVENT_COLUMNS):
            raise RuntimeError(f"unexpected insert parameter order {self._insert.positional_names}")
        self._bump_head = (
            sa.update(log_head)
            .where(log_head.c.id == 1)
            .values(head_seq=log_head.c.head_seq + sa.bindparam("n", type_=sa.BigInteger()))
            .returning(log_head.c.head_seq)
        )
        seq = events_table.c.seq
        self._page = DriverStatement(
            sa.select(seq, events_table.c.payload)
            .where(seq > sa.bindparam("after"), seq <= sa.bindparam("upto"))
            .order_by(seq),
            dialect,
        )

    def append_listener(self) -> AppendListener | None:
        """Wakes when any process appends (PostgreSQL); None where callers must poll (SQLite)."""
        return open_append_listener(self._engine)

    def append(self, events: Sequence[pb.Event], *, expected_head: int | None = None) -> AppendResult:
        """Append a batch atomically; with `expected_head`, only if the head is still there.

        The append lock is held for a bounded time (`state.db`): a writer that
        waited the wait bound raises `WriteLockTimeout`, one frozen inside its
        append past the hold bound finds it ended (`WriteLockLost` on
        PostgreSQL; on SQLite a stopped holder is killed). Either way nothing of
        the batch was written, so it can be retried (`WriteNotDone`).
        """
        if not events:
            raise ValueError("cannot append an empty batch of events")
        # Serialize before the transaction: the append lock is held as briefly as possible.
        recorded_at_ms = int(time.time() * 1000)
        prepared: list[tuple[str, str, bytes]] = []
        for event in events:
            if len(event.event_id) > MAX_EVENT_ID_LENGTH:
                raise ValueError(f"event_id longer than {MAX_EVENT_ID_LENGTH} characters: {event.event_id!r}")
            event_type = event.WhichOneof("payload") or "unknown"
            prepared.append((event.event_id, event_type, event.SerializeToString()))
        count = len(prepared)

        with begin_write(self._engine, bounded=True) as conn:
            # THE ORDERING GUARANTEE LIVES HERE. Every event gets a gapless, strictly
            # increasing seq in commit order, so a reader tailing `seq > N` never misses
            # an event that commits later with a lower number. Database-allocated ids
            # (autoincrement, PostgreSQL sequences) do not give that: they are handed
            # out before commit, and transactions commit in any order, so a tailing
            # reader can see seq 11 while seq 10 is still uncommitted, move past it and
            # never see it. Instead the first statement bumps the single log_head row.
            # It takes that row's lock on PostgreSQL (waiting writers re-read the new
            # head under READ COMMITTED) and the database write lock on SQLite
            # (begin_write says BEGIN IMMEDIATE; even a plain BEGIN would get it here,
            # as the first statement, with no read lock to upgrade and so no
            # lock-upgrade deadlock). Either lock is held until COMMIT, so the order
            # in which seqs are allocated is the order in which batches commit, and a
            # rolled-back batch gives its seqs back with the head.
            head = conn.execute(self._bump_head, {"n": count}).scalar_one()
            first_seq = head - count + 1
            if expected_head is not None and first_seq - 1 != expected_head:
                # Raising inside the `with` rolls back the bump: nothing is written.
                raise AppendConflict(expected_head, first_seq - 1)
            rows = [
                (first_seq + offset, event_id, event_type, recorded_at_ms, payload)
                for offset, (event_id, event_type, payload) in enumerate(prepared)
            ]
            if _stop_in_append and count > 1:
                self._insert_rows(conn, rows[:1])
                _stop_here()
                rows = rows[1:]
            self._insert_rows(conn, rows)
            notify_append(conn)
        return AppendResult(first_seq, head)

    def _insert_rows(self, conn: sa.Connection, rows: list[tuple[int, str, str, int, bytes]]) -> None:
        if conn.dialect.name == "postgresql":
            # One statement, never psycopg's executemany: that pipelines the rows without
            # a Sync, and until the Sync the server does not count the session as idle in
            # its transaction, so a writer stopped mid-pipeline would hold log_head's lock
            # past the hold bound (idle_in_transaction_session_timeout) for as long as it
            # stays stopped. After one statement the session is idle, and the bound holds.
            conn.exec_driver_sql(_PG_INSERT_EVENTS, tuple(list(column) for column in zip(*rows, strict=True)))
            return
        # SQLite: one executemany of plain tuples (its driver is positional), no per-row SQLAlchemy processing.
        conn.exec_driver_sql(self._insert.sql, rows)

    def head(self) -> int:
        """The seq of the newest committed event (0 for an empty log)."""
        with self._engine.connect() as conn:
            return int(conn.execute(sa.select(log_head.c.head_seq).where(log_head.c.id == 1)).scalar_one())

    def read(self, after_seq: int, limit: int) -> list[StoredEvent]:
        """Up to `limit` events with seq > `after_seq`, in seq order (for tailing and paging)."""
        if after_seq < 0:
            raise ValueError(f"after_seq must be >= 0, got {after_seq}")
        if not 1 <= limit <= MAX_READ_LIMIT:
            raise ValueError(f"limit must be between 1 and {MAX_READ_LIMIT}, got {limit}")
        seq = events_table.c.seq
        query = sa.select(events_table).where(seq > after_seq).order_by(seq).limit(limit)
        with self._engine.connect() as conn:
            return [StoredEvent(*row) for row in conn.execute(query)]

    def read_seqs(self, seqs: Iterable[int]) -> dict[int, StoredEvent]:
        """The events with these seqs, by seq; a seq with no event (pruned, never written) is absent."""
        wanted = sorted(set(seqs))
        seq = events_table.c.seq
        found: dict[int, StoredEvent] = {}
        with self._engine.connect() as conn:
            for start in range(0, len(wanted), IN_LIST_LIMIT):
                query = sa.select(events_table).where(seq.in_(wanted[start : start + IN_LIST_LIMIT]))
                found.update((row.seq, StoredEvent(*row)) for row in conn.execute(query))
        return found

    def iter_payloads(
        self, after_seq: int = 0, upto_seq: int | None = None, page_size: int = 20_000
    ) -> Iterator[tuple[int, bytes]]:
        """(seq, payload) for after_seq < seq <= upto_seq (default: the head now), for replay."""
        for page in self.iter_payload_pages(after_seq, upto_seq, page_size):
            yield from page

    def iter_payload_pages(
        self, after_seq: int = 0, upto_seq: int | None = None, page_size: int = 20_000
    ) -> Iterator[Sequence[tuple[int, bytes]]]:
        """Pages of (seq, payload) for after_seq < seq <= upto_seq (default: the head now).

        Pages through a driver cursor, one short connection per page, so an
        abandoned iterator holds no connection and no Row objects are built.
        """
        if after_seq < 0:
            raise ValueError(f"after_seq must be >= 0, got {after_seq}")
        if page_size < 1:
            raise ValueError(f"page_size must be >= 1, got {page_size}")
        upto = self.head() if upto_seq is None else upto_seq
        last = after_seq
        while last < upto:
            # Pages are seq ranges, not LIMITs: seqs are gapless, so a range of
            # page_size holds page_size events, and PostgreSQL plans a bounded range
            # well even before ANALYZE (with `LIMIT n` over an open range and stale
            # statistics it sorted the whole remaining log for every page).
            page_end = min(last + page_size, upto)
            params = self._page.params({"after": last, "upto": page_end})
            with self._engine.connect() as conn:
                cursor = conn.connection.cursor()
                try:
                    cursor.execute(self._page.sql, params)
                    rows: Sequence[tuple[int, bytes]] = cursor.fetchall()
                finally:
                    cursor.close()
            yield rows
            last = page_end


def _stop_here() -> None:
    """The test-only pause point: stop this process once, until someone sends SIGCONT."""
    global _stop_in_append
    _stop_in_append = False
    os.kill(os.getpid(), signal.SIGSTOP)


class SnapshotStore:
    """Cached serialized states at a log position. A cache only: the log stays the truth.

    `format` names the serialization version; an unknown format is never returned,
    so a snapshot written by incompatible code is simply ignored.
    """

    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    def save(self, seq: int, format: str, payload: bytes) -> None:
        """Store a snapshot of the state after applying events up to `seq`."""
        if seq < 0:
            raise ValueError(f"seq must be >= 0, got {seq}")
        row = {"seq": seq, "format": format, "created_at_ms": int(time.time() * 1000), "payload": payload}
        with begin_write(self._engine) as conn:
            conn.execute(snapshots.insert(), row)

    def latest(self, format: str, max_seq: int | None = None) -> tuple[int, bytes] | None:
        """(seq, payload) of the newest snapshot in `format` with seq <= `max_seq`, if any."""
        query = (
            sa.select(snapshots.c.seq, snapshots.c.payload)
            .where(snapshots.c.format == format)
            .order_by(snapshots.c.seq.desc(), snapshots.c.id.desc())
            .limit(1)
        )
        if max_seq is not None:
            query = query.where(snapshots.c.seq <= max_seq)
        with self._engine.connect() as conn:
            row = conn.execute(query).first()
        return None if row is None else (int(row.seq), bytes(row.payload))

    def latest_seq(self, format: str) -> int | None:
        """The seq of the newest snapshot in `format`, without reading its payload."""
        query = sa.select(sa.func.max(snapshots.c.seq)).where(snapshots.c.format == format)
        with self._engine.connect() as conn:
            seq = conn.execute(query).scalar()
        return None if seq is None else int(seq)

    def prune(self, keep: int) -> int:
        """Keep the newest `keep` snapshots of each format; return how many were deleted."""
        if keep < 0:
            raise ValueError(f"keep must be >= 0, got {keep}")
        rank = (
            sa.func.row_number()
            .over(partition_by=snapshots.c.format, order_by=(snapshots.c.seq.desc(), snapshots.c.id.desc()))
            .label("newest_rank")
        )
        ranked = sa.select(snapshots.c.id, rank).subquery("ranked")
        doomed = sa.select(ranked.c.id).where(ranked.c.newest_rank > keep)
        with begin_write(self._engine) as conn:
            return conn.execute(sa.delete(snapshots).where(snapshots.c.id.in_(doomed))).rowcount
