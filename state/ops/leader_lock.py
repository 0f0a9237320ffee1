"""The leader lock of a worker group: whoever holds it leads; no election code of ours.

PostgreSQL: a session-level advisory lock (`pg_try_advisory_lock`) held on a
dedicated connection that lives as long as the leadership. When the holder dies,
its connection closes and the server drops the lock: a SIGKILLed leader loses it
at once, a leader whose machine vanished once the server's TCP keepalives give
up on the connection (set short on this connection: about 10 + 3 x 5 s). The
connection's `application_name` names the holder's task: `partbuild-leader
<task digest>` (`task_digest`: 16 hex digits of BLAKE2b, since PostgreSQL cuts
application names at 63 bytes), set when connecting, so before the lock is held.

SQLite: a POSIX record lock (`fcntl` F_SETLK, exclusive, whole file) on a file
next to the database, `<db file>.group-<name>.lock`. The kernel drops it when the
holder's process dies, and tells who holds it (F_GETLK reports the holder's pid);
the holder also writes its pid, host and task id into the file (JSON), for
people and to confirm that pid. The file is never deleted (a deleted lock file
would let a second process lock a new file of the same name). Why record locks
rather than `flock`: the kernel's pid is the one fact a survivor may act on (a
pid read only from the file could be a dead holder's, since reused), and a
record lock is not inherited by a child forked without exec. The price is
POSIX's per-process semantics: a process's locks on a file are released when it
closes *any* descriptor of that file, and two lock objects in one process do not
exclude each other by themselves. So the module opens each lock file once per
process (`_LockFile`, as SQLite does for its own database files) and lock
objects of one process share that descriptor, one holder at a time. Nothing else
in the process may open the lock file. `flock` and record locks do not see each
other on Linux: members of one group must not mix versions from before and after
this switch (two leaders at once would only waste epochs: the fold rejects the
stale one). All members of a SQLite group run on one machine; on a network file
system the kernel may report a remote holder's pid, which is why the file's own
claim (pid and host) must match before anything is done to that pid.

Taking the lock away. A paused holder (SIGSTOP, a long GC pause, a frozen VM)
keeps the lock on both backends: its process and connection are alive. The
group must survive any member's loss, its leader's included, so a lock can be
taken from its holder: `holder()` says who holds it and `expel(holder)` ends
that hold. PostgreSQL: `pg_terminate_backend` of the holder's session (the
server then frees the lock; needs the same role or `pg_signal_backend`). File
lock: SIGKILL to the holder's process, fencing by killing (STONITH): it has
been expelled by the group's rules and would exit on waking anyway. Only a
holder that declared itself a partbuild leader lock is expelled (an advisory
lock of another tool that happens to use the key is never touched), never our
own process. Whether a holder deserves it is the group's decision, not this
module's (`orchestrator.group`: a holder that is not a live member). The lock
still does not fence on its own: a leader that acted before being expelled is
stopped by the fold, which rejects decisions of an epoch that is no longer current.

A lock object is meant for one thread (the group loop of one worker).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import os
import re
import select
import signal
import socket
import struct
import sys
import threading
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from sqlalchemy.engine import URL, Engine

from partbuild.state.db import libpq_conninfo
from partbuild.state.ops.members import MAX_HOST_LENGTH, check_group_name

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


def task_digest(task_id: str) -> str:
    """How a lock holder names its task: 16 hex digits of BLAKE2b (task ids may be longer than a name allows)."""
    return hashlib.blake2b(task_id.encode(), digest_size=8).hexdigest()


def _application_name(digest: str | None) -> str:
    """The application_name of a lock connection held for the task of `digest` (or for none)."""
    return LEADER_APPLICATION if digest is None else f"{LEADER_APPLICATION} {digest}"


def this_host() -> str:
    """This machine's name as member rows record it."""
    return socket.gethostname()[:MAX_HOST_LENGTH]


@dataclass(frozen=True)
class LockHolder:
    """Who holds a group's lock (someone else than the asking lock object), as the lock's mechanism tells."""

    pid: int  # PostgreSQL: the holder's server backend; file lock: the holder's process, from the kernel
    task_digest: str | None  # `task_digest` of the task the holder declared; None when it declared none
    host: str | None  # file lock: the host of process `pid` (this one); PostgreSQL: None (a server backend)
    ours: bool  # it declared itself a partbuild leader lock: only such a holder may be expelled
    description: str  # for messages: the application name, or the file's pid and content


class ExpelRefused(Exception):
    """The database or the operating system refused to end a holder's hold (permissions)."""


