"""Which processes project the state store (state/ops/projectors.py), on both backends: a beat is seen by the
others until it goes stale or its process leaves (or, on this host, dies); a working set's head is kept with
its beat, in the transaction of what it asks to run after; a projector beats while it runs, idle or not, and
leaves at its stop."""

from __future__ import annotations

import itertools
import logging
import os
import threading
import time

import pytest
import sqlalchemy as sa

from partbuild.state.database import Database
from partbuild.state.log.live import LiveState
from partbuild.state.ops.projectors import STALE_MS, Projecting, new_holder
from partbuild.state.schema import state_projectors
from partbuild.state.store.projector import Beat, Projector

NOW = 1_900_000_000_000


def test_a_beat_is_seen_by_the_others_until_it_is_stale_or_its_process_leaves(database: Database) -> None:
    registry = database.projectors
    here, elsewhere = new_holder(), "other-host:4242:abc"
    registry.beat(here, working_set=True, now_ms=NOW)
    registry.beat(elsewhere, working_set=False, now_ms=NOW - 1_000)
    assert registry.others(here, NOW) == [Projecting(elsewhere, False, NOW - 1_000, None)]
    assert registry.others(elsewhere, NOW) == [Projecting(here, True, NOW, None)]  # (this process: it runs)
    registry.beat(here, working_set=True, now_ms=NOW + 5_000)  # the same row, moved
    assert [other.beat_ms for other in registry.others(elsewhere, NOW + 5_000)] == [NOW + 5_000]
    assert registry.others(here, NOW - 1_000 + STALE_MS) != []
    assert registry.others(here, NOW + STALE_MS) == []  # not heard from within STALE_MS: gone
    registry.leave(here)
    assert registry.others(elsewhere, NOW) == []


def test_a_row_of_this_host_whose_process_died_is_ignored_at_once(database: Database) -> None:
    """`up` killed, then started again at once, is not refused by its own last row."""
    host, _, token = new_holder().split(":")
    dead, alive = f"{host}:{_a_pid_not_running()}:{token}", new_holder()
    earlier = f"{host}:{os.getpid()}:earlier"  # this pid's row, not this process's: a restarted container's
    for holder in (dead, earlier, alive):
        database.projectors.beat(holder, working_set=True, now_ms=NOW)
    assert [other.holder for other in database.projectors.others(alive, NOW)] == []
    assert [other.holder for other in database.projectors.others("", NOW)] == [alive]


def test_a_working_set_s_head_moves_with_its_beat_in_the_transaction_of_what_runs_after(database: Database) -> None:
    registry, holder = database.projectors, new_holder()
    seen: list[int | None] = []

    def then(conn: sa.Connection) -> None:  # sees the row it was asked after, uncommitted yet
        seen.append(conn.execute(sa.select(state_projectors.c.head)).scalar_one())
        raise RuntimeError("rolled back")

    with pytest.raises(RuntimeError, match="rolled back"):
        registry.beat(holder, working_set=True, now_ms=NOW, head=40, then=then)
    assert seen == [40] and registry.others("", NOW) == []  # the beat went with what failed after it
    registry.beat(holder, working_set=True, now_ms=NOW, head=40)
    registry.beat(holder, working_set=True, now_ms=NOW + 5_000, head=95)
    assert registry.others("", NOW + 5_000) == [Projecting(holder, True, NOW + 5_000, 95)]


def test_a_projector_beats_while_it_runs_idle_or_not_and_ends_at_its_stop(database: Database) -> None:
    beats: list[float] = []
    ended = threading.Event()
    projector = Projector(LiveState(database.log), database.changes)
    projector.start(gap_s=0.01, beat=Beat(lambda: beats.append(time.monotonic()), 0.05, end=ended.set))
    try:
        deadline = time.monotonic() + 20
        while len(beats) < 4:  # nothing folds: the beats come on their own
            assert time.monotonic() < deadline, f"{len(beats)} beats"
            time.sleep(0.01)
    finally:
        projector.stop()
    assert ended.is_set() and all(later - earlier >= 0.04 for earlier, later in itertools.pairwise(beats))
    count = len(beats)
    time.sleep(0.15)
    assert len(beats) == count  # stopped: no more


def test_a_failing_beat_is_said_once_and_never_raised(caplog: pytest.LogCaptureFixture) -> None:
    def fail() -> None:
        raise OSError("the database is away")

    beat = Beat(fail, 0.0)
    for _ in range(3):
        beat.say()
    said = [r for r in caplog.records if r.levelno == logging.WARNING and "projects the state store" in r.message]
    assert len(said) == 1


def _a_pid_not_running() -> int:
    for pid in range(4_000_000, 3_000_000, -1):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return pid
        except PermissionError:
            continue
    raise AssertionError("every pid runs")
