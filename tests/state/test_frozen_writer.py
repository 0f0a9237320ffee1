"""Who holds SQLite's write lock, as `state/frozen_writer.py` finds it (the kernel's record, `/proc/locks`).

Killing a stopped holder takes another process: tests/e2e/test_frozen_writer.py.
"""

from __future__ import annotations

import os
import sqlite3
import sys
from pathlib import Path

import pytest

from partbuild.state.frozen_writer import FrozenWriterWatch, is_stopped, write_lock_holder

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")


def test_the_holder_of_the_write_lock_is_found_and_only_while_it_holds_it(tmp_path: Path) -> None:
    database = tmp_path / "pb.db"
    conn = sqlite3.connect(database, isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("CREATE TABLE t (x)")
        shm = tmp_path / "pb.db-shm"
        assert write_lock_holder(shm) is None
        conn.execute("BEGIN IMMEDIATE")
        assert write_lock_holder(shm) == os.getpid()
        conn.execute("ROLLBACK")
        assert write_lock_holder(shm) is None
        assert write_lock_holder(tmp_path / "missing.db-shm") is None
    finally:
        conn.close()


def test_a_running_holder_is_not_stopped_and_never_fenced(tmp_path: Path) -> None:
    database = tmp_path / "pb.db"
    conn = sqlite3.connect(database, isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("BEGIN IMMEDIATE")
        assert not is_stopped(os.getpid())
        watch = FrozenWriterWatch(database, hold_s=0.1)
        for _ in range(3):
            watch.look()  # our own process, running: nothing happens to it
        conn.execute("ROLLBACK")
    finally:
        conn.close()