class LeaderLock(ABC):
    """Non-blocking leadership of one group. Holding it is leading.

    `task_id` is the task the lock holds for (its member's): other members read it
    from `holder()` to judge whether the holder is alive. None for a lock held by
    no member (tests, tools): such a holder is never a live member.
    """

    expulsion = "expelled"  # what `expel` does to a holder, for messages

    def __init__(self, group: str, task_id: str | None = None) -> None:
        self.group = check_group_name(group)
        self.task_id = task_id

    @abstractmethod
    def try_acquire(self) -> bool:
        """Take the lock if it is free, without waiting; True when this object holds it now."""

    @abstractmethod
    def is_held(self) -> bool:
        """True while this object still holds the lock (checks with the database or file system)."""

    @abstractmethod
    def release(self) -> None:
        """Give the lock up if held; safe to call more than once."""

    @abstractmethod
    def holder(self) -> LockHolder | None:
        """Who holds the lock now; None when nobody does, or this object itself."""

    @abstractmethod
    def expel(self, holder: LockHolder, wait_ms: int = 1000) -> bool:
        """End `holder`'s hold if it still holds the lock; True when it was ended (the lock is free or freeing).

        Waits up to `wait_ms` for the holder to be gone, so that the next `try_acquire`
        usually succeeds (a later one does when the holder is slower to go). False,
        doing nothing, for a holder that is not `ours`, that no longer holds the
        lock, or (file lock) that is this very process. ExpelRefused when not permitted.
        """

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
            schema = conn.execute("SELECT current_schema()").fetchone()[0]
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


class _LockFile:
    """A lock file as this process has it open: one descriptor shared by the process's lock objects.

    POSIX record locks belong to the process: closing any descriptor of the file
    would release them, and the process's own lock never conflicts with itself.
    So each file is opened once per process and `holder` says which lock object
    of the process, if any, holds it. Guarded by `_FILES_GUARD`.
    """

    def __init__(self, fd: int, key: tuple[int, int]) -> None:
        self.fd = fd
        self.key = key  # (st_dev, st_ino)
        self.users = 1  # lock objects using the descriptor now; closed when none is left
        self.holder: FileLeaderLock | None = None
        self.spare: list[int] = []  # other descriptors of this file (a race in `_open`): closed with it, not before


_FILES_GUARD = threading.Lock()
_FILES: dict[tuple[int, int], _LockFile] = {}


def _forget_files_in_child() -> None:
    """A forked child holds no record lock of its parent: its copies of the lock objects must not say otherwise."""
    global _FILES_GUARD
    _FILES_GUARD = threading.Lock()  # another thread may have held it at the fork
    for file in _FILES.values():
        file.holder = None
    _FILES.clear()  # the child's copies of the descriptors stay open: closing them would be harmless, but pointless


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_files_in_child)


def _open_file(path: Path) -> _LockFile:
    """The process's descriptor of the lock file at `path` (created if missing), with one more user."""
    with contextlib.suppress(FileNotFoundError):
        found = os.stat(path)
        file = _FILES.get((found.st_dev, found.st_ino))
        if file is not None:
            file.users += 1
            return file
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    opened = os.fstat(fd)
    key = (opened.st_dev, opened.st_ino)
    file = _FILES.get(key)
    if file is None:
        file = _FILES[key] = _LockFile(fd, key)
    else:  # the path was switched to a file we had open: closing `fd` now would drop our lock on it
        file.spare.append(fd)
        file.users += 1
    return file


def _close_file(file: _LockFile) -> None:
    """One user less; the last one closes the descriptors (no lock object of this process holds the file then)."""
    file.users -= 1
    if file.users == 0:
        del _FILES[file.key]
        for fd in (file.fd, *file.spare):
            os.close(fd)


def _try_lock(fd: int) -> bool:
    """An exclusive record lock on the whole file, without waiting; whether we got it."""
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        if exc.errno in (errno.EACCES, errno.EAGAIN):
            return False
        raise
    return True


# struct flock: Linux (64-bit) puts type and whence first, the BSDs and macOS last.
_FLOCK = "hhqqi4x" if sys.platform.startswith("linux") else "qqihh"


def _lock_owner(fd: int) -> int | None:
    """The pid of the process holding a record lock on the file (F_GETLK), None when nobody else does.

    0 or -1 when the kernel cannot say (a process in another pid namespace, an
    open file description lock); `FileLeaderLock.expel` never acts on those.
    """
    if sys.platform.startswith("linux"):
        query = struct.pack(_FLOCK, fcntl.F_WRLCK, os.SEEK_SET, 0, 0, 0)
        kind, _, _, _, pid = struct.unpack(_FLOCK, fcntl.fcntl(fd, fcntl.F_GETLK, query))
    else:
        query = struct.pack(_FLOCK, 0, 0, 0, fcntl.F_WRLCK, os.SEEK_SET)
        _, _, pid, kind, _ = struct.unpack(_FLOCK, fcntl.fcntl(fd, fcntl.F_GETLK, query))
    return None if kind == fcntl.F_UNLCK else int(pid)


def _claim(task_id: str | None) -> bytes:
    """What a holder writes into the lock file: who it is (a JSON line)."""
    return json.dumps({"pid": os.getpid(), "host": this_host(), "task": task_id}).encode() + b"\n"


