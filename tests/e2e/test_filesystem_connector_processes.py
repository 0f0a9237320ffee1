"""The filesystem connector killed mid-scan in a child process (tests/kits/fskit.py) and resumed from its
persisted cursor: nothing skipped, at most the page in flight repeated."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import fskit
from fskit import empty_files, walk_order

pytestmark = pytest.mark.process


def _start_child(root: Path, state: Path, page_items: int, pause: float) -> subprocess.Popen[bytes]:
    command = [sys.executable, fskit.__file__, str(root), str(state), str(page_items), str(pause)]
    return subprocess.Popen(command, cwd=Path(fskit.__file__).parents[2])  # the repo root


def test_resume_after_a_kill_mid_scan_skips_nothing_and_repeats_at_most_the_page_in_flight(tmp_path: Path) -> None:
    """At-least-once, exactly at one boundary.

    The child logs a page's keys (emitted) before it persists that page's cursor
    (committed). SIGKILL lands anywhere: if between the two, the resumed scan
    emits that one page again, since its cursor never reached disk. So: nothing
    at or before the persisted cursor is emitted again, the only repeats are
    keys of the single page after it, and the union is exactly the tree.
    """
    root = empty_files(tmp_path / "root", dirs=6, per_dir=150)
    expected = walk_order(root)
    state = tmp_path / "state"
    state.mkdir()
    page_items = 7
    child = _start_child(root, state, page_items, pause=0.02)
    deadline = time.monotonic() + 120
    while len(fskit.read_emitted(state)) < 20 and child.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    child.send_signal(signal.SIGKILL)
    assert child.wait(30) == -signal.SIGKILL, "the child ended on its own before the kill"
    assert not (state / "done").exists(), "the child finished before the kill: the test proved nothing"
    first = [k for page in fskit.read_emitted(state) for k in page]
    persisted = fskit.read_cursor(state)
    assert persisted is not None and first[-1] >= persisted

    resumed = _start_child(root, state, page_items, pause=0.0)
    assert resumed.wait(120) == 0
    second = [k for page in fskit.read_emitted(state) for k in page][len(first) :]
    assert all(k > persisted for k in second), "the resumed scan went back before the persisted cursor"
    repeated = set(first) & set(second)
    assert len(repeated) <= page_items and all(persisted < k <= first[-1] for k in repeated)
    assert sorted(set(first) | set(second)) == expected
    assert len(first) + len(second) - len(repeated) == len(expected)
    assert first == sorted(first) and second == sorted(second)
