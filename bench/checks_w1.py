"""What quality checks cost W1 as users run it (issue 34 item 4): the whole build, through the orchestrator.

Targets: the build with its checks <= 1.15x the same build without checks, for W1's own checks (a daily is
not empty; a weekly's total is the sum of its dailies') and for a checks-heavy workload (W1's checks and six
ready-made checks more per daily, `checks_gate.HEAVY`); checks that do nothing (six no-op `Check`s per
daily) <= 1.02x.

Each side builds W1 from its weekly wants in a fresh SQLite log, as `w1_vs_plain.py` does: the dailies come
as derivative wants, run in batches of 7, two runs at a time (W1's `max_concurrency`), each run's gate
right after its job work, so one run's checks overlap the other's build. One SparkSession serves every
side; a warm-up build runs first; the sides rotate in each round and medians are compared. `checks_gate.py`
times the gate alone, one batch after another, with nothing to overlap: its figures stand beside these.

    .venv/bin/python bench/checks_w1.py [--days 28] [--rows 20000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

from _common import machine
from checks_gate import HEAVY, NOOP
from w1_vs_plain import run_partbuild

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repo root, for `examples`

from examples.clicks.generate import generate_raw
from examples.clicks.pipeline import DAILY_CHECKS, WEEKLY_CHECKS, build_graph
from partbuild.orchestrator.graph import Graph
from partbuild.orchestrator.spark import spark_session

CHECKED_TARGET = 1.15
NOOP_TARGET = 1.02
SIDES = ("no checks", "W1's checks", "6 checks per daily", "6 no-op checks")


def side_graph(side: str, root: Path, days: int) -> Graph:
    """W1's graph with the side's checks."""
    if side in ("no checks", "W1's checks"):
        return build_graph(root, days=days, checks=side == "W1's checks")
    graph = build_graph(root, days=days, checks=False)
    daily, weekly = graph.jobs["daily_clicks"], graph.jobs["weekly_clicks"]
    checks = [*DAILY_CHECKS, *HEAVY] if side == "6 checks per daily" else NOOP
    jobs = [replace(daily, checks=list(checks)), replace(weekly, checks=list(WEEKLY_CHECKS))]
    if side == "6 no-op checks":
        jobs[1] = weekly  # nothing but the no-ops
    return Graph(jobs=jobs, sources=list(graph.sources.values()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--days", type=int, default=28)
    parser.add_argument("--rows", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    spark = spark_session()
    spark.sparkContext.setLogLevel("ERROR")
    seconds: dict[str, list[float]] = {side: [] for side in SIDES}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "data"
        generate_raw(spark, root, days=args.days, rows_per_day=args.rows)
        warm = Path(tmp) / "warm-up"
        warm.mkdir()
        run_partbuild(spark, root, warm, args.days, side_graph("W1's checks", root, args.days))
        for round_ in range(args.rounds):
            order = SIDES[round_ % len(SIDES) :] + SIDES[: round_ % len(SIDES)]
            for side in order:
                out = Path(tmp) / f"{SIDES.index(side)}-{round_}"
                out.mkdir()
                seconds[side].append(run_partbuild(spark, root, out, args.days, side_graph(side, root, args.days))[0])
            print(f"  round {round_ + 1}: " + ", ".join(f"{side} {seconds[side][-1]:.2f} s" for side in SIDES))
    spark.stop()
    print(f"machine: {machine()}")
    base = statistics.median(seconds["no checks"])
    print(f"W1 D={args.days} R={args.rows}, no checks: {base:.2f} s (median of {args.rounds})")
    for side, target in (
        ("W1's checks", CHECKED_TARGET),
        ("6 checks per daily", CHECKED_TARGET),
        ("6 no-op checks", NOOP_TARGET),
    ):
        median = statistics.median(seconds[side])
        ratio = median / base
        verdict = "PASS" if ratio <= target else "MISS"
        print(f"{side}: {median:.2f} s, {ratio:.3f}x the build without checks (target <= {target}): {verdict}")


if __name__ == "__main__":
    main()
