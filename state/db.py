"""The one narrow seam where SQLite and PostgreSQL differ.

Everything above this module (the log's store, the operational stores,
migrations) is dialect-neutral SQLAlchemy Core. What differs per backend lives
here: how an engine and its connections are configured, how a write
transaction takes its lock up front, a snapshot read, the migration lock,
append notifications (LISTEN/NOTIFY), inserts that resolve conflicts, row
locks, and which backend a leader lock uses (`backend`).

Write locks are held for a bounded time (`WriteBounds`, from the environment:
`PARTBUILD_WRITE_HOLD_S`, default 5 s, and `PARTBUILD_WRITE_WAIT_S`, default
30 s), so a writer frozen inside its transaction (SIGSTOP, a debugger, a frozen
VM) blocks the others for about the hold bound, not until it wakes:

- PostgreSQL, appends (`begin_write(bounded=True)`): `lock_timeout` (the wait
  bound) and `idle_in_transaction_session_timeout` (the hold bound), set local
  to the transaction. The server ends a session idle inside its append past the
  hold bound (rolling it back; its row lock on `log_head` goes with it); the
  woken writer's next statement fails: `WriteLockLost`. A writer that waited the
  wait bound for the lock gives up: `WriteLockTimeout`.
- SQLite, every write transaction (the write lock is the whole database's):
  BEGIN IMMEDIATE waits in slices up to the wait bound (then
  `WriteLockTimeout`); between slices the waiter looks at the lock's holder and
  kills it when it has stayed stopped for the hold bound
  (`state/frozen_writer.py` says why that is the only way and why it loses
  nothing).

Either way nothing is half-written: the transaction is rolled back whole.
"""

from __future__ import annotations

import os
import sqlite3
import time
import weakref
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from operator import itemgetter
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import URL, Connection, Engine, make_url
from sqlalchemy.sql import Select

from partbuild.state.frozen_writer import FrozenWriterWatch

SQLITE_BUSY_TIMEOUT_MS = 30_000
# A write transaction's BEGIN IMMEDIATE waits in slices this long, looking at the lock's holder in between.
SQLITE_WRITE_SLICE_MS = 250

WRITE_HOLD_ENV = "PARTBUILD_WRITE_HOLD_S"
WRITE_WAIT_ENV = "PARTBUILD_WRITE_WAIT_S"
DEFAULT_WRITE_HOLD_S = 5.0
DEFAULT_WRITE_WAIT_S = 30.0
# PostgreSQL's SQLSTATEs for the two bounds, and for a write refused by a database that only reads.
_LOCK_NOT_AVAILABLE = "55P03"
_READ_ONLY_TRANSACTION = "25006"
_IDLE_IN_TRANSACTION_TIMEOUT = "25P03"

# Execution option read by the SQLite "begin" listener: start with BEGIN IMMEDIATE.
_BEGIN_IMMEDIATE = "partbuild_begin_immediate"

# Arbitrary constant key for PostgreSQL's transaction-scoped advisory lock that
# serializes schema migrations run by several processes at once.
_MIGRATION_LOCK_KEY = 0x70617274  # "part"


@dataclass(frozen=True)
class WriteBounds:
    """How long a writer may sit inside its write transaction (`hold_s`) and wait for the lock (`wait_s`)."""

    hold_s: float = DEFAULT_WRITE_HOLD_S
    wait_s: float = DEFAULT_WRITE_WAIT_S

    @classmethod
    def from_env(cls) -> WriteBounds:
        """The bounds `PARTBUILD_WRITE_HOLD_S` and `PARTBUILD_WRITE_WAIT_S` set (seconds), or the defaults."""
        return cls(_seconds(WRITE_HOLD_ENV, DEFAULT_WRITE_HOLD_S), _seconds(WRITE_WAIT_ENV, DEFAULT_WRITE_WAIT_S))


class WriteBoundSettingError(ValueError):
    """A write-lock bound set in the environment is not a number of seconds in range."""


def _seconds(name: str, default: float) -> float:
    text = os.environ.get(name, "").strip()
    if not text:
        return default
    try:
        value = float(text)
    except ValueError:
        raise WriteBoundSettingError(f"{name} must be a number of seconds, got {text!r}") from None
    if not 0.1 <= value <= 86_400:
        raise WriteBoundSettingError(f"{name} must be between 0.1 and 86400 seconds, got {text!r}")
    return value


class WriteNotDone(Exception):
    """A write transaction that wrote nothing, because of a write-lock bound: retry it (on fresh state)."""


