"""Filesystem connector benchmark: items per second of a 100,000-file scan, peak memory at 10k vs 100k files.

Trees of empty files in directories of 1,000 (10 x 1,000 and 100 x 1,000): the
same depth and width, so only the tree's size differs and a walk that holds one
listing per level should peak at the same memory for both. Each scan drains the
whole tree in pages of `--page` items; every page resumes from the previous
page's last key by seeking (no state kept between pages), as a restarted
scanner would. The rate is measured without tracemalloc (which slows
allocation), the peaks in a separate pass with it.

    .venv/bin/python bench/filesystem_scan.py [--page 1000] [--repeat 3] [--dir /dev/shm]
"""

from __future__ import annotations

import argparse
import os
import shutil
import stat
import tempfile
import time
import tracemalloc
from pathlib import Path

from _common import machine

from partbuild.orchestrator.connectors.filesystem import FilesystemConnector
from partbuild.orchestrator.connectors.paging import Budgets, Cursor, KeyRange

PER_DIR = 1000


def build(root: Path, files: int) -> Path:
    for d in range(files // PER_DIR):
        folder = root / f"d{d:04d}"
        folder.mkdir(parents=True)
        for f in range(PER_DIR):
            os.mknod(folder / f"f{f:05d}", 0o644 | stat.S_IFREG)  # one syscall per file, no fd
    return root


def drain(root: Path, page: int) -> int:
    """Items of a full scan in pages of `page`, keeping no item past its page."""
    connector = FilesystemConnector(root)
    budgets = Budgets(page, 1 << 40)
    cursor, count = Cursor(), 0
    while (found := connector.fill_page(KeyRange(), cursor, budgets)) is not None:
        count += len(found)
        cursor = found.cursor
    return count


def rate(root: Path, page: int, repeat: int) -> tuple[int, float]:
    """(items, best items per second over `repeat` scans)."""
    best = 0.0
    items = 0
    for _ in range(repeat):
        started = time.perf_counter()
        items = drain(root, page)
        best = max(best, items / (time.perf_counter() - started))
    return items, best


def peak(root: Path, page: int) -> int:
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        drain(root, page)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--page", type=int, default=1000, help="max_items per page")
    parser.add_argument("--repeat", type=int, default=3, help="scans of the 100k tree; the best rate counts")
    shm = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None  # tmpfs: building is fast even on a busy disk
    parser.add_argument("--dir", default=shm, help="where to build the trees (default: /dev/shm, else the temp dir)")
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="pb-fs-bench-", dir=args.dir))
    try:
        started = time.perf_counter()
        trees = {n: build(base / str(n), n) for n in (10_000, 100_000)}
        print(f"machine: {machine()}")
        print(f"built 110,000 empty files in {time.perf_counter() - started:.1f}s under {args.dir or 'the temp dir'}")
        items, per_second = rate(trees[100_000], args.page, args.repeat)
        print(f"scan of {items:,} files, pages of {args.page}: {per_second:,.0f} items/s (best of {args.repeat})")
        peaks = {n: peak(root, args.page) for n, root in trees.items()}
        for n, value in peaks.items():
            print(f"peak traced memory, {n:,} files: {value / 1024:,.0f} KiB")
        print(f"ratio 100k / 10k: {peaks[100_000] / peaks[10_000]:.3f}")
    finally:
        shutil.rmtree(base)


if __name__ == "__main__":
    main()
