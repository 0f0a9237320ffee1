"""Idle cost of the run loop: many wants waiting for source data that has not arrived.

Target: an idle step (nothing new in the log, no retry due, no source check due)
takes <= 2.5 ms with 100,000 waiting wants, i.e. the loop uses at most 5% of a
core at its 50 ms SQLite poll interval. Measured in the same run for the ratio:
one full `decide` on the same state, which every step used to run.

    .venv/bin/python bench/idle_step.py [--wants 100000] [--steps 200]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from _common import machine

from partbuild.orchestrator.context import JobContext
from partbuild.orchestrator.decide import decide
from partbuild.orchestrator.graph import Graph, Job, Partition, SourceDataset
from partbuild.orchestrator.loop import Orchestrator
from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.database import Database
from partbuild.state.fold.records import WantState
from partbuild.state.log.events import envelope, manual

TARGET_MS = 2.5
CHUNK = 5_000


def never_there(_: Partition) -> None:
    """The raw data never arrives: every want stays waiting."""


def do_nothing(_: JobContext) -> None:
    """Never runs here: its input never becomes Live."""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--wants", type=int, default=100_000)
    parser.add_argument("--steps", type=int, default=200)
    args = parser.parse_args()

    graph = Graph(
        [Job("daily", ["bench/daily/n={n:int}"], do_nothing, inputs=lambda p: [f"bench/raw/n={p['n']}"])],
        [SourceDataset("raw", "bench/raw/n={n:int}", locate=never_there)],
    )
    with tempfile.TemporaryDirectory() as tmp, Database.open(f"sqlite:///{Path(tmp) / 'idle.db'}") as db:
        wants = [
            envelope(pb.WantCreate(want_id=f"w{n}", partition_refs=[f"bench/daily/n={n}"]), source=manual("bench"))
            for n in range(args.wants)
        ]
        for start in range(0, len(wants), CHUNK):
            db.log.append(wants[start : start + CHUNK])
        orchestrator = Orchestrator(db, graph, warehouse=tmp, spark=None, source_check_interval_s=3600)
        try:
            started = time.perf_counter()
            while orchestrator.step():  # derivative wants and waits, then the first look for the sources
                pass
            settle_s = time.perf_counter() - started
            state = orchestrator.state
            waiting = state.want_counts[WantState.UPSTREAM_BUILDING]
            assert waiting == args.wants, f"{waiting} of {args.wants} wants wait for their input"

            step_ms = []
            for _ in range(args.steps):
                started = time.perf_counter()
                assert not orchestrator.step(), "an idle step did something"
                step_ms.append((time.perf_counter() - started) * 1000)
            decide_ms = []
            for _ in range(3):
                started = time.perf_counter()
                decide(state, graph, orchestrator.clock())
                decide_ms.append((time.perf_counter() - started) * 1000)
        finally:
            orchestrator.close()

    idle = statistics.median(step_ms)
    full = statistics.median(decide_ms)
    print(f"machine: {machine()}")
    print(f"{args.wants:,} wants waiting for source data; settling (derivative wants, waits) took {settle_s:.1f} s")
    print(f"  idle step     median {idle:7.2f} ms, p99 {sorted(step_ms)[int(len(step_ms) * 0.99) - 1]:7.2f} ms")
    print(f"  full decide   median {full:7.2f} ms (what every step cost before): {full / idle:,.0f}x an idle step")
    print(f"  at the 50 ms poll, an idle loop uses {idle / (50 + idle):.1%} of a core")
    verdict = "PASS" if idle <= TARGET_MS else "MISS"
    print(f"idle step: {idle:.2f} ms (target <= {TARGET_MS} ms with {args.wants:,} waiting wants): {verdict}")


if __name__ == "__main__":
    main()