class DatabaseReadOnly(Exception):
    """A write the database refused because it only reads: a PostgreSQL hot standby, a read-only session.
    Nothing was written, and retrying here will not help: writes go to the primary."""

    def __init__(self) -> None:
        super().__init__(
            "the database is read-only (a PostgreSQL hot standby or a read-only session): nothing was written; "
            "send writes to a server on the primary"
        )


def refused_as_read_only(exc: BaseException) -> bool:
    """Whether `exc` is the database refusing a write because it only reads (SQLSTATE 25006)."""
    return isinstance(exc, DatabaseReadOnly) or (
        isinstance(exc, sa.exc.DBAPIError) and getattr(exc.orig, "sqlstate", None) == _READ_ONLY_TRANSACTION
    )


def driver_message(exc: sa.exc.DBAPIError) -> str:
    """The driver's own words for a database error, on one line: not SQLAlchemy's, which add the statement
    and its parameters (values that must not reach an error message)."""
    said = " ".join(str(exc.orig).split())
    return said or type(exc.orig).__name__


def read_only(engine: Engine) -> bool:
    """Whether the database takes no writes: a PostgreSQL server in recovery (a hot standby) or whose sessions
    are read-only by default. A SQLite file is written by whoever opens it."""
    if backend(engine) != "postgresql":
        return False
    with engine.connect() as conn:
        query = "SELECT pg_is_in_recovery() OR current_setting('transaction_read_only') = 'on'"
        return bool(conn.exec_driver_sql(query).scalar_one())


class WriteLockTimeout(WriteNotDone):
    """The write lock stayed held by another writer for the whole wait bound."""

    def __init__(self, wait_s: float) -> None:
        super().__init__(
            f"the database's write lock stayed held by another writer for {wait_s:g} s "
            f"(the wait bound, {WRITE_WAIT_ENV}); nothing was written: retry"
        )


class WriteLockLost(WriteNotDone):
    """This writer sat inside its transaction past the hold bound (frozen): the server ended it."""

    def __init__(self, hold_s: float) -> None:
        super().__init__(
            f"this writer held the write lock idle for over {hold_s:g} s (the hold bound, {WRITE_HOLD_ENV}; "
            "stopped or frozen?): the database ended its transaction; nothing was written: retry"
        )


_BOUNDS: weakref.WeakKeyDictionary[Engine, WriteBounds] = weakref.WeakKeyDictionary()


def write_bounds(engine: Engine) -> WriteBounds:
    """The write-lock bounds `engine` was created with (the defaults for an engine made elsewhere)."""
    return _BOUNDS.get(engine, WriteBounds())


def normalize_url(url: str | URL) -> URL:
    """Parse `url`, routing plain PostgreSQL URLs to the psycopg 3 driver."""
    parsed = make_url(url)
    if parsed.drivername in ("postgresql", "postgres"):
        parsed = parsed.set(drivername="postgresql+psycopg")
    return parsed


def create_engine_for(url: str | URL) -> Engine:
    """Create an engine for a SQLite file (embedded default) or PostgreSQL (psycopg 3)."""
    parsed = normalize_url(url)
    backend = parsed.get_backend_name()
    bounds = WriteBounds.from_env()
    if backend == "sqlite":
        engine = _sqlite_engine(parsed, bounds)
    elif backend == "postgresql":
        if parsed.get_driver_name() != "psycopg":
            raise ValueError(f"unsupported PostgreSQL driver {parsed.drivername!r}: use postgresql+psycopg://")
        # READ COMMITTED pinned, whatever the server default: a writer waiting on the
        # log_head row lock must then re-read the new head rather than fail with a
        # serialization error (see EventLog.append). pre_ping: a long-lived
        # orchestrator must survive a server restart.
        engine = sa.create_engine(parsed, isolation_level="READ COMMITTED", pool_pre_ping=True)
    else:
        raise ValueError(f"unsupported database URL {parsed.render_as_string()!r}: use sqlite:// or postgresql://")
    _BOUNDS[engine] = bounds
    return engine


