"""Taking the leader lock away from a holder that is no live member, with real processes and real signals.

The lock's side (`state.leader_lock`): `holder()` names who holds it (a
PostgreSQL session and the task its application_name declares; the process the
kernel reports for a SQLite lock file, with the claim it wrote) and
`expel(holder)` ends the hold (`pg_terminate_backend`; SIGKILL). The group's
side (`GroupWorker`, `Group.holder_is_live`): a survivor expels a holder only
when it is not a live member. Holders are `memberkit.py` member processes,
SIGSTOPped like a hung leader; foreign holders are plain processes. Holders in
this process and foreign sessions: tests/state/ops/test_leader_lock.py.
"""

from __future__ import annotations

import secrets
import signal
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest
import sqlalchemy as sa

from partbuild.orchestrator.group.membership import Group
from partbuild.orchestrator.group.worker import GroupWorker
from partbuild.state.database import Database
from partbuild.state.db import libpq_conninfo, normalize_url
from partbuild.state.log.store import EventLog
from partbuild.state.ops.leader_lock import LEADER_APPLICATION, ExpelRefused, FileLeaderLock, task_digest

from leaderkit import GROUP, SURVIVOR, TIMEOUT_MS, schema_of, survivors, wait_for_beats, warnings_with
from memberkit import DECLARED_DEAD_EXIT, MemberProcess, pause, wait_until
from pgkit import PgServer

pytestmark = pytest.mark.process


@pytest.fixture
def survivor() -> Iterator[Callable[[Database], GroupWorker]]:
    """Starts a `GroupWorker` (task "survivor") on a database, as `run --group` does; stopped at the end."""
    with survivors() as start:
        yield start


@pytest.fixture
def leader(database: Database, db_url: str) -> Iterator[MemberProcess]:
    """Member process "a" of GROUP, holding the leader lock (its own lock declares task "a")."""
    member = MemberProcess(db_url, GROUP, "a", timeout_ms=TIMEOUT_MS)
    try:
        member.wait_for("leader", 20)
        yield member
    finally:
        member.stop()


def test_the_lock_names_a_paused_holder_and_takes_the_lock_from_it(
    database: Database, db_url: str, leader: MemberProcess
) -> None:
    with database.leader_lock(GROUP, "b") as lock:
        assert lock.try_acquire() is False
        held = lock.holder()
        assert held is not None and held.ours and held.task_digest == task_digest("a"), held
        if isinstance(lock, FileLeaderLock):
            assert (held.pid, held.host) == (leader.process.pid, socket.gethostname())  # the kernel's pid
        else:
            with psycopg.connect(libpq_conninfo(normalize_url(db_url))) as conn:
                name = f"{LEADER_APPLICATION} {task_digest('a')}"
                found = conn.execute("SELECT pid FROM pg_stat_activity WHERE application_name = %s", (name,))
                backend = found.fetchone()[0]
            assert (held.pid, held.host) == (backend, None)  # its session, not its process

        pause(leader, db_url, GROUP)
        assert lock.expel(held) is True
        wait_until(lock.try_acquire, 10, "the expelled holder's lock is free")
        assert lock.holder() is None
        assert lock.expel(held) is False  # it no longer holds the lock: nothing is done
        if isinstance(lock, FileLeaderLock):
            assert leader.process.wait(timeout=10) == -signal.SIGKILL
        else:
            # Its process lives on, without its lock session: it notices on waking, and stays a follower.
            leader.signal(signal.SIGCONT)
            leader.wait_for("lost_leadership", 10)
            assert leader.process.poll() is None and lock.is_held()


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_a_sqlite_lock_holder_that_claims_nothing_is_never_killed(database: Database, tmp_path: Path) -> None:
    """A process holding a record lock on the file without our claim in it is not one of ours: left alone."""
    with database.leader_lock(GROUP, "b") as lock:
        assert isinstance(lock, FileLeaderLock)
        script = f"""
            import fcntl, os, sys, time
            fd = os.open({str(lock.path)!r}, os.O_RDWR | os.O_CREAT)
            fcntl.lockf(fd, fcntl.LOCK_EX)
            print("locked", flush=True)
            time.sleep(120)
        """
        command = [sys.executable, "-c", textwrap.dedent(script)]
        with subprocess.Popen(command, stdout=subprocess.PIPE, text=True) as other:
            try:
                assert other.stdout is not None and other.stdout.readline() == "locked\n"
                assert lock.try_acquire() is False
                held = lock.holder()
                assert held is not None and held.pid == other.pid and not held.ours, held
                assert lock.expel(held) is False
                assert other.poll() is None
            finally:
                other.kill()
        wait_until(lock.try_acquire, 10, "the lock of the killed process is free")


