"""SQLite: finding a stopped process that holds the database's write lock, and fencing it by SIGKILL.

SQLite has no server to end a frozen writer's transaction. In WAL mode the
write lock is a POSIX record lock (exclusive, byte 120 of the `-shm` file: the
WAL_WRITE_LOCK of SQLite's documented wal-index format), and a POSIX lock
cannot be taken from a live process: only its death releases it. So a writer
that cannot get the lock looks, between its waits, at who holds it (the
kernel's pid, from `/proc/locks`, without opening the `-shm` file: closing a
descriptor of it would drop this process's own SQLite locks) and at that
process's state (`/proc/<pid>/stat`). A holder seen stopped (SIGSTOP, a
debugger: state T or t) at every look for the hold bound is killed, pinned by a
pidfd and checked again just before the signal, the way the leader lock fences
a paused leader (`state/ops/leader_lock/sqlite.py`). A running holder is never
killed, however long it takes: the waiter then gives up at its wait bound.

Why this loses nothing: SQLite's commit is atomic. A transaction killed before
its commit frame reached the WAL is ignored by every reader (the wal-index
header only counts committed frames) and overwritten by the next writer; one
killed after it is committed, whole. The log rows and `log_head` are written in
one transaction, so an append is there entirely or not at all.

Linux only (`/proc`); elsewhere nothing is found and waiters only give up at
their wait bound. Never our own process, and only a holder this process can see
(a pid of 0, another pid namespace, is left alone). Any stopped holder of the
lock is fenced, partbuild's or not: the database's write lock is partbuild's,
and another tool must not hold a write transaction open on it.
"""

from __future__ import annotations

import logging
import os
import select
import signal
import time
from pathlib import Path

log = logging.getLogger(__name__)

WAL_WRITE_LOCK_BYTE = 120  # the wal-index's WAL_WRITE_LOCK: https://sqlite.org/walformat.html
_STOPPED_STATES = ("T", "t")  # stopped by a signal; stopped by a tracer (a debugger)
_DEATH_WAIT_MS = 5_000


def write_lock_holder(shm: Path) -> int | None:
    """The pid holding the write lock of the database whose wal-index is `shm`, None if nobody or unknown."""
    try:
        found = os.stat(shm)
        with open("/proc/locks", encoding="ascii", errors="replace") as locks:
            lines = locks.readlines()
    except OSError:
        return None
    device = f"{os.major(found.st_dev):02x}:{os.minor(found.st_dev):02x}:{found.st_ino}"
    for line in lines:
        fields = line.split()
        # "1: POSIX  ADVISORY  WRITE 27634 fe:00:2148722 120 120"; a waiter's line has "->" after the number.
        if len(fields) != 8 or fields[1:4] != ["POSIX", "ADVISORY", "WRITE"] or fields[5] != device:
            continue
        start, end = int(fields[6]), fields[7]
        if start <= WAL_WRITE_LOCK_BYTE and (end == "EOF" or int(end) >= WAL_WRITE_LOCK_BYTE):
            pid = int(fields[4])
            return pid if pid > 0 else None
    return None


def is_stopped(pid: int) -> bool:
    """Whether process `pid` is stopped (by a signal or a tracer) now."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as stat:
            text = stat.read()
    except OSError:
        return False
    # "pid (comm) S ...": comm may hold spaces and parentheses, so the state follows the last ")".
    return text[text.rfind(")") + 2 : text.rfind(")") + 3] in _STOPPED_STATES


class FrozenWriterWatch:
    """What one waiting writer has seen of the lock's holder, look after look; kills a holder stopped too long."""

    def __init__(self, database: Path, hold_s: float) -> None:
        self.shm = database.with_name(database.name + "-shm")
        self.hold_s = hold_s
        self._stopped: tuple[int, float] | None = None  # (pid, first look that saw it stopped holding the lock)

    def look(self) -> None:
        """Look at the holder once; SIGKILL it when every look for `hold_s` saw it stopped, holding the lock."""
        pid = write_lock_holder(self.shm)
        if pid is None or pid == os.getpid() or not is_stopped(pid):
            self._stopped = None
            return
        now = time.monotonic()
        if self._stopped is None or self._stopped[0] != pid:
            self._stopped = (pid, now)
            return
        if now - self._stopped[1] >= self.hold_s:
            self._stopped = None
            self._fence(pid)

    def _fence(self, pid: int) -> None:
        """SIGKILL `pid` if, pinned, it still holds the lock and is still stopped; wait for its locks to go."""
        try:
            pidfd = os.pidfd_open(pid)
        except OSError:
            return  # gone already (its locks with it), or no pidfd: the next look sees who holds the lock
        try:
            if write_lock_holder(self.shm) != pid or not is_stopped(pid):
                return
            try:
                signal.pidfd_send_signal(pidfd, signal.SIGKILL)
            except (ProcessLookupError, PermissionError) as exc:
                log.warning("process %d holds the database's write lock, stopped; could not kill it: %s", pid, exc)
                return
            log.warning(
                "process %d held the database's write lock while stopped for over %.1f s: killed it (SIGKILL); "
                "its transaction is rolled back by SQLite",
                pid,
                self.hold_s,
            )
            poller = select.poll()
            poller.register(pidfd, select.POLLIN)  # readable once the process has exited: its locks are gone
            poller.poll(_DEATH_WAIT_MS)
        finally:
            os.close(pidfd)
