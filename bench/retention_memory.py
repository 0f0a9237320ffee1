"""What retention gives back (issue 37): the memory a state holds before and after dropping superseded instances.

Retention drops superseded instances with their histories; what each added to the counts by state stays,
so counts as of an earlier seq still count it (`BuildState.dropped_changes`, 8 bytes a change, 3 or 4 a
dropped instance). Before, those were per-seq dicts, and the issue measured memory *rising* 371-548 B for
each instance dropped.

Builds a state of `--refs` source partitions observed twice (the first instance of each superseded by the
second), then folds one InstanceRetention dropping every superseded one, and measures with tracemalloc the
memory the state holds before and after (the garbage collected), per dropped instance; also the bytes the
dropped instances' counts keep. Target: memory drops.

    .venv/bin/python bench/retention_memory.py [--refs 100000]
"""

from __future__ import annotations

import argparse
import gc
import time
import tracemalloc

from _common import machine

from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.fold.build_state import BuildState
from partbuild.state.log.events import envelope, manual


def observed_twice(refs: int) -> BuildState:
    """Every `src/n={i}` observed at one location, then at another: half the instances superseded."""
    state = BuildState()
    seq = 0
    for round_ in ("a", "b"):
        for index in range(refs):
            seq += 1
            event = envelope(
                pb.PartitionObserved(partition_ref=f"src/n={index}", location=f"/data/{round_}/{index}"),
                source=manual("bench"),
                timestamp_ms=1_790_000_000_000 + seq,
            )
            assert state.apply(seq, event) is None
    return state


def held() -> int:
    gc.collect()
    return tracemalloc.get_traced_memory()[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--refs", type=int, default=100_000)
    args = parser.parse_args()
    print(f"machine: {machine()}")
    tracemalloc.start()
    state = observed_twice(args.refs)
    before, instances = held(), len(state.instances)
    retention = pb.InstanceRetention(drop_superseded_before_seq=state.head_seq + 1)
    started = time.perf_counter()
    reason = state.apply(
        state.head_seq + 1, envelope(retention, source=manual("bench"), timestamp_ms=1_800_000_000_000)
    )
    seconds = time.perf_counter() - started
    assert reason is None, reason
    after = held()
    dropped = instances - len(state.instances)
    assert dropped == args.refs, dropped
    change = (after - before) / dropped
    print(
        f"{instances:,} instances, {dropped:,} dropped in {seconds:.2f} s: held {before / 2**20:.1f} MiB before, "
        f"{after / 2**20:.1f} MiB after: {change:+.0f} B per dropped instance "
        f"(the counts they keep: {len(state.dropped_changes) / dropped:.0f} B each)"
    )
    print(f"retention_memory: memory drops: {'PASS' if after < before else 'MISS'}")


if __name__ == "__main__":
    main()