def _sqlite_engine(url: URL, bounds: WriteBounds) -> Engine:
    engine = sa.create_engine(url)
    database = url.database
    # A frozen holder can be found only behind a database file (an in-memory database has no other process).
    file = (
        Path(database).resolve() if database and database != ":memory:" and not database.startswith("file:") else None
    )

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        # pysqlite's legacy mode only BEGINs before DML, so SELECTs and DDL would run
        # outside the transaction. Take transaction control away from the driver...
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        try:
            # busy_timeout first: switching to WAL itself may wait on another process.
            cursor.execute(f"PRAGMA busy_timeout = {SQLITE_BUSY_TIMEOUT_MS}")
            # WAL: readers never block the writer and vice versa (a tailing reader
            # runs while orchestrators append).
            cursor.execute("PRAGMA journal_mode = WAL")
            # NORMAL is durable against application crashes in WAL mode and avoids
            # an fsync per commit; a power loss may lose the last commits only.
            cursor.execute("PRAGMA synchronous = NORMAL")
        finally:
            cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        # ...and emit BEGIN ourselves so every SQLAlchemy transaction is a real one.
        # BEGIN IMMEDIATE takes the write lock now (waiting up to busy_timeout) rather
        # than at the first write, where a deferred upgrade can fail with SQLITE_BUSY
        # without waiting when another writer committed in between.
        if conn.get_execution_options().get(_BEGIN_IMMEDIATE, False):
            _begin_immediate(conn.connection.dbapi_connection, file, bounds)
        else:
            conn.exec_driver_sql("BEGIN")

    return engine


def _begin_immediate(dbapi_connection: Any, file: Path | None, bounds: WriteBounds) -> None:
    """BEGIN IMMEDIATE within the wait bound, in slices, fencing a holder stopped for the hold bound between them."""
    deadline = time.monotonic() + bounds.wait_s
    watch = FrozenWriterWatch(file, bounds.hold_s) if file is not None else None
    # The slice is this BEGIN's alone: other statements keep the long busy_timeout (the pragma is not transactional).
    dbapi_connection.execute(f"PRAGMA busy_timeout = {SQLITE_WRITE_SLICE_MS}")
    try:
        while True:
            try:
                dbapi_connection.execute("BEGIN IMMEDIATE")
                return
            except sqlite3.OperationalError as exc:
                if exc.sqlite_errorcode & 0xFF != sqlite3.SQLITE_BUSY:
                    raise
            if time.monotonic() >= deadline:
                raise WriteLockTimeout(bounds.wait_s)
            if watch is not None:
                watch.look()
    finally:
        dbapi_connection.execute(f"PRAGMA busy_timeout = {SQLITE_BUSY_TIMEOUT_MS}")


@contextmanager
def begin_write(engine: Engine, *, bounded: bool = False) -> Iterator[Connection]:
    """A transaction that will write: on SQLite it holds the write lock from BEGIN (within the bounds).

    On PostgreSQL this is an ordinary transaction; row locks are taken by the
    statements themselves; `bounded` (appends) sets the lock wait and idle
    bounds for the transaction. Raises `WriteLockTimeout` or `WriteLockLost`
    (nothing written) when a bound ended it.
    """
    bounds = write_bounds(engine)
    began = time.monotonic()
    with engine.connect() as conn:
        conn.execution_options(**{_BEGIN_IMMEDIATE: True})
        try:
            with conn.begin():
                if bounded and conn.dialect.name == "postgresql":
                    conn.execute(
                        _PG_BOUNDS, {"wait": f"{int(bounds.wait_s * 1000)}", "hold": f"{int(bounds.hold_s * 1000)}"}
                    )
                yield conn
        except sa.exc.DBAPIError as exc:
            code = getattr(exc.orig, "sqlstate", None)
            if code == _LOCK_NOT_AVAILABLE:
                raise WriteLockTimeout(bounds.wait_s) from exc
            if code == _READ_ONLY_TRANSACTION:
                raise DatabaseReadOnly from exc
            if code == _IDLE_IN_TRANSACTION_TIMEOUT or _ended_while_held(exc, bounded, began, bounds):
                raise WriteLockLost(bounds.hold_s) from exc
            raise


def _ended_while_held(exc: sa.exc.DBAPIError, bounded: bool, began: float, bounds: WriteBounds) -> bool:
    """Whether a bounded PostgreSQL write lost its connection after sitting in it past the hold bound.

    The server ends such a session with a FATAL 25P03, but a writer that wakes up
    late may find only the closed socket ("server closed the connection
    unexpectedly"), without the code. A session idle inside its transaction never
    received a COMMIT, so nothing was written either way.
    """
    held_s = time.monotonic() - began
    return bounded and exc.connection_invalidated and exc.orig is not None and held_s >= bounds.hold_s


# One statement (one round trip) sets both bounds, local to the transaction: other transactions keep the defaults.
_PG_BOUNDS = sa.text(
    "SELECT set_config('lock_timeout', :wait, true), set_config('idle_in_transaction_session_timeout', :hold, true)"
)


