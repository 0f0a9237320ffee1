"""Wake on append: PostgreSQL pushes every committed append to listeners; SQLite callers poll."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from partbuild.orchestrator.graph import Graph, Job
from partbuild.orchestrator.loop import Orchestrator
from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.database import Database
from partbuild.state.fold.records import WantState
from partbuild.state.log.events import envelope
from partbuild.state.log.store import EventLog

from pgkit import PgServer, postgres_url


def _want(want_id: str, ref: str) -> pb.Event:
    return envelope(pb.WantCreate(want_id=want_id, partition_refs=[ref]))


def test_listener_wakes_on_append_from_another_connection(db_url: str) -> None:
    with Database.open(db_url, auto_upgrade=True) as db:
        log = db.log
        listener = log.append_listener()
        if log.backend == "sqlite":
            assert listener is None  # no push on SQLite: the run loop polls
            return
        assert listener is not None
        try:
            assert listener.wait(0.2) is False  # nothing appended: the timeout passes
            with EventLog.open(db_url) as writer:  # another engine, as another process would have
                timer = threading.Timer(0.3, lambda: writer.append([_want("w", "a")]))
                started = time.monotonic()
                timer.start()
                assert listener.wait(10) is True
                assert time.monotonic() - started < 5  # woken by the commit, not by the timeout
                timer.join()
        finally:
            listener.close()


@pytest.mark.parametrize("db_url", ["postgres"], indirect=True)
def test_an_append_to_a_log_in_another_schema_wakes_no_listener(db_url: str, pg_server: PgServer) -> None:
    """Notifications are database-wide; each schema's log has its own channel."""
    other = postgres_url(pg_server)
    other_url = next(other)
    try:
        with EventLog.open(db_url, auto_upgrade=True) as log, EventLog.open(other_url, auto_upgrade=True) as neighbour:
            listener = log.append_listener()
            assert listener is not None
            try:
                neighbour.append([_want("n", "a")])
                assert listener.wait(0.5) is False  # the other schema's append
                log.append([_want("w", "a")])
                assert listener.wait(10) is True  # our own
            finally:
                listener.close()
    finally:
        other.close()


def test_run_loop_reacts_to_a_new_want_without_waiting_out_its_timeout(db_url: str, tmp_path: Path) -> None:
    graph = Graph([Job("noop", ["noop/{n:int}"], lambda ctx: None)])
    with Database.open(db_url, auto_upgrade=True) as db:
        log = db.log
        # A long listen timeout and poll interval: only a push (or the 0.05 s SQLite poll) can explain a quick reaction.
        poll = 0.05 if log.backend == "sqlite" else 30.0
        orchestrator = Orchestrator(
            db, graph, warehouse=str(tmp_path), spark=None, poll_interval_s=poll, listen_timeout_s=30.0
        )
        stop = threading.Event()
        loop = threading.Thread(target=orchestrator.run, args=(stop,))
        loop.start()
        try:
            time.sleep(0.5)  # the loop is idle, waiting
            with EventLog.open(db_url) as writer:
                writer.append([_want("w", "noop/1")])
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                want = orchestrator.state.wants.get("w")
                if want is not None and want.state == WantState.SUCCESSFUL:
                    break
                time.sleep(0.02)
            assert orchestrator.state.wants["w"].state == WantState.SUCCESSFUL
        finally:
            stop.set()
            orchestrator.wake()
            if log.backend != "sqlite":  # the idle loop waits in LISTEN, which wake() does not end: a notification does
                with EventLog.open(db_url) as writer:
                    writer.append([_want("after-stop", "noop/2")])
            loop.join(timeout=40)
