"""An orchestrator SIGKILLed while a job's checks run (the job returned, no outcome yet): no instance is Live
without its checks, and the run is retried like any run lost to a crash."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.fold.records import InstanceState, JobRunState, WantState
from partbuild.state.log.events import envelope, manual
from partbuild.state.log.store import EventLog

from w1kit import REPO_ROOT, finished, replay

pytestmark = pytest.mark.process

GRAPH = REPO_ROOT / "tests/data/graphs/held_check.py"
REF = "report/1"


def start(db: str, root: Path, name: str, *extra: str) -> subprocess.Popen[bytes]:
    exe = shutil.which("partbuild", path=str(Path(sys.executable).parent))
    assert exe is not None
    command = [
        exe, "run", "--db", db, "--graph", str(GRAPH), "--warehouse", str(root / "warehouse"),
        "--heartbeat-interval", "0.3", "--heartbeat-timeout", "3", *extra,
    ]  # fmt: skip
    output = (root / f"{name}.log").open("wb")
    env = os.environ | {"HELD_CHECK_ROOT": str(root)}
    return subprocess.Popen(command, env=env, stdout=output, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)


def wait_for_file(pattern: str, root: Path, process: subprocess.Popen[bytes], timeout_s: float = 60) -> Path:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert process.poll() is None, (root / "first.log").read_text()[-3000:]
        if found := sorted(root.glob(pattern)):
            return found[0]
        time.sleep(0.05)
    raise AssertionError(f"no {pattern} within {timeout_s} s")


def test_a_crash_while_checks_run_leaves_nothing_live_unchecked_and_the_run_is_retried(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'crash.db'}"
    with EventLog.open(db) as log:
        log.append([envelope(pb.WantCreate(want_id="w", partition_refs=[REF]), source=manual("t"))])
    (tmp_path / "hold").touch()
    first = start(db, tmp_path, "first")
    try:
        checking = wait_for_file("checking-*", tmp_path, first)  # the job returned; its check is running
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=30)
    uuid = checking.name.removeprefix("checking-")
    crashed = replay(db)
    instance = crashed.instances[uuid]
    assert instance.state == InstanceState.BUILDING and not instance.location
    assert uuid not in crashed.check_results
    (orphan,) = crashed.active_run_ids
    assert (Path(tmp_path / "warehouse") / REF / f"_instance={uuid}" / "rows.txt").exists()  # written, not Live

    (tmp_path / "hold").unlink()
    second = start(db, tmp_path, "second", "--until-idle", "--timeout", "60")
    assert finished(second, 120, tmp_path / "second.log") == 0, (tmp_path / "second.log").read_text()[-3000:]

    state = replay(db)
    assert not state.rejections
    assert state.wants["w"].state == WantState.SUCCESSFUL
    lost = state.job_runs[orphan]
    assert lost.state == JobRunState.FAILED and "no heartbeat" in (lost.error_message or "")
    live = state.canonical_instance(REF)
    assert live is not None and live.state == InstanceState.LIVE
    assert live.uuid == uuid  # the same instance, built again by the retry (it has its own location)
    (entry,) = state.check_results[live.uuid]  # checked once: by the retry, which made it Live
    _seq, ((name, passed, blocking, errored, description, metrics, duration_ms),) = entry
    assert duration_ms > 0  # the gate times each check (recorded since issue 34)
    assert (name, passed, blocking, errored, description, metrics) == (
        "three_rows",
        True,
        True,
        False,
        "3 rows",
        (("rows", 3.0),),
    )
    succeeded = [run for run in state.job_runs.values() if run.state == JobRunState.SUCCEEDED]
    assert [run.job_run_id for run in succeeded] != [orphan] and len(succeeded) == 1
    # No instance of the whole log was ever Live without an entry of checks.
    assert all(i.uuid in state.check_results for i in state.instances.values() if i.state == InstanceState.LIVE)