@contextmanager
def begin_snapshot(engine: Engine) -> Iterator[Connection]:
    """A read-only transaction whose statements all see one snapshot of the database.

    SQLite (WAL): a deferred BEGIN's snapshot starts at its first read and holds to the end.
    PostgreSQL: REPEATABLE READ for this transaction only (the engine pins READ COMMITTED).
    """
    with engine.connect() as conn:
        if conn.dialect.name == "postgresql":
            conn.execution_options(isolation_level="REPEATABLE READ")
        with conn.begin():
            yield conn


def backend(bind: Engine | Connection) -> str:
    """ "sqlite" or "postgresql": the backend behind an engine or connection of `create_engine_for`."""
    return bind.dialect.name


ConflictInsert = postgresql.Insert | sqlite.Insert


def insert_ignoring_conflicts(
    conn: Connection, table: sa.Table, index_elements: list[str] | None = None
) -> ConflictInsert:
    """An INSERT into `table` that skips rows conflicting on `index_elements` (any unique index if None).

    Both backends speak `ON CONFLICT ... DO NOTHING`, each through its own dialect's construct; the
    statement still takes `.values()` and `.returning()` (the rows actually inserted).
    """
    return _conflict_insert(conn, table).on_conflict_do_nothing(index_elements=index_elements)


def bulk_insert(conn: Connection, table: sa.Table, rows: Sequence[tuple[Any, ...]]) -> None:
    """Insert many rows, each given in the table's column order, in the caller's transaction; a row whose key
    is taken fails the insert (the callers' keys cannot be).

    PostgreSQL: COPY, about 4x the rows per second of an executemany (200,000 rows of `state_changes`:
    0.49 s against 2.12 s). SQLite: one executemany of plain tuples, no per-row SQLAlchemy processing.
    """
    if not rows:
        return
    names = [column.name for column in table.columns]
    if conn.dialect.name == "postgresql":
        import psycopg  # only PostgreSQL deployments need it

        driver = conn.connection.dbapi_connection  # the transaction's own connection
        assert isinstance(driver, psycopg.Connection)
        with driver.cursor() as cursor, cursor.copy(f"COPY {table.name} ({', '.join(names)}) FROM STDIN") as copy:
            for row in rows:
                copy.write_row(row)
        return
    conn.exec_driver_sql(f"INSERT INTO {table.name} ({', '.join(names)}) VALUES ({', '.join('?' * len(names))})", rows)


def write_newer_rows(conn: Connection, table: sa.Table, rows: Sequence[tuple[Any, ...]], version: str) -> None:
    """Insert rows given in `table`'s column order, or replace those whose key is taken, unless the row there
    has a greater `version` column (a newer one that another writer wrote first stays).

    One statement on PostgreSQL (the rows as arrays, `unnest`): a writer stopped between the statements of a
    pipelined executemany would keep its locks past the hold bound (see `_PG_INSERT_EVENTS`).
    """
    if not rows:
        return
    names = [column.name for column in table.columns]
    keys = [column.name for column in table.primary_key.columns]
    # In key order: each index's pages are then touched once, in one sweep, not once per row at random (UUID keys
    # in a table larger than the page cache: 14 % less time writing a bounded replay's rows at 250k events).
    rows = sorted(rows, key=itemgetter(*(names.index(key) for key in keys)))
    changed = ", ".join(f"{name} = excluded.{name}" for name in names if name not in keys)
    conflict = (
        f"ON CONFLICT ({', '.join(keys)}) DO UPDATE SET {changed} WHERE {table.name}.{version} <= excluded.{version}"
    )
    if conn.dialect.name == "postgresql":
        arrays = ", ".join(f"CAST(:{name} AS {_pg_type(table.c[name])}[])" for name in names)
        statement = f"INSERT INTO {table.name} ({', '.join(names)}) SELECT * FROM unnest({arrays}) {conflict}"
        conn.execute(sa.text(statement), {name: [row[i] for row in rows] for i, name in enumerate(names)})
        return
    marks = ", ".join("?" * len(names))
    conn.exec_driver_sql(f"INSERT INTO {table.name} ({', '.join(names)}) VALUES ({marks}) {conflict}", rows)


