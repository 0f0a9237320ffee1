"""`partbuild run --group` workers on W1 as real processes: losses, pauses and joins, on both backends.

Each case starts real workers (a JVM each), waits until the group has formed
and balanced its buckets, posts the W1 weekly wants through the log, disturbs
the group with real signals (SIGKILL, SIGSTOP/SIGCONT, a late joiner), waits
for every want, stops the survivors with SIGTERM and then checks a strict
replay: every want successful, one Live instance per ref, no instance built by
two succeeded runs, every accepted fenced decision stamped, survivors kept their
buckets across each rebalance, and `partbuild group verify` exits 0.
"""

from __future__ import annotations

import signal
import subprocess
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from partbuild.state.fold.records import ACTIVE_RUN_STATES, JobRunState

from groupworkerkit import (
    DECLARED_DEAD_EXIT,
    Tail,
    assert_stale_run_retried,
    balanced,
    epochs_without,
    finish,
    form_group,
    leader_name,
    runs_by,
    start_member,
    task_of,
    victim_with_a_run,
    wait_for,
)
from upkit import partbuild_exe
from w1kit import finished, want_weeklies
from w1workerkit import Processes, output, processes

pytestmark = pytest.mark.process


# One backend per case where the other adds no code path of its own (CI time): the leader's loss keeps
# both, since its lock is a different mechanism on each (an advisory lock; a file lock).
@pytest.mark.parametrize("db_url", ["postgres"], indirect=True)
def test_three_workers_build_everything(db: str, clicks_root: Path, tmp_path: Path, spark: Any) -> None:
    """Two of them hold their working sets (`--working-set`), beside the third holding its whole state: each
    projects the store and reads its cold records back as of its own fold's head."""
    names = ["a", "b", "c"]
    with processes() as procs:
        options = {"a": ("--working-set",), "b": ("--working-set",)}
        tail = form_group(db, clicks_root, tmp_path, procs, names, options)
        want_weeklies(db)
        state = finish(tail, procs, names, tmp_path, disturbed=False)
    builders = {e.source.system.worker for e in tail.accepted("job_run_buffer").values()}
    assert len(builders) >= 2, f"one worker built everything: {builders}"
    assert not state.rejections, state.rejections
    for name in ("a", "b"):  # they evicted, and saved their working sets at their clean stops
        log = output(tmp_path, name)
        assert "holding a working set at seq" in log and "saved the working set at seq" in log, log[-3000:]
    audit = subprocess.run([partbuild_exe(), "replay", "--db", db, "--verify"], capture_output=True, text=True)
    assert audit.returncode == 0, audit.stdout + audit.stderr


# A member's loss: the paused worker below is one (declared dead by timeout, its run failed as stale and
# retried) and adds its late events; killing one as well added no code path (CI time).
@pytest.mark.parametrize("db_url", ["sqlite", "postgres"], indirect=True)
def test_the_leader_killed_mid_run(db: str, clicks_root: Path, tmp_path: Path, spark: Any) -> None:
    """SIGKILL the leader while it executes a job run: the survivors take over, elect a leader and finish."""
    names = ["a", "b", "c"]
    with processes() as procs:
        tail = form_group(db, clicks_root, tmp_path, procs, names)
        leader = leader_name(tail, procs, names)
        want_weeklies(db)
        victim, task, run_id = victim_with_a_run(tail, procs, [leader], tmp_path)
        procs[victim].kill()
        procs[victim].wait(timeout=30)
        killed_at = time.monotonic()
        survivors = [n for n in names if n != victim]
        wait_for(
            tail,
            f"rebalanced without {victim}",
            lambda _s: bool(epochs_without(tail, task)),
            procs,
            survivors,
            tmp_path,
        )
        print(f"{victim} killed; a new epoch without it {time.monotonic() - killed_at:.1f} s later")
        state = finish(tail, procs, survivors, tmp_path)
    assert_stale_run_retried(state, run_id)
    group = tail.group()
    assert group is not None and task not in group.members and group.leader != task


