"""Helpers for tests that run `partbuild run --group` workers as real processes on W1."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.fold.build_state import BuildState
from partbuild.state.fold.records import JobRunState
from partbuild.state.log.store import EventLog
from partbuild.state.rules.group import GroupState, owned_sets

from w1kit import finished, start_orchestrator
from w1workerkit import Processes, assert_built_once_each, assert_running, output

GROUP = "w1"
BUCKETS = 12
MEMBER_TIMEOUT_S = 4.0  # short, yet well above a heartbeat's delay on two cores shared by four JVMs
STEP_TIMEOUT_S = 240.0  # a JVM per process on two cores
DECLARED_DEAD_EXIT = 3
FENCED = ("job_run_buffer", "instances_wait_upstream")


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


def start_member(db: str, clicks_root: Path, tmp_path: Path, name: str, *extra: str) -> subprocess.Popen[bytes]:
    """`partbuild run --group` without --until-idle (`extra`: more options); output in `<name>.log`."""
    options = ("--group", GROUP, "--buckets", str(BUCKETS), "--member-timeout", str(MEMBER_TIMEOUT_S), *extra)
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


def form_group(
    db: str,
    clicks_root: Path,
    tmp_path: Path,
    procs: Processes,
    names: list[str],
    options: Mapping[str, tuple[str, ...]] | None = None,
) -> Tail:
    """Start `names` as group workers (each with its `options`, if any); wait until they form one balanced
    epoch. Returns the log's tail."""
    for name in names:
        procs[name] = start_member(db, clicks_root, tmp_path, name, *(options or {}).get(name, ()))
    tail = Tail(db)
    waited = wait_for(tail, "balanced", balanced(tail, [procs[n].pid for n in names]), procs, names, tmp_path)
    print(f"{len(names)} workers formed a balanced group in {waited:.1f} s")
    return tail


def leader_name(tail: Tail, procs: Processes, names: list[str]) -> str:
    group = tail.group()
    assert group is not None
    return next(name for name in names if task_of(tail, procs[name].pid) == group.leader)


def victim_with_a_run(tail: Tail, procs: Processes, names: list[str], tmp_path: Path) -> tuple[str, str, str]:
    """Wait until one of `names` executes a job run; (its name, task id, run id)."""
    found: list[tuple[str, str, str]] = []

    def check(state: BuildState) -> bool:
        for name in names:
            task = task_of(tail, procs[name].pid)
            run_id = running_run_of(tail, task) if task else None
            if task and run_id:
                found.append((name, task, run_id))
                return True
        return False

    wait_for(tail, f"running a job run on one of {names}", check, procs, list(procs), tmp_path)
    return found[0]


def finish(tail: Tail, procs: Processes, survivors: list[str], tmp_path: Path, disturbed: bool = True) -> BuildState:
    """Wait for every want, SIGTERM the survivors, then check the strict replay. Returns the final state."""
    waited = wait_for(tail, "all wants successful", all_successful, procs, survivors, tmp_path)
    print(f"wants successful after {waited:.1f} s more")
    stop_all(procs, survivors, tmp_path)
    state = tail.poll()
    assert_built_once_each(state)
    assert_fenced(tail)
    # Survivors: members of an epoch that are members of the next (the leader takes the orphans).
    # Every disturbed case has one; three workers may also have joined before the first epoch.
    assert tail.kept or not disturbed, "no rebalance with survivors was checked"
    for seq, task, owned, data in tail.kept:
        assert data == owned, f"epoch at seq {seq}: survivor {task} owned {sorted(owned)}, given {sorted(data)}"
    print(group_verify(tail.db))
    return state


def assert_fenced(tail: Tail) -> None:
    """Every accepted decision of a group worker is fenced by its own task."""
    for kind in FENCED:
        for seq, event in tail.accepted(kind).items():
            fence = getattr(event, kind).fence
            assert (fence.group, fence.task_id) == (GROUP, event.source.system.worker), f"seq {seq}: {event}"


def epochs_without(tail: Tail, task: str) -> list[int]:
    """Seqs of accepted epochs that dropped `task` (it was a member of the epoch before)."""
    seqs, was_member = [], False
    for seq, event in sorted(tail.accepted("group_epoch").items()):
        member = task in event.group_epoch.members
        if was_member and not member:
            seqs.append(seq)
        was_member = member
    return seqs


def assert_stale_run_retried(state: BuildState, run_id: str) -> None:
    """The dead worker's run was failed by the new owner of its buckets as soon as the group removed the worker
    (well before the heartbeat timeout), and its partitions were built by another run."""
    run = state.job_runs[run_id]
    assert run.state == JobRunState.FAILED and "is no longer a member of group" in (run.error_message or ""), run
    for uuid in run.instance_uuids:
        assert any(state.job_runs[r].state == JobRunState.SUCCEEDED for r in state.instances[uuid].attempts)
