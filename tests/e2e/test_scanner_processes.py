"""A source scan killed with SIGKILL in the middle of a pass, in a real child process: the next scanner
resumes from the cursor in the log, repeating and skipping no partition. Scans driven in this process:
tests/orchestrator/sources/test_scanner.py.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time
from collections import Counter
from collections.abc import Iterator
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