def delete_keys(conn: Connection, table: sa.Table, keys: Sequence[tuple[Any, str]]) -> None:
    """Delete the rows of these (first key column, second key column) keys, a statement per first column's
    value and chunk: `a = ? AND b IN (...)`, which SQLite searches the key's index with (a row value IN
    would search by the first column alone)."""
    first, second = table.primary_key.columns
    by_first: dict[Any, list[str]] = {}
    for a, b in keys:
        by_first.setdefault(a, []).append(b)
    for a, bs in by_first.items():
        for start in range(0, len(bs), 500):
            conn.execute(sa.delete(table).where(first == a, second.in_(bs[start : start + 500])))


def _pg_type(column: sa.Column[Any]) -> str:
    return {"SMALLINT": "smallint", "BIGINT": "bigint", "BYTEA": "bytea"}.get(
        str(column.type.compile(dialect=postgresql.dialect())), "text"
    )


def upsert(
    conn: Connection, table: sa.Table, index_elements: list[str], update: list[str], *, only_up: str | None = None
) -> ConflictInsert:
    """An INSERT into `table` whose rows conflicting on `index_elements` set the `update` columns instead
    (`only_up`: only where the row's value of that column is less than the new one's)."""
    statement = _conflict_insert(conn, table)
    changes = {name: statement.excluded[name] for name in update}
    where = None if only_up is None else table.c[only_up] < statement.excluded[only_up]
    return statement.on_conflict_do_update(index_elements=index_elements, set_=changes, where=where)


def _conflict_insert(conn: Connection, table: sa.Table) -> ConflictInsert:
    return postgresql.insert(table) if conn.dialect.name == "postgresql" else sqlite.insert(table)


def lock_rows(query: Select[Any]) -> Select[Any]:
    """`query` locking the rows it reads until the transaction ends (`FOR UPDATE`).

    PostgreSQL locks the rows. SQLite has no row locks and its compiler drops the clause: a write
    transaction (`begin_write`) already holds the whole database's write lock from its BEGIN.
    """
    return query.with_for_update()


def lock_for_migration(conn: Connection) -> None:
    """Serialize schema migrations of concurrent processes for the rest of `conn`'s transaction.

    SQLite needs nothing here: `begin_write` already holds the database write lock.
    """
    if conn.dialect.name == "postgresql":
        conn.execute(sa.text("SELECT pg_advisory_xact_lock(:key)"), {"key": _MIGRATION_LOCK_KEY})


# PostgreSQL channel on which every append announces itself (delivered at commit). One per schema:
# notifications are database-wide, and two logs in two schemas must not wake each other's readers.
# The server computes the name, so an append costs no extra round trip.
_APPEND_CHANNEL_SQL = "'partbuild_log_' || md5(current_schema())"


def notify_append(conn: Connection) -> None:
    """Wake listeners in other processes once this transaction commits; nothing to do on SQLite."""
    if conn.dialect.name == "postgresql":
        conn.exec_driver_sql(f"SELECT pg_notify({_APPEND_CHANNEL_SQL}, '')")


def libpq_conninfo(url: URL) -> str:
    """A PostgreSQL URL as libpq (psycopg) takes it: without SQLAlchemy's driver suffix, options= and all."""
    return url.set(drivername="postgresql").render_as_string(hide_password=False)


class AppendListener:
    """Blocks until some process commits an append (PostgreSQL LISTEN/NOTIFY) or a timeout passes.

    A hint, not a guarantee: a notification that arrives between two waits can be
    missed, so callers always re-read the log after waking and keep the timeout short.
    """

    def __init__(self, url: URL) -> None:
        import psycopg  # only PostgreSQL deployments need it
        from psycopg import sql

        self._conn = psycopg.connect(libpq_conninfo(url), autocommit=True)
        try:
            row = self._conn.execute(f"SELECT {_APPEND_CHANNEL_SQL}").fetchone()
            assert row is not None  # a SELECT of one expression has one row
            channel = row[0]
            self._conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel)))
        except BaseException:
            self._conn.close()
            raise

    def wait(self, timeout_s: float) -> bool:
        """True when an append was announced within `timeout_s`."""
        for _ in self._conn.notifies(timeout=max(timeout_s, 0.0), stop_after=1):
            return True
        return False

    def close(self) -> None:
        self._conn.close()


def open_append_listener(engine: Engine) -> AppendListener | None:
    """A listener where the backend can push appends (PostgreSQL); None where callers must poll (SQLite, a
    PostgreSQL hot standby)."""
    if engine.dialect.name != "postgresql":
        return None
    import psycopg

    try:
        return AppendListener(engine.url)
    except psycopg.errors.ReadOnlySqlTransaction:
        return None  # a hot standby cannot LISTEN (and NOTIFY is not replicated): its readers poll
