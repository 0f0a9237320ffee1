"""Schedules ticking in real `partbuild run` processes (tests/data/graphs/ticking.py: every second, no Spark): ticks
want and build; a SIGKILL across ticks and a restart follow the catch-up policy and tick no time twice; a paused
schedule ticks nothing until resumed; two bucketed workers, and a three-worker group losing a member to SIGKILL,
tick each time once."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.fold.build_state import BuildState
from partbuild.state.fold.records import WantState
from partbuild.state.log.store import EventLog

pytestmark = pytest.mark.process

GRAPH = Path(__file__).resolve().parents[1] / "data/graphs/ticking.py"
SECOND = 1000
WAIT_S = 90


def start(db: str, root: Path, name: str, *extra: str) -> subprocess.Popen[bytes]:
    exe = shutil.which("partbuild", path=str(Path(sys.executable).parent))
    assert exe is not None
    command = [
        exe, "run", "--db", db, "--graph", str(GRAPH), "--warehouse", str(root / "warehouse"),
        "--heartbeat-interval", "0.3", "--heartbeat-timeout", "3", *extra,
    ]  # fmt: skip
    env = os.environ | {"TICKING_EVERY_S": "1"}
    output = (root / f"{name}.log").open("ab")
    return subprocess.Popen(command, env=env, stdout=output, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)


class Ticks:
    """The log's schedule ticks, folded as they come: accepted ones (with who appended them) and rejected ones."""

    def __init__(self, db: str) -> None:
        self.db = db
        self.state = BuildState(strict=True)
        self.accepted: list[tuple[pb.ScheduleTick, str]] = []  # (tick, the worker that appended it)
        self.rejected = 0

    def poll(self) -> Ticks:
        event = pb.Event()
        with EventLog.open(self.db) as log:
            for seq, payload in log.iter_payloads(self.state.head_seq):
                reason = self.state.apply_payload(seq, payload)
                event.ParseFromString(payload)
                if event.WhichOneof("payload") != "schedule_tick":
                    continue
                if reason is None:
                    tick = pb.ScheduleTick()
                    tick.CopyFrom(event.schedule_tick)
                    self.accepted.append((tick, event.source.system.worker))
                else:
                    self.rejected += 1
        return self

    def times(self) -> list[int]:
        return [tick.tick_ms for tick, _ in self.accepted]

    def wait(self, what: str, condition: Callable[[Ticks], bool], *processes: subprocess.Popen[bytes]) -> None:
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline:
            for process in processes:
                assert process.poll() is None, f"a worker exited with {process.returncode} while waiting for {what}"
            if condition(self.poll()):
                return
            time.sleep(0.1)
        raise AssertionError(f"not {what} within {WAIT_S} s: ticks at {self.times()}")


def stop(*processes: subprocess.Popen[bytes]) -> None:
    for process in processes:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
    for process in processes:
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            raise


def assert_each_time_once(ticks: Ticks) -> None:
    times = ticks.times()
    assert times == sorted(set(times)), f"a time ticked twice or out of order: {times}"
    assert all(time_ms % SECOND == 0 for time_ms in times)


