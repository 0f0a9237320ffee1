"""Taking the leader lock away from a holder that is no live member: the lock's and the group's side, with
holders in this process and foreign PostgreSQL sessions.

The lock's side (`state.leader_lock`): `holder()` names who holds it and `expel(holder)` ends the hold;
it never expels its own process. The group's side (`GroupWorker`, `Group.holder_is_live`): a survivor
expels a holder only when it is not a live member, and leaves a foreign session alone. Holders that are
member processes, SIGSTOPped like a hung leader: tests/e2e/test_leader_lock_processes.py.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable, Iterator

import psycopg
import pytest

from partbuild.orchestrator.group.membership import Group, holds_for_one_of
from partbuild.orchestrator.group.worker import GroupWorker
from partbuild.state.database import Database
from partbuild.state.db import libpq_conninfo, normalize_url
from partbuild.state.log.store import EventLog
from partbuild.state.ops.leader_lock import LockHolder, advisory_key, task_digest
from partbuild.state.ops.members import Member

from leaderkit import GROUP, SURVIVOR, TIMEOUT_MS, schema_of, survivors, wait_for_beats, warnings_with


@pytest.fixture
def survivor() -> Iterator[Callable[[Database], GroupWorker]]:
    """Starts a `GroupWorker` (task "survivor") on a database, as `run --group` does; stopped at the end."""
    with survivors() as start:
        yield start


# --- the lock: who holds it, and ending that hold --------------------------------------------------


@pytest.mark.parametrize("db_url", ["postgres"], indirect=True)
@pytest.mark.parametrize("application", ["", "partbuild-leader-admin"], ids=["unnamed", "look-alike"])
def test_a_foreign_advisory_lock_holder_is_never_terminated(
    database: Database,
    db_url: str,
    application: str,
    survivor: Callable[[EventLog], GroupWorker],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A session of another tool holding our key is left alone, however long: the group waits, and says so once."""
    info = libpq_conninfo(normalize_url(db_url))
    with psycopg.connect(info, autocommit=True, application_name=application) as foreign:
        foreign.execute("SELECT pg_advisory_lock(%s)", (advisory_key(schema_of(db_url), GROUP),))
        with database.leader_lock(GROUP, "b") as lock:
            assert lock.try_acquire() is False
            held = lock.holder()
            assert held is not None and not held.ours and held.task_digest is None, held
            assert lock.expel(held) is False

        worker = survivor(database)
        wait_for_beats(Group(database, GROUP, member_timeout_ms=TIMEOUT_MS), SURVIVOR, 4)
        assert worker.leading is False and worker.dead is None
        assert len(warnings_with(caplog, "not a partbuild leader")) == 1
        backend = foreign.execute("SELECT pg_backend_pid()").fetchone()
        assert backend is not None and backend[0] == held.pid  # the same session, alive


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_a_sqlite_lock_never_expels_its_own_process(database: Database) -> None:
    """Two lock objects of one process exclude each other; the second sees the first, and cannot kill it."""
    with database.leader_lock(GROUP, "a") as first, database.leader_lock(GROUP, "b") as second:
        assert first.try_acquire() is True and second.try_acquire() is False
        held = second.holder()
        assert held == LockHolder(os.getpid(), task_digest("a"), socket.gethostname(), True, held.description)
        assert first.holder() is None  # its own hold is not someone else's
        assert second.expel(held) is False
        assert first.is_held() is True


def test_a_holder_is_a_member_by_its_task_or_by_its_process_on_its_host() -> None:
    row = Member(GROUP, "a", socket.gethostname(), 4242, 0, 0)
    by_task = LockHolder(17, task_digest("a"), None, True, "session 17")
    anonymous_session = LockHolder(4242, None, None, True, "session 4242")  # a backend pid is not a process pid
    same_process = LockHolder(4242, None, socket.gethostname(), True, "process 4242")
    elsewhere = LockHolder(4242, None, "another-host", True, "process 4242")
    other_task = LockHolder(4242, task_digest("b"), None, True, "session 4242")
    assert [holds_for_one_of(h, [row]) for h in (by_task, anonymous_session, same_process, elsewhere, other_task)] == [
        True,
        False,
        True,
        False,
        False,
    ]
    assert holds_for_one_of(by_task, []) is False
