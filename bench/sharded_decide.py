"""Decision time of one worker of 4 split by bucket against a single worker deciding for all refs, on 100,000 wants.

Target: one worker of 4 (`decide(..., ownership=StaticBucket(k, 4))`) takes at most 0.35x the
time of the whole `decide` on the same state, measured in the same run. The
state: 100,000 single-ref wants of a job whose input (source data) is Live, so
every wanted partition is ready to run and each decision buffers runs for all the
refs it owns. A worker's first decision also computes each ref's bucket (cold);
later ones read it from the worker's memory (warm): both are reported.

    .venv/bin/python bench/sharded_decide.py [--wants 100000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import statistics
import time

from _common import machine

from partbuild.orchestrator.buckets import StaticBucket
from partbuild.orchestrator.decide import decide
from partbuild.orchestrator.graph import Graph, Job, SourceDataset
from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.fold.build_state import BuildState
from partbuild.state.log.events import envelope, manual

TARGET = 0.35
WORKERS = 4


def build_state(wants: int) -> tuple[BuildState, Graph]:
    graph = Graph(
        [
            Job(
                "daily",
                ["bench/daily/n={n:int}"],
                lambda ctx: None,
                inputs=lambda p: [f"bench/raw/n={p['n']}"],
                batch_size=10,
                max_concurrency=1_000_000,
            )
        ],
        [SourceDataset("raw", "bench/raw/n={n:int}", locate=lambda p: None)],
    )
    state = BuildState()
    seq = 0
    for n in range(wants):
        seq += 1
        state.apply(seq, envelope(pb.PartitionObserved(partition_ref=f"bench/raw/n={n}", location=f"/raw/{n}")))
        seq += 1
        want = pb.WantCreate(want_id=f"w{n}", partition_refs=[f"bench/daily/n={n}"])
        state.apply(seq, envelope(want, source=manual("bench")))
    return state, graph


def timed(function: object) -> float:
    started = time.perf_counter()
    function()  # type: ignore[operator]
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--wants", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    print(f"machine: {machine()}")
    state, graph = build_state(args.wants)
    buckets = [StaticBucket(k, WORKERS) for k in range(1, WORKERS + 1)]
    cold = [timed(lambda owned=owned: decide(state, graph, 0, owned)) for owned in buckets]
    whole: list[float] = []
    split: list[float] = []
    for _ in range(args.rounds):  # alternating, so noise hits both
        whole.append(timed(lambda: decide(state, graph, 0)))
        split.extend(timed(lambda owned=owned: decide(state, graph, 0, owned)) for owned in buckets)
    whole_s, split_s, cold_s = statistics.median(whole), statistics.median(split), statistics.median(cold)
    runs = [len(decide(state, graph, 0, owned).new_runs) for owned in buckets]
    print(
        f"{args.wants:,} ready wants; runs buffered per worker of {WORKERS}: {runs} (whole "
        f"{len(decide(state, graph, 0).new_runs)})"
    )
    print(f"whole decide: median {whole_s * 1000:.0f} ms over {args.rounds} rounds")
    print(
        f"one worker of {WORKERS}: median {split_s * 1000:.0f} ms warm, {cold_s * 1000:.0f} ms on its first "
        "decision (buckets computed)"
    )
    ratio = split_s / whole_s
    verdict = "PASS" if ratio <= TARGET else "MISS"
    print(
        f"decide by bucket: one worker of {WORKERS} takes {ratio:.2f}x the whole time "
        f"(cold {cold_s / whole_s:.2f}x) (target <= {TARGET}x): {verdict}"
    )


if __name__ == "__main__":
    main()
