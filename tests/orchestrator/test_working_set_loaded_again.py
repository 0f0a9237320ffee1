"""An orchestrator deciding on a working set that is loaded again (`LiveState.load_again`): its registration
went stale, another process rewrote a row it reads back with no version kept, so its fold was refused. The
orchestrator stops (`StateLoadedAgain`: what its helpers kept is of the old state) and `up`'s supervisor
starts a new one at once, on the state loaded again, which builds what is wanted next. Real databases, job
functions that need no Spark."""

from __future__ import annotations

import datetime as dt
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from partbuild.api.commands.serving import _orchestrate
from partbuild.orchestrator.context import JobContext
from partbuild.orchestrator.graph import Graph, Job, Partition, SourceDataset
from partbuild.orchestrator.loop import Orchestrator
from partbuild.orchestrator.supervisor import StateLoadedAgain, Supervisor
from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.database import Database
from partbuild.state.fold.build_state import BuildState
from partbuild.state.fold.records import InstanceState
from partbuild.state.log.events import envelope, manual
from partbuild.state.log.live import LiveState
from partbuild.state.log.replay import replay_into
from partbuild.state.store.projector import Projector

from workingsetkit import Registered, rejections

FIRST = [dt.date(2026, 1, 1) + dt.timedelta(days=n) for n in range(6)]
LATER = [dt.date(2026, 2, 1) + dt.timedelta(days=n) for n in range(3)]
AGAIN = FIRST[:2]  # tainted, then wanted again


def _daily(day: dt.date) -> str:
    return f"daily/date={day.isoformat()}"


class _Dailies:
    """raw (files under `root`) -> daily (the raw file's text, copied), each build counted."""

    def __init__(self, root: Path) -> None:
        self.root, self.built = root, []
        self.graph = Graph(
            [
                Job(
                    "daily",
                    ["daily/date={date:date}"],
                    self.run,
                    inputs=lambda p: [f"raw/date={p['date'].isoformat()}"],
                )
            ],
            [SourceDataset("raw", "raw/date={date:date}", locate=self.locate)],
        )
        for day in [*FIRST, *LATER]:
            (root / "raw" / day.isoformat()).mkdir(parents=True)
            (root / "raw" / day.isoformat() / "value.txt").write_text(day.isoformat())

    def locate(self, partition: Partition) -> str | None:
        return str(self.root / "raw" / partition["date"].isoformat())

    def run(self, ctx: JobContext) -> None:
        for target in ctx.outputs:
            self.built.append(target.ref)
            Path(target.location).mkdir(parents=True, exist_ok=True)
            Path(target.location, "value.txt").write_text(target.ref)


def _want(database: Database, want_id: str, days: list[dt.date]) -> None:
    refs = [_daily(day) for day in days]
    database.log.append([envelope(pb.WantCreate(want_id=want_id, partition_refs=refs), source=manual("test"))])


def _orchestrator(database: Database, dailies: _Dailies, tmp_path: Path, live: LiveState | None) -> Orchestrator:
    options = {"spark": None, "source_check_interval_s": 0, "poll_interval_s": 0.01}
    return Orchestrator(database, dailies.graph, warehouse=str(tmp_path / "warehouse"), live=live, **options)


def _wait_until(check: Callable[[], bool], timeout_s: float = 20) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def _refused_behind(database: Database, dailies: _Dailies, tmp_path: Path) -> Registered:
    """A working set whose next fold is refused: the first dailies built and projected, the working set
    loaded (they went cold), its registration gone, then two of them tainted and wanted again by another
    process, which folds and projects that (their rows rewritten past its head, no version kept)."""
    _want(database, "first", FIRST)
    builder = _orchestrator(database, dailies, tmp_path, None)
    assert builder.run_until_idle(timeout_s=20)
    builder.close()
    front = LiveState(database.log, use_snapshots=False)
    front_projector = Projector(front, database.changes)
    assert front_projector.project() == front.head_seq
    behind = Registered(database)
    database.projectors.leave(behind.holder)  # (as if its registration went stale)
    assert sum(behind.working.faults.evicted.values()) > 0
    taints = [pb.PartitionTaint(partition_ref=_daily(day), reason="bad input", only_this_ref=True) for day in AGAIN]
    database.log.append([envelope(taint, source=manual("test")) for taint in taints])  # their rows change
    _want(database, "again", AGAIN)
    front.catch_up()
    assert front_projector.project() == front.head_seq
    _want(database, "later", LATER)
    return behind


@pytest.mark.parametrize("how", ["up's supervisor", "run's loop"])
def test_the_orchestrator_of_a_working_set_loaded_again_stops_and_the_next_one_builds(
    database: Database, tmp_path: Path, how: str
) -> None:
    dailies = _Dailies(tmp_path)
    behind = _refused_behind(database, dailies, tmp_path)
    old_state = behind.live.state
    made: list[Orchestrator] = []

    def make() -> Orchestrator:
        made.append(_orchestrator(database, dailies, tmp_path, behind.live))
        return made[-1]

    later = {_daily(day) for day in LATER}

    def built() -> bool:
        return later <= set(dailies.built) and len(dailies.built) == len(FIRST + AGAIN + LATER)

    if how == "up's supervisor":
        supervisor = Supervisor(make, first_backoff_s=60)  # (a failure would wait a minute)
        try:
            _wait_until(built)
            assert supervisor.health.failures == 0
        finally:
            supervisor.request_stop()
            supervisor.thread.join(20)
    else:
        stop = threading.Event()
        threading.Thread(target=lambda: (_wait_until(built), stop.set()), daemon=True).start()
        _orchestrate(make, False, 60, stop)  # (in the main thread: it listens for SIGTERM)
        assert built()
    assert len(made) == 2  # the first stopped once the state was loaded again
    assert behind.live.loads == 2 and behind.live.state is not old_state
    assert sorted(dailies.built) == sorted([*map(_daily, FIRST), *map(_daily, AGAIN), *later])  # once each
    replayed = BuildState(strict=True)
    replay_into(replayed, database.log)
    behind.live.catch_up()
    assert rejections(behind.live.state) == rejections(replayed)
    with behind.live.read() as state:
        for ref in [*later, *map(_daily, AGAIN)]:
            assert state.canonical_instance(ref).state == InstanceState.LIVE  # type: ignore[union-attr]
        for want_id, want in dict.items(replayed.wants):  # (those gone cold read back)
            assert state.wants.get(want_id).state == want.state, want_id  # type: ignore[union-attr]


def test_the_supervisor_starts_a_new_orchestrator_at_once_when_the_state_was_loaded_again() -> None:
    made: list[int] = []
    running = threading.Event()

    class LoadedAgainOnce:
        def __init__(self) -> None:
            made.append(len(made) + 1)
            self.number = len(made)

        def run(self, stop: threading.Event) -> None:
            if self.number == 1:
                raise StateLoadedAgain("the working set was loaded again: a row ahead")
            running.set()
            stop.wait()

        def wake(self) -> None:
            pass

    supervisor = Supervisor(LoadedAgainOnce, first_backoff_s=60)  # a failure would wait a minute
    try:
        assert running.wait(10), "no new orchestrator"
        assert supervisor.health.status == "running" and supervisor.health.failures == 0
    finally:
        supervisor.request_stop()
        supervisor.thread.join(10)
    assert made == [1, 2]
