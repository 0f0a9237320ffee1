"""A fold that holds its working set (state/fold/cold.py) against one holding everything, on a W1 log being
written (issue 37 item 2).

Each mode in a process of its own, on a fresh SQLite database: the benchmarks' W1 history appended in batches
of 5,000 events, the live state folding each batch and its state store projected every `--every` events (as
`serve` and `up` do), and, in the working-set mode, every record not changed since the projection evicted to
the store's rows, read back when the fold touches it. Printed per mode: the wall time, the resident memory at
the end and at its peak, the records held in memory, the records read back; then the working set's memory and
time as ratios of the whole state's, measured in the same run.

    .venv/bin/python bench/working_set.py [--instances 1000000] [--every 20000]

The issue's target for `up` is <= 2 GiB at 10M instances: about 200 bytes per instance. This measures the fold
alone (no process uses a working set yet).
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import BATCH, INSTANCES_PER_WEEK, WEEKS_PER_SITE, machine, rss_bytes

from partbuild.examples.clicks.simulate import SimulationPlan, simulate
from partbuild.state.database import Database
from partbuild.state.fold.cold import WorkingSet
from partbuild.state.log.live import LiveState
from partbuild.state.store.cold_rows import StoreRows
from partbuild.state.store.projector import Projector

MIB = 1 << 20
TARGET_BYTES_PER_INSTANCE = (2 << 30) / 10_000_000


def fold(url: str, instances: int, every: int, working: bool) -> dict[str, float]:
    """Append the W1 history to an empty log at `url`, folding and projecting as it grows; what it cost."""
    sites = math.ceil(instances / (WEEKS_PER_SITE * INSTANCES_PER_WEEK)) + 1
    started = time.perf_counter()
    with Database.open(url, auto_upgrade=True) as db:
        live = LiveState(db.log, use_snapshots=False)
        projector = Projector(live, db.changes)
        held = WorkingSet(live.state, StoreRows(db.changes.records, lambda: live.state.head_seq)) if working else None
        batch, since = [], 0
        for event in simulate(SimulationPlan(weeks=WEEKS_PER_SITE, sites=sites)):
            batch.append(event)
            if len(batch) < BATCH:
                continue
            since += _append(db, live, batch)
            batch = []
            if since >= every:
                since = _project(live, projector, held)
        _append(db, live, batch)
        _project(live, projector, held)
        gc.collect()
        state = live.state
        resident, peak = rss_bytes()
        faults = held.faults if held is not None else None
        return {
            "seconds": time.perf_counter() - started,
            "resident": resident,
            "peak": peak,
            "events": state.head_seq,
            "instances": len(state.instances) if held is None else _total_instances(db),
            "held": len(dict.keys(state.instances)) + len(dict.keys(state.job_runs)) + len(dict.keys(state.wants)),
            "read_back": 0 if faults is None else faults.instance + faults.want + faults.run + faults.ref,
        }


def _append(db: Database, live: LiveState, batch: list) -> int:
    if batch:
        db.log.append(batch, expected_head=db.log.head())
        live.catch_up()
    return len(batch)


def _project(live: LiveState, projector: Projector, held: WorkingSet | None) -> int:
    projector.project()
    if held is not None:  # this process folds and projects in one thread: nothing reads meanwhile
        held.evict(held.evictable())
    return 0


def _total_instances(db: Database) -> int:
    with db.changes.records.engine.connect() as conn:
        return conn.exec_driver_sql("SELECT count(*) FROM state_records WHERE kind = 0").scalar_one()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--instances", type=int, default=1_000_000)
    parser.add_argument("--every", type=int, default=20_000, help="events between projections (and evictions)")
    parser.add_argument("--mode", choices=("whole", "working"), help=argparse.SUPPRESS)  # a child's
    parser.add_argument("--db", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.mode:
        print(json.dumps(fold(args.db, args.instances, args.every, args.mode == "working")))
        return
    print(f"machine: {machine()}")
    found = {}
    with tempfile.TemporaryDirectory(dir="/work/benchdata" if Path("/work/benchdata").is_dir() else None) as tmp:
        for mode in ("whole", "working"):
            url = f"sqlite:///{tmp}/{mode}.db"
            command = [sys.executable, __file__, "--mode", mode, "--db", url, "--instances", str(args.instances)]
            done = subprocess.run([*command, "--every", str(args.every)], capture_output=True, text=True, check=True)
            found[mode] = json.loads(done.stdout.strip().splitlines()[-1])
            got = found[mode]
            print(
                f"{mode:>8}: {got['events']:,.0f} events, {got['instances']:,.0f} instances in {got['seconds']:.1f} s; "
                f"resident {got['resident'] / MIB:,.0f} MiB (peak {got['peak'] / MIB:,.0f} MiB, "
                f"{got['resident'] / got['instances']:,.0f} B per instance); records held {got['held']:,.0f}, "
                f"read back {got['read_back']:,.0f}",
                flush=True,
            )
    whole, working = found["whole"], found["working"]
    per_instance = working["resident"] / working["instances"]
    print(
        f"working set / whole state: resident {working['resident'] / whole['resident']:.2f}x, "
        f"peak {working['peak'] / whole['peak']:.2f}x, time {working['seconds'] / whole['seconds']:.2f}x"
    )
    verdict = "PASS" if per_instance <= TARGET_BYTES_PER_INSTANCE else "MISS"
    print(f"  the fold's resident bytes per instance <= {TARGET_BYTES_PER_INSTANCE:.0f} (2 GiB at 10M): {verdict}")


if __name__ == "__main__":
    main()
