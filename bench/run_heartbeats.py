"""A long job run's heartbeats (issue 37): what folding them costs, what they hold, and a read of the run as of a seq.

A run's heartbeats after the first are (seq, ms) pairs packed in `BuildState.run_heartbeats` (16 bytes
each, appended in place) and a read as of a seq searches them (`history.heartbeat_at`). Before, each
heartbeat was an entry shifted into the run's packed-int history: every heartbeat copied the whole int, and
a read walked every entry (the issue measured 236 ms for a 24 h run at the default 5 s, 17,280 heartbeats).

Folds one run with N heartbeats, then 4N, into a fresh state: the fold's cost per heartbeat (flat: no copy of
what came before), the bytes kept per heartbeat, and the p50/p99 of reading the run as of a seq in the middle
of its heartbeats (`PastState.job_runs[run]`). Beside them, in the same run, the walk of a packed-int history
of N entries, which is what the read did before.

    .venv/bin/python bench/run_heartbeats.py [--heartbeats 17280] [--reads 200]
"""

from __future__ import annotations

import argparse
import statistics
import time

from _common import machine, percentile

from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.fold.build_state import BuildState
from partbuild.state.fold.history import RUN_ENTRY_BITS, run_entries, run_entry
from partbuild.state.fold.past import PastState
from partbuild.state.fold.records import JobRunState
from partbuild.state.log.events import envelope, from_job_run, manual

READ_TARGET_MS = 10.0  # a point read as of any seq (issue 37)
RUN = "run-long"
EVERY_MS = 5_000  # the default heartbeat interval


def folded(heartbeats: int) -> tuple[BuildState, float, int]:
    """A state holding one run with `heartbeats` heartbeats; the seconds folding them; the seq in their middle."""
    state = BuildState()
    clock = 1_790_000_000_000
    seq = 0

    def apply(payload: object, source: pb.EventSource) -> None:
        nonlocal seq, clock
        seq += 1
        clock += EVERY_MS
        reason = state.apply(seq, envelope(payload, source=source, timestamp_ms=clock))  # type: ignore[arg-type]
        assert reason is None, reason

    apply(pb.WantCreate(want_id="w", partition_refs=["out/a"]), manual("bench"))
    uuid = next(iter(state.instances))
    apply(pb.JobRunBuffer(job_run_id=RUN, job_label="job", instance_uuids=[uuid]), from_job_run(RUN))
    started = time.perf_counter()
    for _ in range(heartbeats):
        apply(pb.JobRunHeartbeat(job_run_id=RUN), from_job_run(RUN))
    seconds = time.perf_counter() - started
    return state, seconds, 2 + heartbeats // 2


def read_ms(state: BuildState, seq: int, reads: int) -> list[float]:
    """Milliseconds of each read of the run as of `seq`."""
    past = PastState(state, seq, lambda: 0)
    found = []
    for _ in range(reads):
        started = time.perf_counter()
        run = past.job_runs[RUN]
        found.append((time.perf_counter() - started) * 1000)
        assert run.state == JobRunState.RUNNING and run.last_heartbeat_ms
    return found


def old_walk_ms(heartbeats: int) -> float:
    """Milliseconds to walk a packed-int history of `heartbeats` entries, newest first (the read before)."""
    history = 0
    for seq in range(heartbeats):
        history = history << RUN_ENTRY_BITS | run_entry(seq + 3, int(JobRunState.RUNNING), 1_790_000_000_000 + seq)
    started = time.perf_counter()
    for _ in run_entries(history):
        pass
    return (time.perf_counter() - started) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--heartbeats", type=int, default=17_280)
    parser.add_argument("--reads", type=int, default=200)
    args = parser.parse_args()
    print(f"machine: {machine()}")
    verdicts = []
    for count in (args.heartbeats, 4 * args.heartbeats):
        state, seconds, middle = folded(count)
        kept = len(state.run_heartbeats[RUN])
        reads = read_ms(state, middle, args.reads)
        p50, p99 = statistics.median(reads), percentile(reads, 99)
        print(
            f"{count:,} heartbeats: fold {seconds / count * 1e6:.2f} us each, {kept / count:.0f} bytes each kept, "
            f"run as of seq {middle:,}: p50 {p50:.3f} ms, p99 {p99:.3f} ms (target <= {READ_TARGET_MS} ms)"
        )
        verdicts.append(p99 <= READ_TARGET_MS)
    before = old_walk_ms(args.heartbeats)
    print(f"the read before (a packed-int history of {args.heartbeats:,} entries walked): {before:.1f} ms")
    print(f"run_heartbeats: {'PASS' if all(verdicts) else 'MISS'}")


if __name__ == "__main__":
    main()
