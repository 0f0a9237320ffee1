"""The SQLite leader lock: a POSIX record lock on a file next to the database.

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

Expelling a holder is SIGKILL to its process (fencing by killing: it has been
expelled by the group's rules and would exit on waking anyway), only when the
file's claim names that very process on this host, never our own.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import select
import signal
import struct
import sys
import threading
from pathlib import Path

from sqlalchemy.engine import Engine

from partbuild.state.ops.leader_lock.shared import ExpelRefused, LeaderLock, LockHolder, task_digest, this_host


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


def open_lock(engine: Engine, group: str, task_id: str | None = None) -> FileLeaderLock:
    """The lock of `group` next to the SQLite database file behind `engine` (nothing is locked yet)."""
    database = engine.url.database
    if not database or database == ":memory:" or database.startswith("file:"):
        raise ValueError("a worker group on SQLite needs a database file: its leader lock is a file next to it")
    return FileLeaderLock(Path(database).resolve(), group, task_id)
