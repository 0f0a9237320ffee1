"""`partbuild run` as real processes on W1: killed mid-run and restarted; stopped with SIGTERM."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from conftest import CLICKS_DAYS, CLICKS_START

from examples.clicks.pipeline import daily_ref, days_in_range, raw_ref, weekly_ref, weeks_in_range
from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.build_state import BuildState
from partbuild.state.events import envelope, manual
from partbuild.state.model import InstanceState, JobRunState, WantState
from partbuild.state.store import EventLog

REPO_ROOT = Path(__file__).resolve().parents[1]
WEEKS = weeks_in_range(CLICKS_DAYS, CLICKS_START)


def start_orchestrator(db: str, clicks_root: Path, tmp_path: Path, name: str, *extra: str) -> subprocess.Popen[bytes]:
    exe = shutil.which("partbuild", path=str(Path(sys.executable).parent))
    assert exe is not None
    env = os.environ | {
        "PARTBUILD_CLICKS_ROOT": str(clicks_root),
        "PARTBUILD_CLICKS_DAYS": str(CLICKS_DAYS),
        "PARTBUILD_SPARK_MASTER": "local[2]",
    }
    command = [
        exe, "run", "--db", db, "--graph", str(REPO_ROOT / "examples/clicks/pipeline.py"),
        "--warehouse", str(tmp_path / "warehouse"), "--heartbeat-interval", "0.3", "--heartbeat-timeout", "3", *extra,
    ]  # fmt: skip
    output = (tmp_path / f"{name}.log").open("wb")
    return subprocess.Popen(command, env=env, stdout=output, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)


def wait_for_event(db: str, event_type: str, timeout_s: float, process: subprocess.Popen[bytes]) -> None:
    """Block until an event of `event_type` is in the log (the orchestrator got that far)."""
    deadline = time.monotonic() + timeout_s
    after = 0
    with EventLog.open(db) as log:
        while time.monotonic() < deadline:
            assert process.poll() is None, "orchestrator exited early"
            for stored in log.read(after, 1000):
                after = stored.seq
                if stored.event_type == event_type:
                    return
            time.sleep(0.05)
    raise AssertionError(f"no {event_type} within {timeout_s} s")


def replay(db: str) -> BuildState:
    state = BuildState(strict=True)
    with EventLog.open(db) as log:
        for seq, payload in log.iter_payloads():
            state.apply_payload(seq, payload)
    return state


def want_weeklies(db: str) -> None:
    with EventLog.open(db) as log:
        log.append(
            [
                envelope(pb.WantCreate(want_id=f"w-{week}", partition_refs=[weekly_ref(week)]), source=manual("t"))
                for week in WEEKS
            ]
        )


def read_counts(spark: Any, location: str) -> dict[str, int]:
    return {row["url"]: row["count"] for row in spark.read.parquet(location).collect()}


def finished(process: subprocess.Popen[bytes], timeout_s: float, log_file: Path) -> int:
    try:
        return process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        process.kill()
        raise AssertionError(f"did not finish in {timeout_s} s:\n{log_file.read_text()[-3000:]}") from None


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
