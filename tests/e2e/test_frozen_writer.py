"""A writer frozen inside its append (SIGSTOP, after the lock and its first row) blocks the others only for the bound.

One process stops itself inside an append (the test-only pause point
`PARTBUILD_TEST_STOP_IN_APPEND`), holding the append lock with half its batch
written. Two other writers then append: they must get through within the hold
bound (PostgreSQL ends the frozen session idle in its transaction; on SQLite a
waiter kills the stopped holder), not when it wakes. Woken, the frozen writer
finds its append failed and retries it (PostgreSQL) or is already dead
(SQLite). Then the log replays strictly: seqs 1..head contiguous, every event
once, the frozen writer's batch whole once or not at all, and no half of it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import IO, Any

import pytest

from partbuild.state.log.replay import load_state
from partbuild.state.log.store import STOP_IN_APPEND_ENV, EventLog

pytestmark = pytest.mark.process

HOLD_S = 2.0  # the bound under test
WAIT_S = 20.0  # a waiter outlasts the hold bound: it gets the lock once the frozen holder lost it
OTHERS = ("w1", "w2")
BATCHES = 4
FINISH_TIMEOUT_S = 40.0  # on main the others never finish while the frozen writer sleeps

# A child: once the file `go` exists, append `batches` batches of two wants; one not done is retried as it was.
_CHILD = """
import json, sys, time
from pathlib import Path
from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.log.events import envelope, manual
from partbuild.state.log.store import EventLog, WriteNotDone

url, name, batches, go = sys.argv[1], sys.argv[2], int(sys.argv[3]), Path(sys.argv[4])
with EventLog.open(url, auto_upgrade=False) as log:
    print(json.dumps({"ready": name}), flush=True)
    while not go.exists():
        time.sleep(0.01)
    for batch in range(batches):
        events = []
        for i in range(2):
            want = pb.WantCreate(want_id=f"{name}-{batch}-{i}", partition_refs=["agg/daily_clicks/date=2026-01-01"])
            event = envelope(want, source=manual(name))
            event.event_id = f"{name}-{batch}-{i}"
            events.append(event)
        print(json.dumps({"appending": batch}), flush=True)
        started = time.monotonic()
        while True:
            try:
                result = log.append(events)
                break
            except WriteNotDone as exc:
                print(json.dumps({"not_done": type(exc).__name__, "message": str(exc)}), flush=True)
        waited = time.monotonic() - started
        print(json.dumps({"batch": batch, "first": result.first_seq, "seconds": waited}), flush=True)
"""


def start_writer(db: str, name: str, batches: int, go: Path, *, stop_inside: bool = False) -> subprocess.Popen[str]:
    """A writer process, once it has opened the log (it appends when `go` exists)."""
    env = {**os.environ, "PARTBUILD_WRITE_HOLD_S": str(HOLD_S), "PARTBUILD_WRITE_WAIT_S": str(WAIT_S)}
    if stop_inside:
        env[STOP_IN_APPEND_ENV] = "1"
    proc = subprocess.Popen(
        [sys.executable, "-c", _CHILD, db, name, str(batches), str(go)], env=env, stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None and json.loads(proc.stdout.readline()) == {"ready": name}
    return proc


def is_stopped(pid: int) -> bool:
    text = Path(f"/proc/{pid}/stat").read_text()
    return text[text.rfind(")") + 2] in "Tt"


def wait_stopped(proc: subprocess.Popen[str], timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not is_stopped(proc.pid):
        assert proc.poll() is None, f"the frozen writer exited ({proc.returncode}) instead of stopping"
        assert time.monotonic() < deadline, "the frozen writer never reached its pause point"
        time.sleep(0.02)


def lines(stream: IO[str] | None) -> list[dict[str, Any]]:
    assert stream is not None
    return [json.loads(line) for line in stream.read().splitlines() if line.strip()]


def test_a_frozen_writer_blocks_the_others_only_for_the_bound(db: str, tmp_path: Path) -> None:
    others = [start_writer(db, name, BATCHES, tmp_path / "others-go") for name in OTHERS]
    frozen = start_writer(db, "frozen", 1, tmp_path / "frozen-go", stop_inside=True)
    try:
        (tmp_path / "frozen-go").touch()
        wait_stopped(frozen)
        stopped_at = time.monotonic()
        (tmp_path / "others-go").touch()  # they start appending at once, into the frozen writer's lock
        for proc in others:
            try:
                proc.wait(timeout=max(0.1, stopped_at + FINISH_TIMEOUT_S - time.monotonic()))
            except subprocess.TimeoutExpired:
                pytest.fail(f"the other writers were still blocked {FINISH_TIMEOUT_S:g} s after a writer froze")
            assert proc.returncode == 0
        blocked_s = time.monotonic() - stopped_at
        reports = [lines(proc.stdout) for proc in others]
        waits = [r["seconds"] for report in reports for r in report if "batch" in r]
        longest = max(waits)
        print(f"\nothers done {blocked_s:.2f} s after the freeze; longest append {longest:.2f} s (bound {HOLD_S:g} s)")
        assert len(waits) == len(OTHERS) * BATCHES

        if frozen.poll() is None:
            frozen.send_signal(signal.SIGCONT)
        frozen.wait(timeout=30)
        frozen_report = lines(frozen.stdout)
        print(f"frozen writer: exit {frozen.returncode}, said {frozen_report}")
    finally:
        for proc in [frozen, *others]:
            if proc.poll() is None:
                proc.send_signal(signal.SIGCONT)
                proc.kill()
                proc.wait()

    with EventLog.open(db, auto_upgrade=False) as log:
        head = log.head()
        stored = log.read(0, 10_000)
        state, _ = load_state(log)
    assert [event.seq for event in stored] == list(range(1, head + 1))
    ids = [event.event_id for event in stored]
    assert len(ids) == len(set(ids)), "an event was written twice"
    assert state.rejections == []
    theirs = {f"{name}-{batch}-{i}" for name in OTHERS for batch in range(BATCHES) for i in range(2)}
    assert theirs <= set(ids)
    mine = [event_id for event_id in ids if event_id.startswith("frozen-")]
    if frozen.returncode == 0:  # woken, its append failed cleanly and it appended again, whole
        assert mine == ["frozen-0-0", "frozen-0-1"]
        assert any("not_done" in r for r in frozen_report), "the frozen append cannot have kept its lock"
    else:  # SQLite: the stopped holder was killed; its transaction never committed
        assert frozen.returncode == -signal.SIGKILL
        assert mine == []
    if db.startswith("postgres"):
        assert frozen.returncode == 0
