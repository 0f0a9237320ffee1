"""The leader lock of a worker group: whoever holds it leads; no election code of ours.

PostgreSQL: a session-level advisory lock (`pg_try_advisory_lock`) held on a
dedicated connection that lives as long as the leadership. When the holder dies,
its connection closes and the server drops the lock: a SIGKILLed leader loses it
at once, a leader whose machine vanished once the server's TCP keepalives give
up on the connection (set short on this connection: about 10 + 3 x 5 s).

SQLite: an OS file lock (`flock`, exclusive, non-blocking) on a file next to the
database, `<db file>.group-<name>.lock`. The kernel drops it when the holder's
process dies. The file is never deleted (a deleted lock file would let a second
process lock a new file of the same name); its content is the holder's pid, for
people. A child forked without exec shares the open file and so the lock.

A paused holder (SIGSTOP, a long GC pause, a frozen VM) keeps the lock on both
backends: its process and connection are alive. The lock therefore elects but
does not fence: a leader that wakes up after the group moved on must be stopped
by the fold, which rejects decisions of an epoch that is no longer current.

A lock object is meant for one thread (the group loop of one worker).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
from abc import ABC, abstractmethod
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from sqlalchemy.engine import URL, Engine

from partbuild.state.db import libpq_conninfo
from partbuild.state.members import check_group_name

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


def advisory_key(schema: str, group: str) -> int:
    """The advisory lock key of `group` in `schema`: 8 bytes of BLAKE2b as a signed int64.

    Advisory locks are per database, not per schema, so the schema is part of the
    key: two partbuild logs in two schemas of one database have separate groups.
    """
    digest = hashlib.blake2b(f"partbuild.group\x00{schema}\x00{group}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


class LeaderLock(ABC):
    """Non-blocking leadership of one group. Holding it is leading."""

    def __init__(self, group: str) -> None:
        self.group = check_group_name(group)

    @abstractmethod
    def try_acquire(self) -> bool:
        """Take the lock if it is free, without waiting; True when this object holds it now."""

    @abstractmethod
    def is_held(self) -> bool:
        """True while this object still holds the lock (checks with the database or file system)."""

    @abstractmethod
    def release(self) -> None:
        """Give the lock up if held; safe to call more than once."""

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.release()


class PostgresLeaderLock(LeaderLock):
    """A session-level advisory lock on a connection of its own (psycopg, autocommit, no pool).

    No pool and no reconnection on purpose: a lost connection is lost leadership,
    and a silently reconnected session would not hold the lock.
    """

    def __init__(self, url: URL, group: str) -> None:
        super().__init__(group)
        self._conninfo = libpq_conninfo(url)
        self._conn: Any = None  # psycopg.Connection, opened on the first try
        self._key: int | None = None
        self._held = False

    @property
    def key(self) -> int | None:
        """The advisory lock key, known once connected (it depends on the connection's schema)."""
        return self._key

    def _connect(self) -> Any:
        import psycopg  # only PostgreSQL deployments need it

        conn = psycopg.connect(self._conninfo, autocommit=True, **_CLIENT_OPTIONS)
        try:
            for name, value in _SERVER_KEEPALIVES.items():
                conn.execute(f"SET {name} = {int(value)}")
            schema = conn.execute("SELECT current_schema()").fetchone()[0]
        except BaseException:
            conn.close()
            raise
        self._key = advisory_key(schema, self.group)
        return conn

    def try_acquire(self) -> bool:
        if self._held:
            # pg_try_advisory_lock again would stack a second hold on the same session.
            return self.is_held()
        import psycopg

        try:
            if self._conn is None:
                self._conn = self._connect()
            self._held = bool(self._conn.execute("SELECT pg_try_advisory_lock(%s)", (self._key,)).fetchone()[0])
        except psycopg.Error:
            self._drop()  # the next try starts on a fresh connection
            raise
        return self._held

    def is_held(self) -> bool:
        if not self._held:
            return False
        import psycopg

        assert self._key is not None  # set on connecting, before the lock could be held
        unsigned = self._key & 0xFFFF_FFFF_FFFF_FFFF  # pg_locks shows a bigint key as two oids
        query = (
            "SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()"
            " AND classid::bigint = %s AND objid::bigint = %s AND objsubid = 1 AND granted)"
        )
        try:
            held = bool(self._conn.execute(query, (unsigned >> 32, unsigned & 0xFFFF_FFFF)).fetchone()[0])
        except psycopg.Error:
            held = False
        if not held:
            self._drop()
        return held

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


class FileLeaderLock(LeaderLock):
    """An exclusive `flock` on `<db file>.group-<name>.lock`, held through an open file descriptor."""

    def __init__(self, database: Path, group: str) -> None:
        super().__init__(group)
        self.path = database.with_name(f"{database.name}.group-{self.group}.lock")
        self._fd: int | None = None

    def try_acquire(self) -> bool:
        if self._fd is not None:
            return self.is_held()
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        self._fd = fd
        if not self.is_held():  # the file was replaced between our open and our lock
            return False
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        return True

    def is_held(self) -> bool:
        """Held while our locked file is still the one at the path (nobody deleted or replaced it)."""
        if self._fd is None:
            return False
        try:
            ours, current = os.fstat(self._fd), os.stat(self.path)
        except FileNotFoundError:
            current = None
        if current is None or (ours.st_dev, ours.st_ino) != (current.st_dev, current.st_ino):
            self.release()
            return False
        return True

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            # Unlock explicitly: closing alone would keep the lock while a forked child
            # still had the descriptor open.
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)


def open_leader_lock(engine: Engine, group: str) -> LeaderLock:
    """The leader lock of `group` for the database behind `engine` (nothing is locked yet)."""
    if engine.dialect.name == "postgresql":
        return PostgresLeaderLock(engine.url, group)
    if engine.dialect.name == "sqlite":
        database = engine.url.database
        if not database or database == ":memory:" or database.startswith("file:"):
            raise ValueError("a worker group on SQLite needs a database file: its leader lock is a file next to it")
        return FileLeaderLock(Path(database).resolve(), group)
    raise ValueError(f"no leader lock for the {engine.dialect.name} backend")
