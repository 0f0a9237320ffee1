"""The write-lock bounds of `state/db.py` as appends meet them: a waiter gives up, an idle holder loses its lock.

A frozen process is tested in tests/e2e/test_frozen_writer.py; here the holder
is another connection of this process, which is running, so SQLite never
fences it and only the wait bound applies.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.database import Database
from partbuild.state.db import (
    WRITE_HOLD_ENV,
    WRITE_WAIT_ENV,
    WriteBounds,
    WriteLockLost,
    WriteLockTimeout,
    begin_write,
    create_engine_for,
)
from partbuild.state.log.events import envelope

from pgkit import PgServer, postgres_url

WAIT_S = 1.0


def _want(want_id: str) -> pb.Event:
    return envelope(pb.WantCreate(want_id=want_id, partition_refs=["agg/daily_clicks/date=2026-01-01"]))


@pytest.fixture
def bounds(monkeypatch: pytest.MonkeyPatch) -> None:
    """Short bounds for every engine opened in the test (they are read from the environment when one is)."""
    monkeypatch.setenv(WRITE_WAIT_ENV, str(WAIT_S))
    monkeypatch.setenv(WRITE_HOLD_ENV, "1")


@contextmanager
def engine_for(url: str) -> Iterator[Engine]:
    """Another engine on the database: another writer."""
    engine = create_engine_for(url)
    try:
        yield engine
    finally:
        engine.dispose()


def test_bounds_come_from_the_environment_and_bad_values_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(WRITE_HOLD_ENV, raising=False)
    monkeypatch.delenv(WRITE_WAIT_ENV, raising=False)
    assert WriteBounds.from_env() == WriteBounds(5.0, 30.0)
    monkeypatch.setenv(WRITE_HOLD_ENV, "2.5")
    assert WriteBounds.from_env().hold_s == 2.5
    for bad in ("soon", "0", "-3", "1e9"):
        monkeypatch.setenv(WRITE_HOLD_ENV, bad)
        with pytest.raises(ValueError, match=WRITE_HOLD_ENV):
            WriteBounds.from_env()


@pytest.mark.usefixtures("bounds")
def test_a_writer_waiting_past_the_wait_bound_gives_up_having_written_nothing(db: str) -> None:
    with Database.open(db) as database, engine_for(db) as other:
        log = database.log
        log.append([_want("before")])
        # Holds the append lock without the idle bound: to the waiter, a holder busy with a long statement.
        with begin_write(other) as holder:
            holder.execute(sa.text("UPDATE log_head SET head_seq = head_seq WHERE id = 1"))
            started = time.monotonic()
            with pytest.raises(WriteLockTimeout, match="nothing was written: retry"):
                log.append([_want("blocked"), _want("blocked-too")])
            waited = time.monotonic() - started
        assert WAIT_S <= waited < WAIT_S + 10  # the bound, then it gave up (not 30 s, not forever)
        assert log.head() == 1
        assert log.append([_want("after")]).first_seq == 2  # the lock is free again: the same writer goes on


@pytest.mark.usefixtures("bounds")
def test_postgres_ends_a_writer_idle_inside_its_append_past_the_hold_bound(pg_server: PgServer) -> None:
    for url in postgres_url(pg_server):
        with Database.open(url, auto_upgrade=True) as database, engine_for(url) as frozen_engine:
            lost = pytest.raises(WriteLockLost, match="nothing was written: retry")
            with lost, begin_write(frozen_engine, bounded=True) as frozen:
                frozen.execute(sa.text("UPDATE log_head SET head_seq = head_seq + 1 WHERE id = 1"))
                time.sleep(2.5)  # idle in the transaction past the 1 s hold bound: the server ends the session
                frozen.execute(sa.text("SELECT 1"))
            # The lock went with the session (else: WriteLockTimeout), and its bump was rolled back.
            assert database.log.append([_want("next")]).first_seq == 1


def _end_session(url: str, pid: int) -> None:
    """Close a session from the server's side, as the idle bound does; its client learns of it only later."""
    with engine_for(url) as admin, admin.begin() as conn:
        assert conn.execute(sa.text("SELECT pg_terminate_backend(:pid, 5000)"), {"pid": pid}).scalar_one()


@pytest.mark.usefixtures("bounds")
def test_a_write_whose_connection_closed_is_lost_only_past_the_hold_bound(pg_server: PgServer) -> None:
    # A writer woken long after the server closed its session may see only the closed socket, not the 25P03.
    for url in postgres_url(pg_server):
        with Database.open(url, auto_upgrade=True), engine_for(url) as writer_engine:
            for sat_s, raised in ((1.5, WriteLockLost), (0.0, sa.exc.OperationalError)):
                # Within the bound a dropped connection is no lost lock: nothing says what happened to the write.
                with pytest.raises(raised), begin_write(writer_engine, bounded=True) as writer:
                    pid = writer.execute(sa.text("SELECT pg_backend_pid()")).scalar_one()
                    writer.execute(sa.text("SET LOCAL idle_in_transaction_session_timeout = 0"))
                    _end_session(url, pid)
                    time.sleep(sat_s)
                    writer.execute(sa.text("SELECT 1"))


def test_a_postgres_append_sends_whole_statements_so_the_hold_bound_covers_every_pause(pg_server: PgServer) -> None:
    # psycopg's executemany pipelines its rows without a Sync, and until the Sync the server does not
    # count the session as idle: a writer stopped there kept log_head locked past the bound (seen on CI).
    statements: list[tuple[str, bool]] = []

    def seen(_conn: object, _cursor: object, sql: str, _params: object, _context: object, many: bool) -> None:
        statements.append((sql.split()[0], many))

    for url in postgres_url(pg_server):
        statements.clear()
        with Database.open(url, auto_upgrade=True) as database:
            sa.event.listen(database.log._engine, "before_cursor_execute", seen)
            batch = [_want(f"w{index}") for index in range(3)]
            database.log.append(batch)
            inserts = [many for verb, many in statements if verb == "INSERT"]
            assert inserts == [False]  # the batch is one statement
            assert not any(many for _verb, many in statements)
            stored = database.log.read(0, 10)
            assert [row.seq for row in stored] == [1, 2, 3]
            assert [row.to_event() for row in stored] == batch
            assert [row.event_type for row in stored] == ["want_create"] * 3
