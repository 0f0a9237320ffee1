"""The PostgreSQL leader lock: a session-level advisory lock on a connection of its own.

PostgreSQL: a session-level advisory lock (`pg_try_advisory_lock`) held on a
dedicated connection that lives as long as the leadership. When the holder dies,
its connection closes and the server drops the lock: a SIGKILLed leader loses it
at once, a leader whose machine vanished once the server's TCP keepalives give
up on the connection (set short on this connection: about 10 + 3 x 5 s). The
connection's `application_name` names the holder's task: `partbuild-leader
<task digest>` (`task_digest`: 16 hex digits of BLAKE2b, since PostgreSQL cuts
application names at 63 bytes), set when connecting, so before the lock is held.

Expelling a holder is `pg_terminate_backend` of its session (the server then
frees the lock; needs the same role or `pg_signal_backend`), and only of a
session whose application name declares a partbuild leader lock.
"""

from __future__ import annotations

import contextlib
import hashlib
import re
from typing import Any

from sqlalchemy.engine import URL, Engine

from partbuild.state.db import libpq_conninfo
from partbuild.state.ops.leader_lock.shared import ExpelRefused, LeaderLock, LockHolder, task_digest

# libpq options of the lock connection: fail fast when the server is gone, rather
# than believing in a lock the server may already have released.
_CLIENT_OPTIONS: dict[str, Any] = {
    "connect_timeout": 5,
    "keepalives": 1,
    "keepalives_idle": 5,
    "keepalives_interval": 2,
    "keepalives_count": 3,
    "tcp_user_timeout": 10_000,  # ms: unacknowledged data for this long breaks the connection
}
# Server side: how soon the server notices a vanished leader machine and drops its lock.
_SERVER_KEEPALIVES = {"tcp_keepalives_idle": 10, "tcp_keepalives_interval": 5, "tcp_keepalives_count": 3}
# The application_name of a lock connection: this, then a space and the task digest (if it has a task).
LEADER_APPLICATION = "partbuild-leader"
_DIGEST = re.compile(r"[0-9a-f]{16}")