def test_ticks_want_and_build_and_a_restart_after_sigkill_catches_up_the_latest_time_only(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'ticks.db'}"
    first = start(db, tmp_path, "first")
    ticks = Ticks(db)
    try:
        ticks.wait("three ticks", lambda t: len(t.accepted) >= 3, first)
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=30)
    before = len(ticks.poll().accepted)
    last_before = ticks.times()[-1]
    time.sleep(3)  # three times or more pass with nobody ticking
    second = start(db, tmp_path, "second")
    try:
        ticks.wait("a tick after the restart", lambda t: len(t.accepted) >= before + 2, second)
    finally:
        stop(second)
    ticks.poll()
    assert ticks.rejected == 0
    assert_each_time_once(ticks)
    caught_up, _ = ticks.accepted[before]
    # LATEST: one tick for the gap, at its latest time; every time between is counted as missed, none ticked.
    assert caught_up.tick_ms - last_before >= 3 * SECOND
    assert caught_up.missed == (caught_up.tick_ms - last_before) // SECOND - 1
    assert caught_up.kind in (pb.TICK_KIND_SCHEDULED, pb.TICK_KIND_CATCH_UP)
    state = ticks.state
    for tick, _ in ticks.accepted:
        want = state.wants[tick.want.want_id]
        assert list(want.refs) == [f"report/{tick.tick_ms // SECOND}"]
        assert state.want_causes[want.want_id].startswith("schedule often ticked at ")
    built = [state.wants[tick.want.want_id].state for tick, _ in ticks.accepted[:before]]
    assert set(built) <= {WantState.SUCCESSFUL, WantState.BUILDING, WantState.IDLE}  # no failure
    assert state.wants[ticks.accepted[-2][0].want.want_id].state == WantState.SUCCESSFUL


def test_a_paused_schedule_ticks_nothing_until_resumed(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'paused.db'}"
    worker = start(db, tmp_path, "worker")
    ticks = Ticks(db)
    partbuild = shutil.which("partbuild", path=str(Path(sys.executable).parent))
    assert partbuild is not None
    try:
        ticks.wait("a tick", lambda t: len(t.accepted) >= 1, worker)
        subprocess.run([partbuild, "automation", "pause", "often", "--db", db, "--graph", str(GRAPH)], check=True)
        paused_at = len(ticks.poll().accepted)
        time.sleep(3.5)
        assert len(ticks.poll().accepted) <= paused_at + 1  # at most one appended before the pause was folded
        held = len(ticks.accepted)
        time.sleep(2)
        assert len(ticks.poll().accepted) == held, "a paused schedule ticked"
        subprocess.run([partbuild, "automation", "resume", "often", "--db", db, "--graph", str(GRAPH)], check=True)
        ticks.wait("ticks after the resume", lambda t: len(t.accepted) >= held + 2, worker)
    finally:
        stop(worker)
    assert_each_time_once(ticks.poll())
    resumed, _ = ticks.accepted[held]
    assert resumed.missed >= 3  # the paused seconds: given up under LATEST, not ticked


def test_two_bucketed_workers_tick_each_time_once(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'buckets.db'}"
    workers = [start(db, tmp_path, f"b{n}", "--bucket-total", "2", "--bucket-id", str(n)) for n in (1, 2)]
    ticks = Ticks(db)
    try:
        ticks.wait("four ticks", lambda t: len(t.accepted) >= 4, *workers)
    finally:
        stop(*workers)
    ticks.poll()
    assert ticks.rejected == 0  # only the owner of the schedule's bucket evaluates it
    assert_each_time_once(ticks)
    assert len({worker for _, worker in ticks.accepted}) == 1


def test_a_three_worker_group_ticks_each_time_once_while_the_ticking_member_is_killed(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'group.db'}"
    group = ("--group", "g", "--buckets", "6", "--member-timeout", "2")
    members = {n: start(db, tmp_path, f"m{n}", *group) for n in range(3)}
    ticks = Ticks(db)
    try:
        ticks.wait("three ticks", lambda t: len(t.accepted) >= 3, *members.values())
        ticking_pid = int(ticks.accepted[-1][1].split(":")[1])
        (victim,) = [n for n, process in members.items() if process.pid == ticking_pid]
        members.pop(victim).send_signal(signal.SIGKILL)
        killed_at = len(ticks.poll().accepted)
        ticks.wait(
            "ticks by another member",
            lambda t: sum(1 for _, worker in t.accepted[killed_at:] if f":{ticking_pid}:" not in worker) >= 2,
            *members.values(),
        )
    finally:
        stop(*members.values())
    assert_each_time_once(ticks.poll())
    assert len({worker for _, worker in ticks.accepted}) >= 2
