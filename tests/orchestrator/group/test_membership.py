"""Worker-group membership and leadership on real databases, in this process.

Membership rows (`group_members`): join, heartbeat, leave, the live members and
the reaper, on the wall clock. The group's lock (a PostgreSQL advisory lock, a
file lock next to a SQLite database) within one process. Member processes racing
for it, killed and paused: tests/e2e/test_group_membership_processes.py.
"""

from __future__ import annotations

import os
import time

import pytest
import sqlalchemy as sa

from partbuild.orchestrator.group.membership import Group, MemberDeclaredDead
from partbuild.state.database import Database
from partbuild.state.db import create_engine_for
from partbuild.state.ops.leader_lock import PostgresLeaderLock, advisory_key
from partbuild.state.ops.members import Heartbeat, MemberExists

from memberkit import wait_until
from pgkit import PgServer

GROUP = "builders"
HEARTBEAT_MS = 100
TIMEOUT_MS = 1000


# --- membership rows, in this process, on the wall clock ------------------------------------------


def test_join_heartbeat_and_leave(database: Database) -> None:
    group = Group(database, GROUP, member_timeout_ms=5_000)
    first = group.join("t1", buckets=12, info={"version": "0.1.0"})
    second = group.join()
    first.heartbeat()
    second.heartbeat()
    assert [m.task_id for m in group.live_members()] == ["t1", second.task_id]
    row = group.live_members()[0]
    assert (row.host, row.pid, row.buckets, row.info) == (os.uname().nodename, os.getpid(), 12, {"version": "0.1.0"})
    assert row.started_ms <= row.last_heartbeat_ms == first.last_heartbeat_ms
    assert abs(row.last_heartbeat_ms - time.time() * 1000) < 5_000
    assert str(os.getpid()) in second.task_id  # host:pid:token

    assert first.leave() is True
    assert first.leave() is False
    assert [m.task_id for m in group.all_members()] == [second.task_id]
    with pytest.raises(RuntimeError, match="no longer a member"):
        first.heartbeat()
    with second:
        pass  # leaving the block leaves the group
    assert group.all_members() == []


def test_join_refuses_a_taken_task_id_and_bad_names(database: Database) -> None:
    group = Group(database, GROUP, member_timeout_ms=5_000)
    group.join("t1")
    with pytest.raises(MemberExists, match="'t1' is already a member of group 'builders'"):
        group.join("t1")
    Group(database, "other", member_timeout_ms=5_000).join("t1")  # another group: another namespace
    assert [m.task_id for m in group.all_members()] == ["t1"]
    for bad in ("", "-x", "a b", "x" * 65, "../up"):
        with pytest.raises(ValueError, match="invalid group name"):
            Group(database, bad, member_timeout_ms=5_000)
    with pytest.raises(ValueError, match="member timeout must be > 0"):
        Group(database, GROUP, member_timeout_ms=0)
    with pytest.raises(ValueError, match="more than 4096"):
        group.join("t2", info={"blob": "x" * 5000})
    assert [m.task_id for m in group.all_members()] == ["t1"]


def test_a_member_that_stops_heartbeating_drops_out_and_hears_it_is_dead(database: Database) -> None:
    group = Group(database, GROUP, member_timeout_ms=300)
    silent = group.join("silent")
    time.sleep(0.002)  # members are listed by start (ms), then task id: "silent" started first
    beating = group.join("beating")
    end = time.monotonic() + 0.7
    while time.monotonic() < end:
        beating.heartbeat()
        time.sleep(0.05)
    assert [m.task_id for m in group.live_members()] == ["beating"]
    assert [m.task_id for m in group.all_members()] == ["silent", "beating"]  # dead, not reaped yet
    with pytest.raises(MemberDeclaredDead, match="older than the timeout") as info:
        silent.heartbeat()  # a dead member does not come back to life: it deletes its own row
    assert info.value.how is Heartbeat.EXPIRED
    assert [m.task_id for m in group.all_members()] == ["beating"]
    assert silent.leave() is False


def test_a_reaped_member_hears_it_was_declared_dead(database: Database) -> None:
    group = Group(database, GROUP, member_timeout_ms=300)
    doomed = group.join("doomed")
    survivor = group.join("survivor")
    assert group.reap() == []
    for _ in range(8):
        time.sleep(0.05)
        survivor.heartbeat()
    assert group.reap() == ["doomed"]
    assert [m.task_id for m in group.all_members()] == ["survivor"]
    with pytest.raises(MemberDeclaredDead, match="its row was reaped") as info:
        doomed.heartbeat()
    assert info.value.how is Heartbeat.REAPED
    assert (info.value.group, info.value.task_id) == (GROUP, "doomed")