def advisory_key(schema: str, group: str) -> int:
    """The advisory lock key of `group` in `schema`: 8 bytes of BLAKE2b as a signed int64.

    Advisory locks are per database, not per schema, so the schema is part of the
    key: two partbuild logs in two schemas of one database have separate groups.
    """
    digest = hashlib.blake2b(f"partbuild.group\x00{schema}\x00{group}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


def _application_name(digest: str | None) -> str:
    """The application_name of a lock connection held for the task of `digest` (or for none)."""
    return LEADER_APPLICATION if digest is None else f"{LEADER_APPLICATION} {digest}"


class PostgresLeaderLock(LeaderLock):
    """A session-level advisory lock on a connection of its own (psycopg, autocommit, no pool).

    No pool and no reconnection on purpose: a lost connection is lost leadership,
    and a silently reconnected session would not hold the lock.
    """

    expulsion = "terminated its session"

    def __init__(self, url: URL, group: str, task_id: str | None = None) -> None:
        super().__init__(group, task_id)
        self._conninfo = libpq_conninfo(url)
        self.application_name = _application_name(None if task_id is None else task_digest(task_id))
        self._conn: Any = None  # psycopg.Connection, opened on the first try
        self._key: int | None = None
        self._held = False

    @property
    def key(self) -> int | None:
        """The advisory lock key, known once connected (it depends on the connection's schema)."""
        return self._key

    def _connect(self) -> Any:
        import psycopg  # only PostgreSQL deployments need it

        conn = psycopg.connect(
            self._conninfo, autocommit=True, application_name=self.application_name, **_CLIENT_OPTIONS
        )
        try:
            for name, value in _SERVER_KEEPALIVES.items():
                conn.execute(f"SET {name} = {int(value)}")
            row = conn.execute("SELECT current_schema()").fetchone()
            assert row is not None  # a SELECT of one expression has one row
            schema = row[0]
        except BaseException:
            conn.close()
            raise
        self._key = advisory_key(schema, self.group)
        return conn

    def _key_parts(self) -> tuple[int, int]:
        """The key as pg_locks shows a bigint advisory key: two oids (classid, objid)."""
        assert self._key is not None  # set on connecting
        unsigned = self._key & 0xFFFF_FFFF_FFFF_FFFF
        return unsigned >> 32, unsigned & 0xFFFF_FFFF

    def _query(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        """Run `sql` on the lock connection (opened if need be); a broken connection is dropped and re-raised."""
        import psycopg

        try:
            if self._conn is None:
                self._conn = self._connect()
            return list(self._conn.execute(sql, params).fetchall())
        except psycopg.errors.InsufficientPrivilege:
            raise  # a refusal: the connection is fine
        except psycopg.Error:
            self._drop()  # the next try starts on a fresh connection
            raise

    def _connected(self) -> None:
        """Open the lock connection if it is not: the key depends on the connection's schema."""
        if self._conn is None:
            self._query("SELECT 1")

    def try_acquire(self) -> bool:
        if self._held:
            # pg_try_advisory_lock again would stack a second hold on the same session.
            return self.is_held()
        self._connected()
        self._held = bool(self._query("SELECT pg_try_advisory_lock(%s)", (self._key,))[0][0])
        return self._held

    def is_held(self) -> bool:
        if not self._held:
            return False
        import psycopg

        query = (
            "SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()"
            " AND classid::bigint = %s AND objid::bigint = %s AND objsubid = 1 AND granted)"
        )
        try:
            held = bool(self._conn.execute(query, self._key_parts()).fetchone()[0])
        except psycopg.Error:
            held = False
        if not held:
            self._drop()
        return held

    # The granted hold of our key in our database by another session, with that session's application name.
    _HOLDER = (
        " FROM pg_locks l LEFT JOIN pg_stat_activity a ON a.pid = l.pid WHERE l.locktype = 'advisory'"
        " AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())"
        " AND l.classid::bigint = %s AND l.objid::bigint = %s AND l.objsubid = 1 AND l.granted"
        " AND l.pid IS DISTINCT FROM pg_backend_pid()"
    )

    def holder(self) -> LockHolder | None:
        if self._held:
            return None
        self._connected()
        rows = self._query(f"SELECT l.pid, coalesce(a.application_name, ''){self._HOLDER}", self._key_parts())
        if not rows or rows[0][0] is None:
            return None  # free, or held by a prepared transaction (no session to end)
        pid, name = int(rows[0][0]), str(rows[0][1])
        word, _, digest = name.partition(" ")
        ours = word == LEADER_APPLICATION and (digest == "" or _DIGEST.fullmatch(digest) is not None)
        return LockHolder(pid, (digest or None) if ours else None, None, ours, f"session {pid} ({name!r})")

    def expel(self, holder: LockHolder, wait_ms: int = 1000) -> bool:
        """`pg_terminate_backend` of the holder's session, if it still holds the lock under the same name."""
        import psycopg

        if not holder.ours or self._conn is None:
            return False
        name = _application_name(holder.task_digest)
        # PostgreSQL 14 and later can wait for the session to be gone, and so the lock to be free.
        wait = f", {max(1, int(wait_ms))}" if self._conn.info.server_version >= 140000 else ""
        # One statement re-checks the holder and ends it: a pid seen a moment ago may be another session by now.
        query = f"SELECT pg_terminate_backend(l.pid{wait}){self._HOLDER} AND l.pid = %s AND a.application_name = %s"
        try:
            rows = self._query(query, (*self._key_parts(), holder.pid, name))
        except psycopg.errors.InsufficientPrivilege as exc:
            raise ExpelRefused(f"PostgreSQL refused to terminate {holder.description}: {exc}") from None
        return bool(rows)

    def release(self) -> None:
        import psycopg

        if self._held and self._conn is not None:
            # Unlock before closing: the server ends a closed session asynchronously, so
            # this makes the lock free by the time release returns. An error means the
            # connection is gone, and the lock with it.
            with contextlib.suppress(psycopg.Error):
                self._conn.execute("SELECT pg_advisory_unlock(%s)", (self._key,))
        self._drop()

    def _drop(self) -> None:
        self._held = False
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()


def open_lock(engine: Engine, group: str, task_id: str | None = None) -> PostgresLeaderLock:
    """The lock of `group` in the database behind `engine` (nothing is locked yet)."""
    return PostgresLeaderLock(engine.url, group, task_id)
