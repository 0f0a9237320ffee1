"""Peak memory of a BuildState holding 1,000,000 partition instances.

Target: <= 1 GiB. The W1-shaped history is folded straight from the simulator
(no database), and resident memory is read from /proc before and after.

    .venv/bin/python bench/state_memory.py [--instances 1000000]
"""

from __future__ import annotations

import argparse
import gc

from _common import WEEKS_PER_SITE, machine, rss_bytes

from partbuild.examples.clicks.simulate import SimulationPlan, simulate
from partbuild.state.fold.build_state import BuildState

TARGET_BYTES = 1 << 30
INSTANCES_PER_WEEK = 15  # 7 raw, 7 daily, 1 weekly (taints add a few more)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--instances", type=int, default=1_000_000)
    args = parser.parse_args()

    sites = -(-args.instances // (WEEKS_PER_SITE * INSTANCES_PER_WEEK))
    gc.collect()
    baseline, _ = rss_bytes()
    state = BuildState()
    for seq, event in enumerate(simulate(SimulationPlan(weeks=WEEKS_PER_SITE, sites=sites)), 1):
        state.apply(seq, event)
    gc.collect()
    held, peak = rss_bytes()
    used = held - baseline
    n = len(state.instances)
    print(f"machine: {machine()}")
    print(
        f"state: {n:,} partition instances, {len(state.wants):,} wants, {len(state.job_runs):,} job runs "
        f"from {state.head_seq:,} events"
    )
    print(
        f"  resident memory held by the state: {used / 2**20:,.0f} MiB ({used / n:,.0f} bytes per instance, "
        f"with its wants, job runs and indexes); process peak {peak / 2**20:,.0f} MiB"
    )
    verdict = "PASS" if used <= TARGET_BYTES else "MISS"
    print(f"memory: {n:,} instances in {used / 2**20:,.0f} MiB (target <= 1024 MiB): {verdict}")


if __name__ == "__main__":
    main()
