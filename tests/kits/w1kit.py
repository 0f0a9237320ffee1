"""Helpers for tests that run `partbuild run` as real processes on workload W1: start them, keep them in a
table that kills what is left, read their output, and check the log they built."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from examples.clicks.pipeline import daily_ref, days_in_range, raw_ref, weekly_ref, weeks_in_range
from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.fold.build_state import BuildState
from partbuild.state.fold.records import InstanceState, JobRunState, WantState
from partbuild.state.log.events import envelope, manual
from partbuild.state.log.store import EventLog

from sparkkit import CLICKS_DAYS, CLICKS_START

REPO_ROOT = Path(__file__).resolve().parents[2]
WEEKS = weeks_in_range(CLICKS_DAYS, CLICKS_START)
Processes = dict[str, subprocess.Popen[bytes]]  # name -> process


def wanted_refs() -> list[str]:
    """The weeklies, their dailies and the raw sources: every ref the wants need Live."""
    days = days_in_range(CLICKS_DAYS, CLICKS_START)
    return [weekly_ref(w) for w in WEEKS] + [daily_ref(d) for d in days] + [raw_ref(d) for d in days]


def built_refs() -> list[str]:
    """The wanted refs job runs build (raw sources are observed, not built)."""
    return [ref for ref in wanted_refs() if not ref.startswith("raw/")]


@contextmanager
def processes() -> Iterator[Processes]:
    """A name -> process table; whatever is still running on the way out is killed."""
    table: Processes = {}
    try:
        yield table
    finally:
        for process in table.values():
            if process.poll() is None:
                process.kill()
                process.wait(timeout=30)


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


def output(tmp_path: Path, name: str) -> str:
    """What process `name` printed so far."""
    return (tmp_path / f"{name}.log").read_text(errors="replace")


def assert_running(procs: Processes, names: list[str], tmp_path: Path) -> None:
    """Fail with its output if one of `names` has exited."""
    for name in names:
        code = procs[name].poll()
        assert code is None, f"{name} exited ({code}):\n{output(tmp_path, name)[-3000:]}"


def assert_built_once_each(state: BuildState) -> None:
    """Every want successful; one Live instance per wanted ref; nothing built by two succeeded runs."""
    assert all(want.state == WantState.SUCCESSFUL for want in state.wants.values())
    assert not state.active_run_ids
    live = Counter(i.ref for i in state.instances.values() if i.state == InstanceState.LIVE)
    for ref in wanted_refs():
        canonical = state.canonical_instance(ref)
        assert canonical is not None and canonical.state == InstanceState.LIVE, ref
        assert live[ref] == 1, f"{ref} has {live[ref]} Live instances"
    succeeded = [run for run in state.job_runs.values() if run.state == JobRunState.SUCCEEDED]
    built = Counter(uuid for run in succeeded for uuid in run.instance_uuids)
    assert [uuid for uuid, runs in built.items() if runs > 1] == []
    refs = Counter(state.instances[uuid].ref for uuid in built)
    assert [ref for ref, times in refs.items() if times > 1] == []
    assert set(refs) == set(built_refs())
