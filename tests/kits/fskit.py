"""Filesystem connector test kit: real trees on disk, a drain helper, and a scanner child process.

Run as a script it is the child of the kill-and-resume test:

    python tests/kits/fskit.py ROOT STATE_DIR PAGE_ITEMS PAUSE_SECONDS

It resumes from STATE_DIR/cursor.json when present, and for each page first
appends the page's keys (hex, one line per page) to STATE_DIR/emitted.log, then
persists the cursor (write a temporary file, fsync, rename). That order is the
at-least-once boundary: a kill between the two re-emits that one page on resume.
"""

from __future__ import annotations

import json
import os
import stat
import sys
import time
from collections.abc import Iterable
from pathlib import Path

from partbuild.orchestrator.connectors.filesystem import FilesystemConnector
from partbuild.orchestrator.connectors.paging import Budgets, Cursor, KeyRange
from partbuild.orchestrator.connectors.toxic import ItemKey

BIG = 1 << 40


def write_tree(root: Path, files: dict[bytes, bytes]) -> Path:
    """Create `files` (relative path bytes -> content) under `root`, directories as needed."""
    base = os.fsencode(root)
    for rel, data in files.items():
        path = os.path.join(base, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as handle:
            handle.write(data)
    return root


def empty_files(root: Path, dirs: int, per_dir: int) -> Path:
    """`dirs` directories of `per_dir` empty files each: fast to make, wide enough to be fair."""
    for d in range(dirs):
        folder = root / f"d{d:04d}"
        folder.mkdir(parents=True)
        for f in range(per_dir):
            os.mknod(folder / f"f{f:05d}", 0o644 | stat.S_IFREG)  # one syscall per file, no fd
    return root


def clicks_tree(root: Path, days: int = 12, parts: int = 3) -> dict[bytes, bytes]:
    """A W1-shaped raw tree (day directories of part files and _SUCCESS) plus names that test the order."""
    files: dict[bytes, bytes] = {}
    for day in range(1, days + 1):
        for part in range(parts):
            name = f"clicks/date=2026-01-{day:02d}/part-{part:05d}.json".encode()
            files[name] = bytes([day % 251]) * ((day * 37 + part * 101) % 700 + 1)
        files[f"clicks/date=2026-01-{day:02d}/_SUCCESS".encode()] = b""
    files.update({b"a!b": b"1", b"a/b": b"22", b"a0": b"333", "é/ü.txt".encode(): b"u", b"raw\xff\xfe": b"x" * 9})
    write_tree(root, files)
    return files


def drain_keys(connector: FilesystemConnector, budgets: Budgets, cursor: Cursor | None = None) -> list[bytes]:
    cursor, keys = cursor or Cursor(), []
    while (page := connector.fill_page(KeyRange(), cursor, budgets)) is not None:
        keys += [item.key.raw_bytes() for item in page.items]
        cursor = page.cursor
    return keys


def walk_order(root: Path) -> list[bytes]:
    """The expected keys: every regular file, by a whole-tree sort (fine for small test trees)."""
    base = os.fsencode(root)
    found = []
    for folder, _, names in os.walk(base):
        for name in names:
            path = os.path.join(folder, name)
            if os.path.isfile(path) and not os.path.islink(path):
                found.append(os.path.relpath(path, base))
    return sorted(found)


def read_emitted(state: Path) -> list[list[bytes]]:
    """The pages a scanner child logged, each a list of keys."""
    log = state / "emitted.log"
    if not log.exists():
        return []
    lines = log.read_text().splitlines()
    return [[bytes.fromhex(k) for k in line.split(",")] for line in lines if line]


def read_cursor(state: Path) -> bytes | None:
    path = state / "cursor.json"
    if not path.exists():
        return None
    return bytes.fromhex(json.loads(path.read_text())["last_key_hex"])


def _persist(state: Path, last_key: bytes) -> None:
    temporary = state / "cursor.json.tmp"
    with open(temporary, "w") as handle:
        json.dump({"last_key_hex": last_key.hex()}, handle)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temporary, state / "cursor.json")


def _log_page(state: Path, keys: Iterable[bytes]) -> None:
    with open(state / "emitted.log", "a") as handle:
        handle.write(",".join(k.hex() for k in keys) + "\n")
        handle.flush()
        os.fsync(handle.fileno())


def scan_child(root: str, state: Path, page_items: int, pause: float) -> None:
    connector = FilesystemConnector(root)
    last = read_cursor(state)
    cursor = Cursor() if last is None else Cursor(ItemKey(last))
    while (page := connector.fill_page(KeyRange(), cursor, Budgets(page_items, BIG))) is not None:
        _log_page(state, (item.key.raw_bytes() for item in page.items))  # emitted: handed downstream
        _persist(state, page.last_key.raw_bytes())  # then committed
        cursor = page.cursor
        time.sleep(pause)  # keeps the scan long enough to be killed in the middle
    (state / "done").touch()


if __name__ == "__main__":
    scan_child(sys.argv[1], Path(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]))
