"""What one GIL hand-off costs the loop's thread while the source scanner runs (diagnosis for scan_decision_latency).

A `SourceScanner` thread scans the same 100,000-file tree as bench/scan_decision_latency.py
(SQLite log, no orchestrator). Meanwhile the main thread times calls that release and
retake the GIL and do next to nothing else: `SELECT 1` on an in-memory sqlite3
connection (the sqlite3 module releases the GIL around each statement, as every
database call of a step does) and `time.sleep(0.0002)`. A release shorter than the
other thread's wake-up keeps the GIL (SELECT 1); a longer one (a sleep, a network
round trip, a disk write) hands it to the scanner, and getting it back costs up to the
switch interval while the scanner runs pure Python: the time after which the waiting
thread makes the holder drop it. Measured with the default interval and
with `--switch-interval` (default 1 ms), alternating, in the same run, and with no scan.

    .venv/bin/python bench/diag/gil_handoff.py [--switch-interval 0.001] [--rounds 2]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scan_decision_latency import SOURCE, build_tree, graph_for, pct

from partbuild.orchestrator.sources.scanner import SourceScanner
from partbuild.state.log.live import LiveState
from partbuild.state.log.store import EventLog


def handoffs(until: callable, limit: int) -> tuple[list[float], list[float]]:  # type: ignore[valid-type]
    """Durations (ms) of `SELECT 1` calls and of `time.sleep(0.0002)`, alternating, until `until()` or `limit`."""
    db = sqlite3.connect(":memory:")
    selects, sleeps = [], []
    while len(selects) < limit and not until():
        started = time.perf_counter()
        db.execute("SELECT 1").fetchone()
        selects.append((time.perf_counter() - started) * 1000)
        started = time.perf_counter()
        time.sleep(0.0002)
        sleeps.append((time.perf_counter() - started) * 1000)
    return selects, sleeps


Timings = tuple[list[float], list[float]]


def one(root: Path, workdir: Path, interval: float) -> tuple[Timings, Timings, float]:
    """(hand-offs during a scan, hand-offs with no scan, the pass's seconds) at `interval`."""
    sys.setswitchinterval(interval)
    graph = graph_for(root, 1_000, 0.05)
    with EventLog.open(f"sqlite:///{workdir / 'log.db'}") as log:
        live = LiveState(log, use_snapshots=False)
        scanner = SourceScanner(log, live, [*graph.sources.values()])
        started = time.perf_counter()
        scanner.start()
        sys.setswitchinterval(interval)  # whatever the scanner set
        try:

            def done() -> bool:
                record = live.state.sources.get(SOURCE)
                return record is not None and record.passes_done >= 1

            during = handoffs(done, 1_000_000)
            pass_s = time.perf_counter() - started
        finally:
            scanner.stop()
        idle = handoffs(lambda: False, len(during[0]))
        live.close()
    return during, idle, pass_s


def show(label: str, values: list[float]) -> str:
    return (
        f"{label}: mean {statistics.fmean(values):.3f}  p50 {statistics.median(values):.3f}  "
        f"p99 {pct(values, 0.99):.3f}  max {max(values):.3f} ms (n={len(values)})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--switch-interval", type=float, default=0.001)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    default = sys.getswitchinterval()
    shm = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None
    base = Path(tempfile.mkdtemp(prefix="pb-gil-", dir=shm))
    print(f"load average at start: {' '.join(f'{v:.2f}' for v in os.getloadavg())}")
    try:
        build_tree(base / "tree")
        results: dict[float, tuple[list[float], list[float], list[float], list[float], list[float]]] = {
            default: ([], [], [], [], []),
            args.switch_interval: ([], [], [], [], []),
        }
        for round_ in range(args.rounds):
            arms = [default, args.switch_interval]
            for interval in arms if round_ % 2 == 0 else arms[::-1]:
                workdir = base / f"{round_}-{interval}"
                workdir.mkdir()
                during, idle, pass_s = one(base / "tree", workdir, interval)
                for into, values in zip(results[interval], [*during, *idle], strict=False):
                    into.extend(values)
                results[interval][4].append(pass_s)
        for interval, (select_scan, sleep_scan, select_idle, sleep_idle, passes) in results.items():
            print(f"switch interval {interval * 1000:g} ms (passes: {', '.join(f'{s:.2f}' for s in passes)} s)")
            print("  " + show("SELECT 1 during the scan     ", select_scan))
            print("  " + show("SELECT 1, no scan            ", select_idle))
            print("  " + show("sleep(0.2 ms) during the scan", sleep_scan))
            print("  " + show("sleep(0.2 ms), no scan       ", sleep_idle))
            slow = sum(1 for value in sleep_scan if value >= 0.2 + interval * 1000 * 0.8)
            print(
                f"  {slow / len(sleep_scan):.0%} of the sleeps during the scan overslept >= 0.8 x the switch interval"
            )
    finally:
        sys.setswitchinterval(default)
        shutil.rmtree(base)
    print(f"load average at end: {' '.join(f'{v:.2f}' for v in os.getloadavg())}")


if __name__ == "__main__":
    main()