def _file_holder(pid: int, content: bytes) -> LockHolder:
    """The holder `pid` reported by the kernel, `ours` only if the file's claim names that very process here."""
    try:
        claim = json.loads(content)
        claimed = (int(claim["pid"]), str(claim["host"]))
        task = claim["task"]
    except (ValueError, TypeError, KeyError):
        claimed, task = None, None
    # A claim of another pid is stale (the holder has just taken the lock and not written yet),
    # or says nothing about `pid` (another pid namespace, a remote holder on a network file system).
    ours = claimed == (pid, this_host())
    digest = task_digest(task) if ours and isinstance(task, str) else None
    text = content.decode(errors="replace").strip()[:300]
    return LockHolder(pid, digest, this_host(), ours, f"process {pid} (lock file: {text!r})")


class FileLeaderLock(LeaderLock):
    """An exclusive POSIX record lock on `<db file>.group-<name>.lock` (see the module doc for why not `flock`)."""

    expulsion = "killed it with SIGKILL"

    def __init__(self, database: Path, group: str, task_id: str | None = None) -> None:
        super().__init__(group, task_id)
        self.path = database.with_name(f"{database.name}.group-{self.group}.lock")
        self._file: _LockFile | None = None  # while held

    def try_acquire(self) -> bool:
        if self._file is not None:
            return self.is_held()
        with _FILES_GUARD:
            file = _open_file(self.path)
            if file.holder is not None or not _try_lock(file.fd):
                _close_file(file)
                return False
            file.holder, self._file = self, file
        if not self.is_held():  # the file was replaced between our open and our lock
            return False
        os.ftruncate(file.fd, 0)
        os.pwrite(file.fd, _claim(self.task_id), 0)
        return True

    def is_held(self) -> bool:
        """Held while our locked file is still the one at the path (nobody deleted or replaced it)."""
        file = self._file
        if file is None:
            return False
        try:
            ours, current = os.fstat(file.fd), os.stat(self.path)
        except FileNotFoundError:
            current = None
        if file.holder is not self or current is None or (ours.st_dev, ours.st_ino) != (current.st_dev, current.st_ino):
            self.release()
            return False
        return True

    def release(self) -> None:
        file, self._file = self._file, None
        if file is None:
            return
        with _FILES_GUARD:
            if file.holder is self:
                fcntl.lockf(file.fd, fcntl.LOCK_UN)
                file.holder = None
                _close_file(file)

    def holder(self) -> LockHolder | None:
        """The process holding the lock, from the kernel, with what the lock file says about it."""
        with _FILES_GUARD:
            file = _open_file(self.path)
            try:
                mate = file.holder
                if mate is not None:  # another lock object of this process: the kernel hides our own locks
                    pid, content = (os.getpid(), _claim(mate.task_id)) if mate is not self else (None, b"")
                else:
                    pid, content = _lock_owner(file.fd), os.pread(file.fd, 4096, 0)
            finally:
                _close_file(file)
        return None if pid is None else _file_holder(pid, content)

    def expel(self, holder: LockHolder, wait_ms: int = 1000) -> bool:
        """SIGKILL the holding process, if it is still the one holding the lock and claiming it."""
        if not holder.ours or holder.pid <= 0 or holder.pid == os.getpid() or holder.host != this_host():
            return False
        # Pin the process first, check it still holds the lock, then signal the pinned process:
        # a pid freed and reused in between can then never receive the signal.
        pidfd = _pidfd_open(holder.pid)
        try:
            if self.holder() != holder:
                return False  # it let go (or died) meanwhile
            try:
                _kill(holder.pid, pidfd)
            except ProcessLookupError:
                return True  # gone already, and the lock with it
            except PermissionError as exc:
                raise ExpelRefused(f"not permitted to kill {holder.description}: {exc}") from None
            if pidfd is not None:  # readable once the process has exited: its locks are released by then
                poller = select.poll()
                poller.register(pidfd, select.POLLIN)
                poller.poll(max(0, int(wait_ms)))
        finally:
            if pidfd is not None:
                os.close(pidfd)
        return True


def _pidfd_open(pid: int) -> int | None:
    """A descriptor pinning process `pid` (Linux 5.3+), or None where there is none (then plain kill)."""
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return None  # no pidfd support, or the process is gone (the re-check then finds another holder or none)


def _kill(pid: int, pidfd: int | None) -> None:
    if pidfd is not None:
        signal.pidfd_send_signal(pidfd, signal.SIGKILL)
    else:
        os.kill(pid, signal.SIGKILL)


def open_leader_lock(engine: Engine, group: str, task_id: str | None = None) -> LeaderLock:
    """The leader lock of `group` for the database behind `engine`, held for `task_id` (nothing is locked yet)."""
    if engine.dialect.name == "postgresql":
        return PostgresLeaderLock(engine.url, group, task_id)
    if engine.dialect.name == "sqlite":
        database = engine.url.database
        if not database or database == ":memory:" or database.startswith("file:"):
            raise ValueError("a worker group on SQLite needs a database file: its leader lock is a file next to it")
        return FileLeaderLock(Path(database).resolve(), group, task_id)
    raise ValueError(f"no leader lock for the {engine.dialect.name} backend")