def pause_while_running(tail: Tail, procs: Processes, names: list[str], tmp_path: Path) -> tuple[str, str, str]:
    """SIGSTOP a worker of `names` while it executes a job run; retried if the run ended just before."""
    for _ in range(10):
        victim, task, run_id = victim_with_a_run(tail, procs, names, tmp_path)
        procs[victim].send_signal(signal.SIGSTOP)
        time.sleep(0.5)
        run = tail.poll().job_runs[run_id]
        if run.state == JobRunState.RUNNING:
            return victim, task, run_id
        procs[victim].send_signal(signal.SIGCONT)
    raise AssertionError("never caught a worker in the middle of a job run")


@pytest.mark.parametrize("db_url", ["postgres"], indirect=True)
def test_a_paused_worker_is_fenced_off(db: str, clicks_root: Path, tmp_path: Path, spark: Any) -> None:
    """SIGSTOP a member past the member timeout, then SIGCONT it as soon as the group has removed it, whether
    or not its runs were failed yet: nothing it appends late is accepted (the fold fences off a removed member's
    runs), it exits 3, and its runs are failed by their new owner and retried."""
    names = ["a", "b", "c"]
    with processes() as procs:
        tail = form_group(db, clicks_root, tmp_path, procs, names)
        leader = leader_name(tail, procs, names)
        want_weeklies(db)
        victim, task, run_id = pause_while_running(tail, procs, [n for n in names if n != leader], tmp_path)
        survivors = [n for n in names if n != victim]
        in_flight = {r for r in runs_by(tail, task) if tail.state.job_runs[r].state in ACTIVE_RUN_STATES}
        assert run_id in in_flight
        wait_for(tail, "rebalanced", lambda _s: bool(epochs_without(tail, task)), procs, survivors, tmp_path)
        resumed_after = epochs_without(tail, task)[0]
        still_active = [r for r in in_flight if tail.state.job_runs[r].state in ACTIVE_RUN_STATES]
        procs[victim].send_signal(signal.SIGCONT)
        code = finished(procs[victim], 120, tmp_path / f"{victim}.log")
        text = output(tmp_path, victim)
        assert code == DECLARED_DEAD_EXIT, f"{victim} exited {code}:\n{text[-3000:]}"
        assert "declared dead by the group" in text and "Traceback" not in text, text[-3000:]
        print(f"{victim} resumed with {len(still_active)} of its {len(in_flight)} runs not failed yet")
        state = finish(tail, procs, survivors, tmp_path)
    for run in in_flight:
        assert_stale_run_retried(state, run)
    mine = runs_by(tail, task)
    # What the victim appended once it resumed (a heartbeat or an outcome of a run the group gave away, a
    # message of its group thread): whatever it was, the fold rejected it.
    late_of_victim = [
        s
        for s, e in tail.events.items()
        if s > resumed_after and (e.source.job_run.job_run_id in mine or e.source.system.worker == task)
    ]
    accepted_late = [s for s in late_of_victim if s not in tail.rejected_seqs()]
    assert accepted_late == [], [tail.events[s] for s in accepted_late]
    kinds = Counter(tail.events[s].WhichOneof("payload") for s in late_of_victim)
    print(f"late events of the paused worker, all rejected: {dict(kinds) or 'none'}")


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_a_fourth_worker_joins_mid_run(db: str, clicks_root: Path, tmp_path: Path, spark: Any) -> None:
    """A worker joining while the group builds: survivors keep theirs, it gets buckets, all is built once.

    Spark starts at a worker's first job run: the newcomer starts once the first run is buffered, so
    its join (it needs no JVM to join) falls while the others are still starting Spark and building.
    """
    names = ["a", "b", "c"]
    with processes() as procs:
        tail = form_group(db, clicks_root, tmp_path, procs, names)
        want_weeklies(db)
        wait_for(tail, "a run buffered", lambda _s: bool(tail.accepted("job_run_buffer")), procs, names, tmp_path)
        procs["d"] = start_member(db, clicks_root, tmp_path, "d")
        pids = [procs[n].pid for n in [*names, "d"]]
        wait_for(tail, "balanced over four", balanced(tail, pids), procs, [*names, "d"], tmp_path)
        group, newcomer = tail.group(), task_of(tail, procs["d"].pid)
        assert group is not None and newcomer is not None and len(group.owned_by(newcomer)) >= 2
        successes = len(tail.accepted("job_run_success"))
        print(f"the newcomer owns buckets {group.owned_by(newcomer)}; {successes} runs had succeeded by then")
        finish(tail, procs, [*names, "d"], tmp_path)
