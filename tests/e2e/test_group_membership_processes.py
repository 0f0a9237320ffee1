"""Worker-group leadership with real processes and real signals: the group's lock (a PostgreSQL advisory lock,
a file lock next to a SQLite database) raced for by member processes of `memberkit.py`, which are then
SIGKILLed, SIGSTOPped and continued; the SQLite lock file read by another process. Membership rows and the
lock within one process: tests/orchestrator/group/test_membership.py.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from partbuild.orchestrator.group.membership import Group
from partbuild.state.database import Database
from partbuild.state.ops.leader_lock import FileLeaderLock

from memberkit import DECLARED_DEAD_EXIT, MemberProcess, first_leader, pause, wait_until

pytestmark = pytest.mark.process

GROUP = "builders"
HEARTBEAT_MS = 100
# Thirty missed heartbeats: a member must not expire because a loaded CI machine delayed
# one commit of its heartbeat (a follower did, at 1 s, while another test wrote W1).
TIMEOUT_MS = 3000


@pytest.fixture
def members(database: Database, db_url: str) -> Iterator[list[MemberProcess]]:
    """Two member processes of GROUP on the test database, stopped (however they are) at the end."""
    started = [
        MemberProcess(db_url, GROUP, task, heartbeat_ms=HEARTBEAT_MS, timeout_ms=TIMEOUT_MS) for task in ("a", "b")
    ]
    try:
        for member in started:
            member.wait_for("joined", 20)
        yield started
    finally:
        for member in started:
            member.stop()


def test_two_processes_race_for_the_lock_and_a_sigkill_hands_it_over(
    database: Database, members: list[MemberProcess]
) -> None:
    group = Group(database, GROUP, member_timeout_ms=TIMEOUT_MS)
    leader = first_leader(members, timeout_s=20)
    follower = next(member for member in members if member is not leader)
    time.sleep(1.0)  # ten more rounds of trying for the follower
    assert [len(member.saw("leader")) for member in (leader, follower)] == [1, 0]
    with group.leader_lock() as lock:
        assert lock.try_acquire() is False  # a third contender, here, loses too
    assert sorted(m.task_id for m in group.live_members()) == ["a", "b"]

    leader.signal(signal.SIGKILL)
    killed_at = time.monotonic()
    follower.wait_for("leader", timeout_s=5)
    handover_s = time.monotonic() - killed_at
    # Passed on by the lock's release, not by the dead leader's heartbeat expiring.
    assert handover_s < TIMEOUT_MS / 1000, f"the lock took {handover_s:.2f} s to pass to the survivor"
    assert leader.process.wait(timeout=5) == -signal.SIGKILL

    # The new leader reaps the killed member once its heartbeat is older than the timeout.
    reaped = follower.wait_for("reaped", timeout_s=TIMEOUT_MS / 1000 + 3)
    assert reaped["task"] == leader.task
    assert [m.task_id for m in group.all_members()] == [follower.task]

    follower.signal(signal.SIGTERM)  # a clean exit leaves the group and frees the lock
    follower.wait_for("left", timeout_s=5)
    assert follower.process.wait(timeout=5) == 0
    assert group.all_members() == []
    with group.leader_lock() as lock:
        assert lock.try_acquire() is True


def test_a_paused_leader_keeps_the_lock_until_it_wakes_up_dead(
    database: Database, db_url: str, members: list[MemberProcess]
) -> None:
    """SIGSTOP: the process and its connection are alive, so the lock stays held on both backends.

    memberkit members never take the lock away (group workers do: see
    tests/state/ops/test_leader_lock.py), so here nothing but the paused leader's own
    next heartbeat ends its leadership. The lock only elects: the fold's epochs
    must fence what a leader that wakes up does before that heartbeat.
    """
    group = Group(database, GROUP, member_timeout_ms=TIMEOUT_MS)
    leader = first_leader(members, timeout_s=20)
    follower = next(member for member in members if member is not leader)

    pause(leader, db_url, GROUP)
    # Dead by its heartbeat...
    wait_until(lambda: [m.task_id for m in group.live_members()] == [follower.task], 3 * TIMEOUT_MS / 1000, "expiry")
    assert follower.saw("leader") == []  # ...yet still holding the lock
    with group.leader_lock() as lock:
        assert lock.try_acquire() is False
    assert group.reap() == [leader.task]  # reaped here, as a leader would

    leader.signal(signal.SIGCONT)
    assert leader.wait_for("declared_dead", timeout_s=5)["how"] == "reaped"
    assert leader.process.wait(timeout=5) == DECLARED_DEAD_EXIT  # and its exit frees the lock
    follower.wait_for("leader", timeout_s=3)
    assert [m.task_id for m in group.live_members()] == [follower.task]


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_the_sqlite_lock_is_a_file_next_to_the_database(database: Database, db_url: str) -> None:
    db_file = Path(db_url.removeprefix("sqlite:///"))
    with database.leader_lock(GROUP) as lock, database.leader_lock(GROUP) as rival:
        assert isinstance(lock, FileLeaderLock)
        assert lock.path == db_file.with_name(f"{db_file.name}.group-{GROUP}.lock")
        assert lock.try_acquire() is True
        # Read by another process: a record lock is released when its process closes any descriptor of the file.
        claim = json.loads(subprocess.run(["cat", str(lock.path)], capture_output=True, check=True).stdout)
        assert claim == {"pid": os.getpid(), "host": socket.gethostname(), "task": None}
        assert lock.is_held() and rival.holder() is not None  # a rival in the process reads it safely
        # Deleting the file would let another process lock a new file of that name:
        # the holder notices that it no longer holds the lock of the path.
        lock.path.unlink()
        assert rival.try_acquire() is True
        assert lock.is_held() is False
        assert rival.is_held() is True
    with pytest.raises(ValueError, match="needs a database file"):
        Database(sa.create_engine("sqlite://")).leader_lock(GROUP)
