"""A fold that holds its working set (state/fold/cold.py) against one holding everything, on a W1 log being
written (issue 37 item 2).

Each mode in a process of its own, on a fresh SQLite database: the benchmarks' W1 history appended in batches
of 5,000 events, the live state folding each batch and its state store projected every `--every` events (as
`serve` and `up` do), and, in the working-set mode, every record not changed since the projection evicted to
the store's rows, read back when the fold touches it. Printed per mode: the wall time, the resident memory at
the end and at its peak, the records held in memory, the records read back; then the working set's memory and
time as ratios of the whole state's, measured in the same run. Then the log the first mode wrote, replayed from
seq 0 both ways (`load_state`; `replay_in_working_set` over a scratch store): events per second, the digest's
time, the resident memory after and at the peak, and whether the two digests are the same.

    .venv/bin/python bench/working_set.py [--instances 1000000] [--every 20000] [--log URL]

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
from partbuild.state.log.digest import state_digest
from partbuild.state.log.live import LiveState
from partbuild.state.log.replay import load_state
from partbuild.state.store.cold_digest import working_set_digest
from partbuild.state.store.cold_replay import replay_in_working_set
from partbuild.state.store.cold_rows import StoreRows
from partbuild.state.store.projector import Projector

MIB = 1 << 20
TARGET_BYTES_PER_INSTANCE = (2 << 30) / 10_000_000


def fold(url: str, instances: int, every: int, working: bool) -> dict[str, float]:
    """Append the W1 history to an empty log at `url`, folding and projecting as it grows; what it cost."""
    sites = math.ceil(instances / (WEEKS_PER_SITE * INSTANCES_PER_WEEK)) + 1
    gc.collect()
    baseline = rss_bytes()[0]  # the interpreter and the modules: what any process holds before a state
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
            "baseline": baseline,
            "peak": peak,
            "events": state.head_seq,
            "instances": len(state.instances) if held is None else _total_instances(db),
            "held": len(dict.keys(state.instances)) + len(dict.keys(state.job_runs)) + len(dict.keys(state.wants)),
            "read_back": 0 if faults is None else sum(faults.read_back.values()),
        }


def replayed(url: str, working: bool, scratch: str) -> dict[str, float | str]:
    """Replay the whole log at `url` from seq 0, holding everything or a working set over a scratch store."""
    gc.collect()
    baseline = rss_bytes()[0]
    started = time.perf_counter()
    with Database.open(url) as db:
        head = db.log.head()
        if working:
            with Database.open(scratch, auto_upgrade=True) as rows:
                held = replay_in_working_set(db.log, rows.changes.records)
                digested = time.perf_counter()
                digest = working_set_digest(held, rows.changes.records)
        else:
            state = load_state(db.log)[0]
            digested = time.perf_counter()
            digest = state_digest(state)
    resident, peak = rss_bytes()
    return {
        "seconds": digested - started,
        "digest_seconds": time.perf_counter() - digested,
        "resident": resident,
        "peak": peak,
        "baseline": baseline,
        "digest": digest,
        "events": head,
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
    modes = ("whole", "working", "replay-whole", "replay-working")
    parser.add_argument("--mode", choices=modes, help=argparse.SUPPRESS)  # a child's
    parser.add_argument("--db", help=argparse.SUPPRESS)
    parser.add_argument("--scratch", help=argparse.SUPPRESS)
    parser.add_argument("--log", help="replay this log only (a database URL), both ways: no folds of a log written")
    args = parser.parse_args()
    if args.mode in ("whole", "working"):
        print(json.dumps(fold(args.db, args.instances, args.every, args.mode == "working")))
        return
    if args.mode:
        print(json.dumps(replayed(args.db, args.mode == "replay-working", args.scratch)))
        return
    print(f"machine: {machine()}")
    found = {}
    with tempfile.TemporaryDirectory(dir="/work/benchdata" if Path("/work/benchdata").is_dir() else None) as tmp:
        for mode in () if args.log else ("whole", "working"):
            url = f"sqlite:///{tmp}/{mode}.db"
            command = [sys.executable, __file__, "--mode", mode, "--db", url, "--instances", str(args.instances)]
            done = subprocess.run([*command, "--every", str(args.every)], capture_output=True, text=True, check=True)
            found[mode] = json.loads(done.stdout.strip().splitlines()[-1])
            got = found[mode]
            print(
                f"{mode:>8}: {got['events']:,.0f} events, {got['instances']:,.0f} instances in {got['seconds']:.1f} s; "
                f"resident {got['resident'] / MIB:,.0f} MiB (peak {got['peak'] / MIB:,.0f} MiB, "
                f"{(got['resident'] - got['baseline']) / got['instances']:,.0f} B per instance over the "
                f"{got['baseline'] / MIB:,.0f} MiB before the fold); records held {got['held']:,.0f}, "
                f"read back {got['read_back']:,.0f}",
                flush=True,
            )
        for mode in ("replay-whole", "replay-working"):  # the log the first mode wrote, replayed from seq 0
            command = [sys.executable, __file__, "--mode", mode, "--db", args.log or f"sqlite:///{tmp}/whole.db"]
            scratch = f"sqlite:///{tmp}/{mode}.db"
            done = subprocess.run([*command, "--scratch", scratch], capture_output=True, text=True, check=True)
            found[mode] = got = json.loads(done.stdout.strip().splitlines()[-1])
            print(
                f"{mode:>14}: {got['events'] / got['seconds']:,.0f} events/s ({got['seconds']:.1f} s), "
                f"digest in {got['digest_seconds']:.1f} s; resident {got['resident'] / MIB:,.0f} MiB after, "
                f"peak {got['peak'] / MIB:,.0f} MiB",
                flush=True,
            )
        same = found["replay-whole"]["digest"] == found["replay-working"]["digest"]
        print(f"  the same digest both ways: {'yes' if same else 'NO'}")
    if args.log:
        return
    whole, working = found["whole"], found["working"]
    per_instance = (working["resident"] - working["baseline"]) / working["instances"]
    print(
        f"working set / whole state: resident {working['resident'] / whole['resident']:.2f}x, "
        f"peak {working['peak'] / whole['peak']:.2f}x, time {working['seconds'] / whole['seconds']:.2f}x"
    )
    verdict = "PASS" if per_instance <= TARGET_BYTES_PER_INSTANCE else "MISS"
    print(f"  the fold's resident bytes per instance <= {TARGET_BYTES_PER_INSTANCE:.0f} (2 GiB at 10M): {verdict}")


if __name__ == "__main__":
    main()
