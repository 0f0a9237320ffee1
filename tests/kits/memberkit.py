"""A worker-group member as a real process, for tests that stop and kill it with real signals.

As a script: `python tests/kits/memberkit.py DB_URL GROUP TASK_ID [--heartbeat-ms N] [--timeout-ms N]`
joins the group, heartbeats, takes the leader lock when it is free and, while
leading, reaps dead members. It prints one JSON line per happening: joined,
leader, lost_leadership, reaped, declared_dead (then exits 3), left (on SIGTERM,
then exits 0). The database schema must be at head.

For tests: `MemberProcess` starts one and collects its lines as they come.
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from partbuild.orchestrator.group.membership import Group, MemberDeclaredDead
from partbuild.state.database import Database
from partbuild.state.db import create_engine_for
from partbuild.state.ops.leader_lock import LeaderLock

DECLARED_DEAD_EXIT = 3


def _emit(event: str, **fields: Any) -> None:
    print(json.dumps({"event": event, **fields}), flush=True)


def _lead(group: Group, lock: LeaderLock, leading: bool) -> bool:
    """One round of leadership: take the lock when free, notice losing it, reap while leading."""
    if not leading:
        leading = lock.try_acquire()
        if leading:
            _emit("leader")
    elif not lock.is_held():
        _emit("lost_leadership")
        return False
    if leading:
        for task_id in group.reap():
            _emit("reaped", task=task_id)
    return leading


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("db")
    parser.add_argument("group")
    parser.add_argument("task")
    parser.add_argument("--heartbeat-ms", type=int, default=100)
    parser.add_argument("--timeout-ms", type=int, default=1000)
    args = parser.parse_args(argv)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with Database.open(args.db, auto_upgrade=False) as db:
        group = Group(db, args.group, member_timeout_ms=args.timeout_ms)
        member = group.join(args.task)
        _emit("joined", task=member.task_id, pid=os.getpid())
        with member.leader_lock() as lock:
            leading = False
            while not stop.wait(args.heartbeat_ms / 1000):
                try:
                    member.heartbeat()
                except MemberDeclaredDead as exc:
                    _emit("declared_dead", how=exc.how.value)
                    return DECLARED_DEAD_EXIT
                leading = _lead(group, lock, leading)
        member.leave()
        _emit("left")
    return 0


class MemberProcess:
    """A running `memberkit.py` member: its process and the JSON lines it printed so far."""

    def __init__(self, db: str, group: str, task: str, *, heartbeat_ms: int = 100, timeout_ms: int = 1000) -> None:
        self.task = task
        command = [sys.executable, str(Path(__file__).resolve()), db, group, task]
        command += ["--heartbeat-ms", str(heartbeat_ms), "--timeout-ms", str(timeout_ms)]
        self.process = subprocess.Popen(command, stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True)
        self.events: list[dict[str, Any]] = []
        self._lines: queue.Queue[str | None] = queue.Queue()
        self._reader = threading.Thread(target=self._read, name=f"memberkit-{task}", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        with self.process.stdout:
            for line in self.process.stdout:
                self._lines.put(line)
        self._lines.put(None)

    def _drain(self, timeout_s: float) -> bool:
        """Collect the lines printed so far, waiting up to `timeout_s` for one; False at end of output."""
        try:
            line = self._lines.get(timeout=max(timeout_s, 0.0))
        except queue.Empty:
            return True
        while line is not None:
            self.events.append(json.loads(line))
            try:
                line = self._lines.get_nowait()
            except queue.Empty:
                return True
        return False

    def saw(self, event: str) -> list[dict[str, Any]]:
        """The lines of kind `event` printed so far."""
        self._drain(0)
        return [line for line in self.events if line["event"] == event]

    def wait_for(self, event: str, timeout_s: float) -> dict[str, Any]:
        """The first line of kind `event`, waiting up to `timeout_s` for it."""
        deadline = time.monotonic() + timeout_s
        running = True
        while True:
            if found := [line for line in self.events if line["event"] == event]:
                return found[0]
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not running:
                raise AssertionError(f"{self.task} printed no {event!r} within {timeout_s} s: {self.events}")
            running = self._drain(remaining)

    def signal(self, sig: signal.Signals) -> None:
        self.process.send_signal(sig)

    def stop(self) -> None:
        """End the process however it is (continued first if stopped), and reap it."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGCONT)
            self.process.kill()
        self.process.wait(timeout=10)
        self._reader.join(timeout=10)


def writes_blocked(db: str, *row_locks: str, **params: object) -> bool:
    """True when some transaction holds a write lock a writer needs: SQLite's database, or (PostgreSQL)
    one of the rows the `SELECT ... FOR UPDATE` statements `row_locks` take (with `params`)."""
    if db.startswith("sqlite"):
        probe = sqlite3.connect(db.removeprefix("sqlite:///"), timeout=0.2, isolation_level=None)
        try:
            probe.execute("BEGIN IMMEDIATE")
            probe.execute("ROLLBACK")
            return False
        except sqlite3.OperationalError:
            return True
        finally:
            probe.close()
    engine = create_engine_for(db)
    try:
        with engine.begin() as conn:
            conn.execute(sa.text("SET LOCAL lock_timeout = '200ms'"))
            for statement in row_locks:
                conn.execute(sa.text(statement), params)
        return False
    except sa.exc.OperationalError:
        return True
    finally:
        engine.dispose()


def pause(member: MemberProcess, db: str, group: str) -> None:
    """SIGSTOP `member` between two transactions, not inside one.

    A process stopped inside a transaction would hold its locks (SQLite's whole
    database, a PostgreSQL row) while stopped, and every writer would wait on it:
    stop, look, and continue and retry when it was caught holding one.
    """
    for _ in range(100):
        member.signal(signal.SIGSTOP)
        if not writes_blocked(db, "SELECT 1 FROM group_members WHERE group_name = :g FOR UPDATE", g=group):
            return
        member.signal(signal.SIGCONT)
        time.sleep(0.02)
    raise AssertionError(f"{member.task} was inside a transaction at each of 100 stops")


def first_leader(members: list[MemberProcess], timeout_s: float) -> MemberProcess:
    """The member that printed `leader` first, waiting up to `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        leaders = [member for member in members if member.saw("leader")]
        if leaders:
            return leaders[0]
        time.sleep(0.02)
    raise AssertionError(f"no leader within {timeout_s} s: {[m.events for m in members]}")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))


def wait_until(condition: Callable[[], bool], timeout_s: float, what: str) -> float:
    """Poll `condition()` until true; the seconds it took."""
    start = time.monotonic()
    while not condition():
        if time.monotonic() - start > timeout_s:
            raise AssertionError(f"{what}: not within {timeout_s} s")
        time.sleep(0.01)
    return time.monotonic() - start
