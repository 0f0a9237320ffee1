"""A span-by-span pass over the whole log's changes (a first projection, the audit's store check): one
`ChangeScan` against `changes_between` per span, in one run on one state.

A first projection (`partbuild db upgrade`, or `serve`/`up` finding the store behind) and `replay --verify`'s
store check list the changes of every span of `--span` seqs from seq 0 to the head. `changes_between` reads
every record created by a span's end for each span: quadratic in the log. A scan reads each record once.
The W1-shaped history is folded straight from the simulator (no database); both ways list the same changes
(checked), and the scan's time is its own (what the projector does under the read lock per span).

    .venv/bin/python bench/change_scan.py [--instances 1000000] [--span 20000]

Target: the scan grows linearly with the log (its seconds per million instances about the same at 1M and
3M), where the per-span way grows with the log's square.
"""

from __future__ import annotations

import argparse
import gc
import time

from _common import WEEKS_PER_SITE, machine

from partbuild.examples.clicks.simulate import SimulationPlan, simulate
from partbuild.state.fold.build_state import BuildState
from partbuild.state.queries.changes import ChangeScan, changes_between

INSTANCES_PER_WEEK = 15  # 7 raw, 7 daily, 1 weekly (taints add a few more)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--instances", type=int, default=1_000_000)
    parser.add_argument("--span", type=int, default=20_000)
    args = parser.parse_args()

    sites = -(-args.instances // (WEEKS_PER_SITE * INSTANCES_PER_WEEK))
    started = time.perf_counter()
    state = BuildState()
    gc.disable()  # millions of cycle-free records: the collector would rescan them for nothing
    for seq, event in enumerate(simulate(SimulationPlan(weeks=WEEKS_PER_SITE, sites=sites)), 1):
        state.apply(seq, event)
    head, span = state.head_seq, args.span
    print(f"machine: {machine()}")
    print(
        f"state: {len(state.instances):,} instances, {len(state.wants):,} wants, {len(state.job_runs):,} job runs "
        f"from {head:,} events (folded in {time.perf_counter() - started:.1f} s); {-(-head // span)} spans of {span:,}"
    )

    started = time.perf_counter()
    scan = ChangeScan(state, head, span)
    scanned = [len(scan.changes(state, first, min(head, first + span))) for first in range(0, head, span)]
    scan_s = time.perf_counter() - started

    started = time.perf_counter()
    per_span = [len(changes_between(state, first, min(head, first + span))) for first in range(0, head, span)]
    per_span_s = time.perf_counter() - started

    assert scanned == per_span, "the scan and changes_between per span listed different changes"
    millions = len(state.instances) / 1e6
    print(f"changes listed: {sum(scanned):,} (the same both ways)")
    print(f"  ChangeScan, one pass:        {scan_s:7.1f} s ({scan_s / millions:.1f} s per million instances)")
    print(f"  changes_between per span:    {per_span_s:7.1f} s ({per_span_s / millions:.1f} s per million instances)")
    print(f"  ratio (per span / scan):     {per_span_s / scan_s:7.2f}x")
    print("target: the scan's seconds per million instances flat from 1M to 3M (linear); the per-span way's grow")


if __name__ == "__main__":
    main()
