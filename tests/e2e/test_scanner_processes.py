"""A source scan killed with SIGKILL in the middle of a pass, in a real child process: the next scanner
resumes from the cursor in the log, repeating and skipping no partition. Scans driven in this process:
tests/orchestrator/sources/test_scanner.py.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from partbuild.orchestrator.graph import SourceDataset
from partbuild.orchestrator.sources.discovery import filesystem_discovery
from partbuild.state.log.store import EventLog

from scankit import drain, events, scanner

pytestmark = pytest.mark.process


@pytest.fixture
def log(db_url: str) -> Iterator[EventLog]:
    with EventLog.open(db_url, auto_upgrade=True) as opened:
        yield opened


# Two discovered sources and no jobs, counting their passes (see its docstring).
IDLE_GRAPH = Path(__file__).resolve().parents[2] / "examples" / "idle_sources.py"
SCAN_SCRIPT = textwrap.dedent(
    """
    import sys, time
    from partbuild.orchestrator.graph import SourceDataset
    from partbuild.orchestrator.sources.discovery import filesystem_discovery
    from partbuild.orchestrator.sources.scanner import SourceScanner
    from partbuild.state.database import Database
    from partbuild.state.log.live import LiveState

    url, root = sys.argv[1], sys.argv[2]
    source = SourceDataset("raw", "raw/n={n:int}", discovery=filesystem_discovery(root, "n={n:int}", page_items=7))
    with Database.open(url) as db:
        log = db.log
        scanner = SourceScanner(log, LiveState(log), [source], checkpoint_every_s=0.0)
        while True:
            scanner.step()
            time.sleep(0.002)
    """
)


def test_a_scan_killed_mid_pass_resumes_without_repeating_or_skipping_a_partition(
    db_url: str, log: EventLog, tmp_path: Path
) -> None:
    root = tmp_path / "tree"
    for n in range(300):
        directory = root / f"n={n}"
        directory.mkdir(parents=True)
        for name in ("part-0", "part-1", "_SUCCESS"):
            (directory / name).write_bytes(b"x")
    process = subprocess.Popen([sys.executable, "-c", SCAN_SCRIPT, db_url, str(root)])
    try:
        deadline = time.monotonic() + 60
        while len(events(log, "partition_observed")) < 40:
            assert time.monotonic() < deadline and process.poll() is None, "the scanner made no progress"
            time.sleep(0.05)
        process.send_signal(signal.SIGKILL)
        process.wait(10)
    finally:
        process.kill()
    before = len(events(log, "partition_observed"))
    assert before < 300, "the scan finished before the kill: make the tree bigger"
    source_set = SourceDataset("raw", "raw/n={n:int}", discovery=filesystem_discovery(root, "n={n:int}", page_items=7))
    scan, live = scanner(log, source_set)
    drain(scan, live)
    refs = Counter(e.partition_observed.partition_ref for e in events(log, "partition_observed"))
    assert refs == Counter(f"raw/n={n}" for n in range(300))
    assert live.state.rejections == [] and live.state.sources["raw"].passes_done == 1


def _passes(root: Path, name: str) -> int:
    path = root / f"{name}.passes"
    return len(path.read_text().splitlines()) if path.exists() else 0


def _start_run(db_url: str, root: Path, graph: Path) -> subprocess.Popen[bytes]:
    exe = Path(sys.executable).parent / "partbuild"
    env = {**os.environ, "IDLE_ROOT": str(root), "IDLE_RESCAN_S": "0.1", "IDLE_PAGE_ITEMS": "2"}
    command = [str(exe), "run", "--db", db_url, "--graph", str(graph), "--warehouse", str(root / "warehouse")]
    return subprocess.Popen(command, env=env, stdin=subprocess.DEVNULL)


def _wait(condition: Callable[[], bool], process: subprocess.Popen[bytes], what: str, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert process.poll() is None, f"the orchestrator exited before {what}"
        assert time.monotonic() < deadline, f"no {what} within {timeout_s} s"
        time.sleep(0.05)


def test_an_idle_orchestrator_with_two_discovered_sources_appends_nothing_and_notices_a_change(
    db_url: str, log: EventLog, tmp_path: Path
) -> None:
    root = tmp_path / "sources"
    for name in ("a", "b"):
        for day in (1, 2, 3):
            directory = root / name / f"date=2026-01-0{day}"
            directory.mkdir(parents=True)
            for file in ("part-0", "_SUCCESS"):
                (directory / file).write_bytes(b"x")
    graph = IDLE_GRAPH
    observed = lambda: len(events(log, "partition_observed"))  # noqa: E731
    process = _start_run(db_url, root, graph)
    try:
        _wait(lambda: observed() == 6, process, "first passes")
        _wait(lambda: min(_passes(root, "a"), _passes(root, "b")) >= 2, process, "second passes")
        head, passes = log.head(), {name: _passes(root, name) for name in ("a", "b")}
        _wait(lambda: min(_passes(root, name) - passes[name] for name in ("a", "b")) >= 20, process, "idle passes")
        assert log.head() == head, "idle passes appended to the log"
        (root / "b" / "date=2026-01-04").mkdir()
        for file in ("part-0", "_SUCCESS"):
            (root / "b" / "date=2026-01-04" / file).write_bytes(b"y")
        noticed_by = _passes(root, "b") + 2  # the pass running now may have listed past it; the next one cannot
        _wait(lambda: observed() == 7, process, "the new partition")
        assert _passes(root, "b") <= noticed_by
        process.send_signal(signal.SIGTERM)
        assert process.wait(30) == 0
    finally:
        process.kill()
    # Restarted, after a change made while it was down: it begins a pass at once and observes only that change.
    (root / "a" / "date=2026-01-05").mkdir()
    for file in ("part-0", "_SUCCESS"):
        (root / "a" / "date=2026-01-05" / file).write_bytes(b"z")
    process = _start_run(db_url, root, graph)
    try:
        _wait(lambda: observed() == 8, process, "the change made while down")
        head = log.head()
        passes = _passes(root, "a")
        _wait(lambda: _passes(root, "a") >= passes + 10, process, "idle passes after the restart")
        assert log.head() == head
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(30)
    refs = Counter(e.partition_observed.partition_ref for e in events(log, "partition_observed"))
    assert set(refs.values()) == {1} and len(refs) == 8
