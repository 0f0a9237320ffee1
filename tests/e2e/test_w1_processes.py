"""`partbuild run` as real processes on W1: killed mid-run and restarted; stopped with SIGTERM."""

from __future__ import annotations

import signal
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from examples.clicks.pipeline import daily_ref, days_in_range, raw_ref, weekly_ref
from partbuild.state.fold.records import InstanceState, JobRunState, WantState

from sparkkit import CLICKS_DAYS, CLICKS_START
from w1kit import WEEKS, finished, read_counts, replay, start_orchestrator, wait_for_event, want_weeklies

pytestmark = pytest.mark.process


def test_killed_mid_run_then_restart_completes_every_want(spark: Any, clicks_root: Path, tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'crash.db'}"
    want_weeklies(db)
    first = start_orchestrator(db, clicks_root, tmp_path, "first")
    try:
        wait_for_event(db, "job_run_heartbeat", 120, first)  # a job run is executing right now
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=30)
    crashed = replay(db)
    orphans = list(crashed.active_run_ids)
    assert orphans, "the kill should leave a job run queued or running"
    assert crashed.want_counts[WantState.SUCCESSFUL] < len(crashed.wants)

    second = start_orchestrator(db, clicks_root, tmp_path, "second", "--until-idle", "--timeout", "150")
    assert finished(second, 200, tmp_path / "second.log") == 0, (tmp_path / "second.log").read_text()[-3000:]

    state = replay(db)
    assert not state.rejections
    assert all(w.state == WantState.SUCCESSFUL for w in state.wants.values())
    assert not state.active_run_ids
    for run_id in orphans:  # failed as stale, then retried by the second process
        orphan = state.job_runs[run_id]
        assert orphan.state == JobRunState.FAILED and "no heartbeat" in (orphan.error_message or "")
    days = days_in_range(CLICKS_DAYS, CLICKS_START)
    wanted = [weekly_ref(w) for w in WEEKS] + [daily_ref(d) for d in days] + [raw_ref(d) for d in days]
    live = Counter(i.ref for i in state.instances.values() if i.state == InstanceState.LIVE)
    for ref in wanted:
        canonical = state.canonical_instance(ref)
        assert canonical is not None and canonical.state == InstanceState.LIVE, ref
        assert live[ref] == 1, f"{ref} has {live[ref]} Live instances"
    week = WEEKS[-1]
    weekly = state.canonical_instance(weekly_ref(week))
    assert weekly is not None and sum(read_counts(spark, weekly.location or "").values()) == 6 * 1000


def test_sigterm_lets_runs_in_flight_finish(clicks_root: Path, tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'term.db'}"
    want_weeklies(db)
    process = start_orchestrator(db, clicks_root, tmp_path, "term")
    wait_for_event(db, "job_run_heartbeat", 120, process)
    dispatched = set(replay(db).job_runs)
    process.send_signal(signal.SIGTERM)
    assert finished(process, 120, tmp_path / "term.log") == 0
    state = replay(db)
    assert not state.rejections
    # Every run it had started ended with an outcome; nothing is left half-done.
    assert not state.active_run_ids
    assert all(state.job_runs[run_id].state == JobRunState.SUCCEEDED for run_id in dispatched)
    assert "SIGTERM: finishing the runs in flight" in (tmp_path / "term.log").read_text()
