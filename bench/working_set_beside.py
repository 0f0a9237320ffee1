"""A working set behind another process that folds and projects the same database (issue 37: working sets beside
other folding processes), against that process alone, in one run.

Each mode on a fresh SQLite database in a process of its own: the benchmarks' W1 history appended in batches of
5,000 events; a whole state (a `serve`) folds each batch and projects the store (its passes' time is summed).
In the `beside` mode a working set registered in `state_projectors` (as `up` is), one batch behind, then makes
its projector pass (it writes nothing: the rows are ahead), which checks what it changed against its rows as
of its head and evicts, and folds the batch, reading its cold records back as of its own head while the rows
are written past it. Printed: the whole state's projection time in both modes and their ratio (what keeping the
rows' versions costs the process ahead), the versions kept at most and at the end, the working set's records
held against the whole state's, its faults, and whether its digest (its cold records from the rows) equals
the whole state's.

    .venv/bin/python bench/working_set_beside.py [--instances 300000]

Target (no number in the issue): the process ahead no more than 1.5x its projection time alone; the versions
bounded by the rows written since the working set's registered head (not growing with the log); the working set
holding what `bench/working_set.py` measures alone (a fifth of the records or fewer); the same digest.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from _common import BATCH, INSTANCES_PER_WEEK, WEEKS_PER_SITE, machine

from partbuild.examples.clicks.simulate import SimulationPlan, simulate
from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.database import Database, Registration
from partbuild.state.log.digest import state_digest
from partbuild.state.log.live import LiveState
from partbuild.state.schema import state_record_versions
from partbuild.state.store.checkpoints import keep_working_set
from partbuild.state.store.cold_digest import working_set_digest
from partbuild.state.store.projector import Projector

TARGET_RATIO = 1.5
NEVER = 10**9


class Behind:
    """A working set registered as `up` registers it (`Registration`): its head held before its first read,
    beaten one behind."""

    def __init__(self, db: Database) -> None:
        self.registration = registration = Registration(db, working_set=True)
        self.live = LiveState(db.log, load=registration.load(db.changes))
        assert self.live.working is not None
        self.projector = Projector(self.live, db.changes, writer=registration.holder)
        keep_working_set(self.live, self.projector, checkpoint_every=NEVER)

    def step(self) -> None:
        """A pass while the rows are ahead (it checks what it changed against its rows as of its head, then
        evicts), a beat, then a fold of what the process ahead has projected already (read back as of its head)."""
        self.projector.project()
        self.registration.beat(self.live)
        self.live.catch_up()


def run(url: str, instances: int, beside: bool) -> dict[str, object]:
    sites = math.ceil(instances / (WEEKS_PER_SITE * INSTANCES_PER_WEEK)) + 1
    projecting = folding_behind = 0.0
    versions_peak = held_peak = 0
    with Database.open(url, auto_upgrade=True) as db:
        front = LiveState(db.log, use_snapshots=False)
        front_projector = Projector(front, db.changes)
        behind = Behind(db) if beside else None
        batch: list[pb.Event] = []
        for event in [*simulate(SimulationPlan(weeks=WEEKS_PER_SITE, sites=sites)), None]:
            if event is not None:
                batch.append(event)
                if len(batch) < BATCH:
                    continue
            if batch:
                db.log.append(batch, expected_head=db.log.head())
            batch = []
            front.catch_up()
            began = time.perf_counter()
            front_projector.project()
            projecting += time.perf_counter() - began
            if behind is not None:
                began = time.perf_counter()
                behind.step()
                folding_behind += time.perf_counter() - began
                versions_peak = max(versions_peak, _versions(db))
                held_peak = max(held_peak, len(dict.keys(behind.live.state.instances)))
        found: dict[str, object] = {
            "events": front.state.head_seq,
            "instances": len(front.state.instances),
            "projecting_s": projecting,
        }
        if behind is not None:
            working = behind.live.working
            assert working is not None
            behind.step()
            behind.projector.project()  # at the rows' watermark: what changed since, drained
            state = behind.live.state
            found |= {
                "behind_s": folding_behind,
                "versions_peak": versions_peak,
                "versions_end": _versions(db),
                "held": len(dict.keys(state.instances)),
                "held_peak": held_peak,
                "read_back": sum(working.faults.read_back.values()),
                "evicted": sum(working.faults.evicted.values()),
                "same_digest": working_set_digest(working, db.changes.records) == state_digest(front.state),
            }
        return found


def _versions(db: Database) -> int:
    with db.changes.records.engine.connect() as conn:
        return int(conn.execute(sa.select(sa.func.count()).select_from(state_record_versions)).scalar_one())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--instances", type=int, default=300_000)
    parser.add_argument("--mode", choices=("alone", "beside"), help=argparse.SUPPRESS)  # a child's
    parser.add_argument("--db", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.mode is not None:
        print(json.dumps(run(args.db, args.instances, args.mode == "beside")))
        return
    print(f"machine: {machine()}")
    results: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for mode in ("alone", "beside"):
            url = f"sqlite:///{Path(tmp) / mode}.db"
            command = [sys.executable, __file__, "--mode", mode, "--db", url, "--instances", str(args.instances)]
            done = subprocess.run(command, capture_output=True, text=True, check=True)
            results[mode] = json.loads(done.stdout.strip().splitlines()[-1])
    alone, beside = results["alone"], results["beside"]
    ratio = beside["projecting_s"] / alone["projecting_s"]
    print(f"W1 log: {alone['events']:,} events, {alone['instances']:,} instances; batches of {BATCH:,}")
    print(f"whole state's projection alone:                {alone['projecting_s']:.1f} s")
    print(f"whole state's projection beside a working set: {beside['projecting_s']:.1f} s ({ratio:.2f}x)")
    print(f"working set behind it (fold, pass, checks):    {beside['behind_s']:.1f} s")
    print(f"versions kept: at most {beside['versions_peak']:,} rows, {beside['versions_end']:,} at the end")
    print(
        f"working set: {beside['held_peak']:,} instances held at most ({beside['held']:,} at the end) of "
        f"{beside['instances']:,}, "
        f"{beside['evicted']:,} evictions, {beside['read_back']:,} read back; same digest: {beside['same_digest']}"
    )
    held_share = beside["held_peak"] / max(1, beside["instances"])
    verdict = ratio <= TARGET_RATIO and bool(beside["same_digest"]) and held_share <= 0.2
    print(f"target: projection <= {TARGET_RATIO}x, held <= 20 %, same digest: {'PASS' if verdict else 'MISS'}")


if __name__ == "__main__":
    main()
