"""A group leader hung past the member timeout (SIGSTOP): the survivors take its lock and go on, on both backends.

Three `partbuild run --group` workers (a JVM each) form a group and build W1;
the leader is SIGSTOPped while it executes a job run. A paused process keeps its
lock (its process and connection are alive), so the survivors take it away: on
PostgreSQL a survivor terminates the lock's session, on SQLite it SIGKILLs the
holder (see `state.leader_lock`). Then a survivor leads, an epoch drops the
paused task, its stale run is failed and rebuilt, and the strict replay holds
(every want successful, one Live instance per ref, nothing built twice,
`partbuild group verify`). Woken up, the PostgreSQL ex-leader hears it was
declared dead and exits 3 without a traceback; the SQLite one is already dead.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path
from typing import Any

import pytest

from partbuild.state.fold.records import JobRunState

from groupworkerkit import (
    DECLARED_DEAD_EXIT,
    Tail,
    assert_stale_run_retried,
    epochs_without,
    finish,
    form_group,
    leader_name,
    task_of,
    victim_with_a_run,
    wait_for,
)
from memberkit import writes_blocked
from w1kit import finished, want_weeklies
from w1workerkit import Processes, output, processes

pytestmark = pytest.mark.process

# The locks every writer needs (appends take the log head, heartbeats the members' rows): a process
# stopped inside a transaction holding one would block the whole group, however leadership is handled.
EVERY_WRITER_LOCKS = ("SELECT 1 FROM log_head FOR UPDATE", "SELECT 1 FROM group_members FOR UPDATE")


def pause_mid_run(tail: Tail, procs: Processes, name: str, db: str, tmp_path: Path) -> tuple[str, str]:
    """SIGSTOP worker `name` while it executes a job run, between two transactions; (its task, the run id).

    Stopped outside any transaction, everything it appended is committed, so the
    log read right after the stop says whether the run was still going.
    """
    for _ in range(20):
        _, task, run_id = victim_with_a_run(tail, procs, [name], tmp_path)
        procs[name].send_signal(signal.SIGSTOP)
        if writes_blocked(db, *EVERY_WRITER_LOCKS) or tail.poll().job_runs[run_id].state != JobRunState.RUNNING:
            procs[name].send_signal(signal.SIGCONT)
            time.sleep(0.02)  # let it leave its transaction (or start its next run) before trying again
            continue
        return task, run_id
    raise AssertionError(f"never caught {name} in the middle of a job run, outside a transaction")


def survivors_saying(tmp_path: Path, survivors: list[str], words: str, within_s: float = 30.0) -> list[str]:
    """The survivors whose output says `words`, waiting until one does (at most `within_s`)."""
    deadline = time.monotonic() + within_s
    while True:
        said = [n for n in survivors if words in output(tmp_path, n)]
        if said or time.monotonic() > deadline:
            return said
        time.sleep(0.1)


@pytest.mark.parametrize("db_url", ["postgres", "sqlite"], indirect=True)
def test_a_paused_leader_is_taken_over(db: str, clicks_root: Path, tmp_path: Path, spark: Any) -> None:
    names = ["a", "b", "c"]
    sqlite = db.startswith("sqlite")
    with processes() as procs:
        tail = form_group(db, clicks_root, tmp_path, procs, names)
        victim = leader_name(tail, procs, names)
        survivors = [n for n in names if n != victim]
        want_weeklies(db)
        task, run_id = pause_mid_run(tail, procs, victim, db, tmp_path)
        paused_at = time.monotonic()

        wait_for(tail, "an epoch without the paused leader", lambda _s: bool(epochs_without(tail, task)), procs,
                 survivors, tmp_path)  # fmt: skip
        took = time.monotonic() - paused_at
        group = tail.group()
        assert group is not None and task not in group.members
        new_leader = next(n for n in survivors if task_of(tail, procs[n].pid) == group.leader)
        print(f"leader {victim} paused; {new_leader} led an epoch without it {took:.1f} s later")

        # The survivor that expelled the holder says what it did, naming its task. It may say so a
        # moment after the epoch: PostgreSQL frees the lock before the terminated session is gone, so
        # the other survivor can take the lock and lead while the expeller still waits for the end.
        how = "killed it with SIGKILL" if sqlite else "terminated its session"
        said = survivors_saying(tmp_path, survivors, f"held by {task}, not a live member")
        assert said and all(how in output(tmp_path, n) for n in said), [output(tmp_path, n) for n in survivors]

        wait_for(tail, "stale run failed", lambda s: s.job_runs[run_id].state == JobRunState.FAILED, procs,
                 survivors, tmp_path)  # fmt: skip
        procs[victim].send_signal(signal.SIGCONT)
        code = finished(procs[victim], 120, tmp_path / f"{victim}.log")
        text = output(tmp_path, victim)
        if sqlite:  # fenced by killing: it died stopped, without a word
            assert code == -signal.SIGKILL, f"{victim} exited {code}:\n{text[-3000:]}"
        else:  # its lock session is gone, its row reaped: its next heartbeat declares it dead
            assert code == DECLARED_DEAD_EXIT, f"{victim} exited {code}:\n{text[-3000:]}"
            assert "declared dead by the group" in text and "Traceback" not in text, text[-3000:]
        state = finish(tail, procs, survivors, tmp_path)
    assert_stale_run_retried(state, run_id)
    group = tail.group()
    assert group is not None and group.leader != task and task not in group.members
