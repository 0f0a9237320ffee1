"""How long the run loop waits between steps on SQLite (`Orchestrator._wait`), on a real SQLite file.

Other processes' appends are polled for: at the poll interval after a busy step, doubling while steps
find nothing, never later than the next due time. The loop's wake-up event records each wait instead
of sleeping it, so the test steps the loop by hand and reads the timeouts it chose.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from partbuild.orchestrator.graph import Graph, Job, Partition, SourceDataset
from partbuild.orchestrator.loop import Orchestrator
from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.database import Database
from partbuild.state.fold.records import WantState
from partbuild.state.log.events import envelope, manual, wall_clock_ms
from partbuild.state.log.store import EventLog

POLL_S = 0.01
Loop = tuple[Orchestrator, EventLog, list[int]]  # the orchestrator, another writer's log, the loop's clock (ms)


class RecordingWake(threading.Event):
    """The loop's wake-up event, recording each wait's timeout instead of sleeping it."""

    def __init__(self) -> None:
        super().__init__()
        self.timeouts: list[float] = []

    def wait(self, timeout: float | None = None) -> bool:
        assert timeout is not None
        self.timeouts.append(round(timeout, 6))
        return self.is_set()


@pytest.fixture
def present() -> set[str]:
    """The raw days that exist (the source's `locate` finds only these)."""
    return set()


@pytest.fixture
def loop(tmp_path: Path, present: set[str]) -> Iterator[Loop]:
    """An orchestrator on a SQLite file with a recording wake-up, another writer's log, and its clock."""

    def locate(partition: Partition) -> str | None:
        day = partition["date"].isoformat()
        return str(tmp_path / day) if day in present else None

    graph = Graph(
        [Job("daily", ["daily/date={date:date}"], lambda ctx: None, inputs=lambda p: [f"raw/date={p['date']}"])],
        [SourceDataset("raw", "raw/date={date:date}", locate=locate)],
    )
    url = f"sqlite:///{tmp_path / 'partbuild.db'}"
    clock = [wall_clock_ms()]
    with Database.open(url, auto_upgrade=True) as db, EventLog.open(url) as other:
        orchestrator = Orchestrator(
            db, graph, warehouse=str(tmp_path / "w"), clock=lambda: clock[0], poll_interval_s=POLL_S,
            source_check_interval_s=0,
        )  # fmt: skip
        orchestrator._wake = RecordingWake()
        try:
            yield orchestrator, other, clock
        finally:
            orchestrator.close()


def waits(orchestrator: Orchestrator) -> list[float]:
    assert isinstance(orchestrator._wake, RecordingWake)
    return orchestrator._wake.timeouts


def quiet_steps(orchestrator: Orchestrator, count: int) -> list[float]:
    """`count` steps, each followed by its wait; the timeouts chosen."""
    waits(orchestrator).clear()
    for _ in range(count):
        orchestrator.step()
        orchestrator._wait()
    return list(waits(orchestrator))


def test_the_poll_doubles_while_steps_find_nothing_up_to_eight_intervals(loop: Loop) -> None:
    orchestrator, _, _ = loop
    assert quiet_steps(orchestrator, 6) == [0.02, 0.04, 0.08, 0.08, 0.08, 0.08]


def test_another_writers_append_is_folded_and_brings_the_poll_back(loop: Loop, present: set[str]) -> None:
    orchestrator, other, _ = loop
    quiet_steps(orchestrator, 6)
    present.add("2026-01-01")
    other.append([envelope(pb.WantCreate(want_id="w", partition_refs=["daily/date=2026-01-01"]), source=manual("t"))])
    waits(orchestrator).clear()
    for _ in range(20):  # folded, decided, observed, dispatched: each busy step steps again at once
        if not orchestrator.step():
            break
    orchestrator._wait()
    # Back at the interval: the last step folded the run's own events (0.01) or was the first quiet one (0.02).
    assert waits(orchestrator) in ([0.01], [0.02])
    orchestrator.executor.shutdown(wait=True)
    orchestrator.step()
    assert orchestrator.state.wants["w"].state == WantState.SUCCESSFUL


def test_a_want_expiring_sooner_caps_the_wait_and_expires_on_time(loop: Loop) -> None:
    orchestrator, other, clock = loop
    clock[0] = wall_clock_ms() + 1_000  # ahead of the wall-clock times the log's events carry
    # Its raw day never comes; it expires 30 ms after its event.
    expiring = pb.WantCreate(
        want_id="w", partition_refs=["daily/date=2026-01-02"], data_timestamp_ms=clock[0] - 9_970, ttl_seconds=10
    )
    other.append([envelope(expiring, source=manual("t"), timestamp_ms=clock[0])])
    assert quiet_steps(orchestrator, 6)[-3:] == [0.03, 0.03, 0.03]
    clock[0] += 31
    orchestrator.step()
    orchestrator.step()
    assert orchestrator.state.wants["w"].state == WantState.EXPIRED
    # A due time already past never makes the wait shorter than the poll interval (no busy loop).
    clock[0] += 60_000
    assert min(quiet_steps(orchestrator, 3)) >= POLL_S
