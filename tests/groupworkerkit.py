"""Helpers for tests that run `partbuild run --group` workers as real processes on W1."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from test_sharded_workers import Processes, assert_running, output
from w1kit import finished, start_orchestrator

from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.fold.build_state import BuildState
from partbuild.state.fold.records import JobRunState
from partbuild.state.log.store import EventLog
from partbuild.state.rules.group import GroupState, owned_sets

GROUP = "w1"
BUCKETS = 12
MEMBER_TIMEOUT_S = 4.0  # short, yet well above a heartbeat's delay on two cores shared by four JVMs
STEP_TIMEOUT_S = 240.0  # a JVM per process on two cores


class Tail:
    """The log folded as it grows (strict: a bug in a check raises), with every event kept by seq."""

    def __init__(self, db: str) -> None:
        self.db = db
        self.state = BuildState(strict=True)
        self.events: dict[int, pb.Event] = {}
        # Survivors' buckets across each accepted epoch: (epoch seq, task, owned before, data after).
        self.kept: list[tuple[int, str, frozenset[int], frozenset[int]]] = []

    def poll(self) -> BuildState:
        """Fold whatever was appended since the last poll."""
        with EventLog.open(self.db) as log:
            for seq, payload in log.iter_payloads(after_seq=self.state.head_seq):
                before = self.state.groups.get(GROUP)
                self.state.apply_payload(seq, payload)
                event = pb.Event.FromString(payload)
                self.events[seq] = event
                self._record_kept(seq, event, before)
        return self.state

    def _record_kept(self, seq: int, event: pb.Event, before: GroupState | None) -> None:
        after = self.state.groups.get(GROUP)
        if event.WhichOneof("payload") != "group_epoch" or after is None or after.epoch_seq != seq or before is None:
            return
        owned = owned_sets(before.states.values())
        for task in after.members:
            if task in before.states and task != after.leader:
                self.kept.append((seq, task, owned.get(task, frozenset()), after.states[task].data))

    def group(self) -> GroupState | None:
        return self.state.groups.get(GROUP)

    def rejected_seqs(self) -> set[int]:
        return {rejection.seq for rejection in self.state.rejections}

    def accepted(self, kind: str) -> dict[int, pb.Event]:
        rejected = self.rejected_seqs()
        return {s: e for s, e in self.events.items() if s not in rejected and e.WhichOneof("payload") == kind}


def task_of(tail: Tail, pid: int) -> str | None:
    """The task id (WORKER_ID: host:pid:token) of process `pid` among the group's members, if it is one."""
    group = tail.group()
    if group is None:
        return None
    return next((task for task in group.members if task.split(":")[1] == str(pid)), None)


def start_member(db: str, clicks_root: Path, tmp_path: Path, name: str) -> subprocess.Popen[bytes]:
    """`partbuild run --group` without --until-idle; output in `<name>.log`."""
    options = ("--group", GROUP, "--buckets", str(BUCKETS), "--member-timeout", str(MEMBER_TIMEOUT_S))
    return start_orchestrator(db, clicks_root, tmp_path, name, *options)


def wait_for(
    tail: Tail, what: str, check: Callable[[BuildState], bool], procs: Processes, alive: list[str], tmp_path: Path
) -> float:
    """Poll the log until `check(state)`; fail if one of `alive` exits. Returns the seconds waited."""
    start = time.monotonic()
    while time.monotonic() - start < STEP_TIMEOUT_S:
        assert_running(procs, alive, tmp_path)
        if check(tail.poll()):
            return time.monotonic() - start
        time.sleep(0.2)
    raise AssertionError(f"not {what} within {STEP_TIMEOUT_S:g} s; group {tail.group()}")


def balanced(tail: Tail, pids: list[int]) -> Callable[[BuildState], bool]:
    """The check: the current epoch's members are exactly `pids`, every bucket owned, loads within one."""

    def check(state: BuildState) -> bool:
        group = tail.group()
        if group is None or sorted(int(task.split(":")[1]) for task in group.members) != sorted(pids):
            return False
        loads = [len(group.owned_by(task)) for task in group.members]
        return len(group.owners) == BUCKETS and max(loads) - min(loads) <= 1

    return check


def all_successful(state: BuildState) -> bool:
    return bool(state.wants) and all(want.state.name == "SUCCESSFUL" for want in state.wants.values())


def runs_by(tail: Tail, task: str) -> set[str]:
    """Job run ids whose buffer `task` appended (accepted or not)."""
    return {
        e.job_run_buffer.job_run_id
        for e in tail.events.values()
        if e.WhichOneof("payload") == "job_run_buffer" and e.source.system.worker == task
    }


def running_run_of(tail: Tail, task: str) -> str | None:
    """An active run of `task`'s that has sent a heartbeat (it is executing now), if any."""
    state = tail.state
    for run_id in sorted(runs_by(tail, task)):
        run = state.job_runs.get(run_id)
        if run is not None and run.state == JobRunState.RUNNING and run.last_heartbeat_ms:
            return run_id
    return None


def stop_all(procs: Processes, names: list[str], tmp_path: Path) -> None:
    """SIGTERM each of `names`; each lets its runs finish, leaves the group and exits 0."""
    for name in names:
        procs[name].terminate()
    for name in names:
        code = finished(procs[name], 120, tmp_path / f"{name}.log")
        assert code == 0, f"{name} exited {code}:\n{output(tmp_path, name)[-3000:]}"


def group_verify(db: str) -> str:
    """`partbuild group verify --db URL`: must exit 0; its summary line."""
    exe = shutil.which("partbuild", path=str(Path(sys.executable).parent))
    assert exe is not None
    done = subprocess.run([exe, "group", "verify", "--db", db], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout.strip()