def test_live_members_are_ordered_by_start_and_the_timeout_is_inclusive(database: Database) -> None:
    """A settable clock here, only to pin the order of equal starts and the exact boundary."""
    now = [1_000]
    group = Group(database, GROUP, member_timeout_ms=100, clock=lambda: now[0])
    group.join("c")
    group.join("b")
    now[0] = 999  # a clock may step back: start order is the recorded starts
    group.join("z")
    assert [m.task_id for m in group.live_members()] == ["z", "b", "c"]
    now[0] = 1_099  # z is 100 ms old: exactly the timeout, still alive
    assert [m.task_id for m in group.live_members()] == ["z", "b", "c"]
    now[0] = 1_100
    assert [m.task_id for m in group.live_members()] == ["b", "c"]
    assert group.reap() == ["z"]
    assert group.reap() == []
    now[0] = 1_101
    assert group.reap() == ["b", "c"]


@pytest.mark.parametrize("db_url", ["postgres"], indirect=True)
def test_the_reaper_skips_a_row_locked_by_a_transaction_in_progress(database: Database, db_url: str) -> None:
    """A member paused inside its heartbeat's transaction holds its row lock: the reaper must not hang on it."""
    group = Group(database, GROUP, member_timeout_ms=100)
    group.join("stuck")
    group.join("gone")
    time.sleep(0.2)
    engine = create_engine_for(db_url)
    try:
        with engine.begin() as conn:
            conn.execute(sa.text("UPDATE group_members SET pid = pid WHERE task_id = 'stuck'"))
            started = time.monotonic()
            assert group.reap() == ["gone"]
            assert time.monotonic() - started < 1.0
        assert group.reap() == ["stuck"]  # once the lock is gone
    finally:
        engine.dispose()


# --- the lock on each backend ----------------------------------------------------------------------


def test_the_lock_is_not_reentrant_but_idempotent_in_one_holder(database: Database) -> None:
    with database.leader_lock(GROUP) as first, database.leader_lock(GROUP) as second:
        assert first.try_acquire() is True
        assert first.try_acquire() is True  # already held: still held, not stacked
        assert second.try_acquire() is False  # another holder in the same process is refused
        assert (first.is_held(), second.is_held()) == (True, False)
        first.release()
        assert first.is_held() is False
        assert second.try_acquire() is True  # one release frees it
        first.release()  # releasing what it does not hold changes nothing
        assert second.is_held() is True
    with database.leader_lock("other") as other:
        assert other.try_acquire() is True  # groups are independent


@pytest.mark.parametrize("db_url", ["postgres"], indirect=True)
def test_a_postgres_leader_whose_connection_dies_loses_the_lock(
    database: Database, db_url: str, pg_server: PgServer
) -> None:
    assert pg_server.engine is not None
    with database.leader_lock(GROUP) as held, database.leader_lock(GROUP) as waiting:
        assert isinstance(held, PostgresLeaderLock) and held.try_acquire()
        assert held.key is not None
        unsigned = held.key & 0xFFFF_FFFF_FFFF_FFFF
        find = sa.text(
            "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND classid::bigint = :hi AND objid::bigint = :lo"
        )
        with pg_server.engine.connect() as admin:
            pid = admin.execute(find, {"hi": unsigned >> 32, "lo": unsigned & 0xFFFF_FFFF}).scalar_one()
            assert admin.execute(sa.text("SELECT pg_terminate_backend(:pid)"), {"pid": pid}).scalar_one()
        assert held.is_held() is False
        wait_until(waiting.try_acquire, 2.0, "the lock of a terminated session is free")
        assert held.try_acquire() is False  # a new session of the old holder now waits its turn


@pytest.mark.parametrize("db_url", ["postgres"], indirect=True)
def test_postgres_groups_in_two_schemas_have_separate_locks(
    database: Database, db_url: str, pg_server: PgServer
) -> None:
    assert pg_server.engine is not None
    url = sa.make_url(db_url)
    schema = url.query["options"].removeprefix("-csearch_path=")
    other_schema = f"{schema}_b"
    other_url = url.update_query_dict({"options": f"-csearch_path={other_schema}"}).render_as_string(False)
    with pg_server.engine.connect() as admin:
        admin.execute(sa.text(f"CREATE SCHEMA {other_schema}"))
    try:
        with (
            Database.open(other_url, auto_upgrade=True) as other_db,
            database.leader_lock(GROUP) as here,
            other_db.leader_lock(GROUP) as there,
        ):
            assert here.try_acquire() and there.try_acquire()
            assert isinstance(here, PostgresLeaderLock) and isinstance(there, PostgresLeaderLock)
            assert (here.key, there.key) == (advisory_key(schema, GROUP), advisory_key(other_schema, GROUP))
            assert here.key != there.key
    finally:
        with pg_server.engine.connect() as admin:
            admin.execute(sa.text(f"DROP SCHEMA {other_schema} CASCADE"))
