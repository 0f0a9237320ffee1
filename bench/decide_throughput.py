"""Decision benchmark: 10,000 wants for 10,000 distinct partitions of one job, no-op executor.

Target: all turned into job runs in under 2 s of orchestrator time. Measured:
the first orchestrator step after the wants are in the log (fold the wants,
decide, append the JobRunBuffer events, fold them, dispatch), and the time
until every want is Successful with a job that does nothing.

    .venv/bin/python bench/decide_throughput.py [--wants 10000] [--batch 10] [--concurrency 1000]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from _common import machine

from partbuild.orchestrator.context import JobContext
from partbuild.orchestrator.graph import Graph, Job
from partbuild.orchestrator.loop import Orchestrator
from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.fold.records import InstanceState, WantState
from partbuild.state.log.events import envelope, manual
from partbuild.state.log.store import EventLog

TARGET_S = 2.0


def do_nothing(_: JobContext) -> None:
    """A job run that builds nothing: only partbuild's own cost is measured."""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--wants", type=int, default=10_000)
    parser.add_argument("--batch", type=int, default=10, help="partitions per job run")
    parser.add_argument("--concurrency", type=int, default=1_000, help="job runs of the job at once")
    args = parser.parse_args()

    graph = Graph(
        [Job("noop", ["bench/noop/part={n:int}"], do_nothing, batch_size=args.batch, max_concurrency=args.concurrency)]
    )
    with tempfile.TemporaryDirectory() as tmp, EventLog.open(f"sqlite:///{Path(tmp) / 'decide.db'}") as log:
        wants = [
            envelope(pb.WantCreate(want_id=f"w{n}", partition_refs=[f"bench/noop/part={n}"]), source=manual("bench"))
            for n in range(args.wants)
        ]
        for start in range(0, len(wants), 5_000):
            log.append(wants[start : start + 5_000])
        orchestrator = Orchestrator(
            log, graph, warehouse=tmp, spark=None, poll_interval_s=0.005, heartbeat_interval_s=60, max_workers=8
        )
        try:
            started = time.perf_counter()
            orchestrator.step()
            first_step = time.perf_counter() - started
            state = orchestrator.state
            buffered = sum(
                1 for uuid in state.canonical.values() if state.instances[uuid].state != InstanceState.MISSING
            )
            runs = len(state.job_runs)
            idle = orchestrator.run_until_idle(timeout_s=300)
            all_done = time.perf_counter() - started
            successful = state.want_counts[WantState.SUCCESSFUL]
        finally:
            orchestrator.close()

    print(f"machine: {machine()}")
    print(
        f"wants: {args.wants:,} for distinct partitions of one job (batch {args.batch}, concurrency {args.concurrency})"
    )
    print(f"  first step: {buffered:,} partitions in {runs:,} job runs in {first_step:.2f} s")
    print(f"  all wants successful with a no-op job: {successful:,} in {all_done:.2f} s (idle: {idle})")
    verdict = "PASS" if buffered == args.wants and first_step < TARGET_S else "MISS"
    print(f"decide: {args.wants:,} wants into job runs in {first_step:.2f} s (target < {TARGET_S:.0f} s): {verdict}")


if __name__ == "__main__":
    main()