def test_a_survivor_leaves_a_live_holder_alone_and_takes_over_from_a_paused_one(
    database: Database,
    db_url: str,
    leader: MemberProcess,
    survivor: Callable[[EventLog], GroupWorker],
    caplog: pytest.LogCaptureFixture,
) -> None:
    group = Group(database, GROUP, member_timeout_ms=TIMEOUT_MS)
    worker = survivor(database)
    wait_for_beats(group, SURVIVOR, 4)  # each tick: our heartbeat, the lock refused, the holder judged live
    assert worker.leading is False and leader.saw("lost_leadership") == [] and leader.process.poll() is None
    assert warnings_with(caplog, "leader lock") == []

    pause(leader, db_url, GROUP)
    paused_at = time.monotonic()
    wait_until(lambda: worker.leading, 20, "the survivor leads")
    print(f"the survivor took the lead {time.monotonic() - paused_at:.2f} s after the pause")
    how = "killed it with SIGKILL" if db_url.startswith("sqlite") else "terminated its session"
    expelled = warnings_with(caplog, "held by a, not a live member")
    assert len(expelled) == 1 and how in expelled[0], expelled
    wait_until(lambda: [m.task_id for m in group.all_members()] == [SURVIVOR], 10, "the paused leader reaped")

    def epoch_of_the_survivor() -> bool:
        worker.live.catch_up()
        epoch = worker.live.state.groups.get(GROUP)
        return epoch is not None and (epoch.leader, list(epoch.members)) == (SURVIVOR, [SURVIVOR])

    wait_until(epoch_of_the_survivor, 10, "an epoch led by the survivor, without the paused leader")

    if db_url.startswith("sqlite"):
        assert leader.process.wait(timeout=10) == -signal.SIGKILL
    else:
        leader.signal(signal.SIGCONT)  # its lock session is gone and its row reaped: it hears it is dead
        assert leader.wait_for("declared_dead", 10)["how"] == "reaped"
        assert leader.process.wait(timeout=10) == DECLARED_DEAD_EXIT
    assert worker.leading and worker.dead is None


@pytest.mark.parametrize("db_url", ["postgres"], indirect=True)
def test_a_survivor_not_permitted_to_terminate_the_holder_warns_once_and_carries_on(
    database: Database,
    db_url: str,
    pg_server: PgServer,
    leader: MemberProcess,
    survivor: Callable[[EventLog], GroupWorker],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A survivor of a role that may not signal the holder's (here, a superuser's) session: one warning, no crash."""
    assert pg_server.engine is not None
    role, schema = f"pbweak_{secrets.token_hex(4)}", schema_of(db_url)
    with pg_server.engine.connect() as admin:
        admin.execute(sa.text(f"CREATE ROLE {role} LOGIN"))
        for grant in ("USAGE ON SCHEMA", "ALL ON ALL TABLES IN SCHEMA", "ALL ON ALL SEQUENCES IN SCHEMA"):
            admin.execute(sa.text(f"GRANT {grant} {schema} TO {role}"))
    weak_url = normalize_url(db_url).set(username=role).render_as_string(hide_password=False)
    try:
        with Database.open(weak_url, auto_upgrade=False) as weak_db:
            group = Group(weak_db, GROUP, member_timeout_ms=TIMEOUT_MS)
            pause(leader, db_url, GROUP)
            worker = survivor(weak_db)
            wait_until(lambda: bool(warnings_with(caplog, "cannot take the leader lock")), 20, "the refusal")
            wait_for_beats(group, SURVIVOR, 4)
            refused = warnings_with(caplog, "cannot take the leader lock")
            assert len(refused) == 1 and "must be a superuser" in refused[0], refused
            assert worker.leading is False and worker.dead is None
            assert [m.task_id for m in group.live_members()] == [SURVIVOR]
            with weak_db.leader_lock(GROUP, "b") as lock:
                assert lock.try_acquire() is False
                held = lock.holder()
                assert held is not None and held.ours
                with pytest.raises(ExpelRefused, match="refused to terminate"):
                    lock.expel(held)
            worker.stop()
    finally:
        with pg_server.engine.connect() as admin:
            admin.execute(sa.text(f"DROP OWNED BY {role}"))
            admin.execute(sa.text(f"DROP ROLE {role}"))
