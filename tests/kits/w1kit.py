"""Helpers for tests that run `partbuild run` as a real process on workload W1."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from examples.clicks.pipeline import weekly_ref, weeks_in_range
from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.fold.build_state import BuildState
from partbuild.state.log.events import envelope, manual
from partbuild.state.log.store import EventLog

from sparkkit import CLICKS_DAYS, CLICKS_START

REPO_ROOT = Path(__file__).resolve().parents[2]
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
