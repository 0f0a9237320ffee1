"""W1 through partbuild versus the same Spark work as a plain PySpark loop, in one run.

Target: partbuild / plain <= 1.15 at D=28 (ARCHITECTURE.md's reference: Dagster
1.67x with one run per partition, 1.13x as a single-run backfill).

One SparkSession serves both sides, so neither pays start-up. A warm-up build
runs first (a cold JVM makes the first build ~2.5x slower), then the two sides
alternate for `--repeat` rounds; medians are compared. partbuild's time runs
from the moment the weekly wants are in the log (a fresh SQLite log each
round) until the orchestrator is idle with every want Successful; the dailies
arrive as derivative wants, as in production.

    .venv/bin/python bench/w1_vs_plain.py [--days 28] [--rows 20000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

from _common import machine

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repo root, for `examples`

from examples.clicks.generate import generate_raw
from examples.clicks.pipeline import build_graph, weekly_ref, weeks_in_range
from examples.clicks.plain import run_plain
from partbuild.orchestrator.graph import Graph
from partbuild.orchestrator.loop import Orchestrator
from partbuild.orchestrator.spark import spark_session
from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.database import Database
from partbuild.state.fold.records import WantState
from partbuild.state.log.events import envelope, manual

TARGET_RATIO = 1.15


def run_partbuild(
    spark: object, data_root: Path, out: Path, days: int, graph: Graph | None = None
) -> tuple[float, int]:
    """Build W1 from weekly wants in a fresh log (W1's graph without checks, or `graph`); (seconds, job runs)."""
    with Database.open(f"sqlite:///{out / 'partbuild.db'}") as db:
        log = db.log
        log.append(
            [
                envelope(pb.WantCreate(want_id=f"weekly-{week}", partition_refs=[weekly_ref(week)]), source=manual("b"))
                for week in weeks_in_range(days)
            ]
        )
        started = time.perf_counter()
        graph = graph or build_graph(data_root, days=days, checks=False)
        orchestrator = Orchestrator(db, graph, warehouse=str(out / "warehouse"), spark=spark)
        try:
            idle = orchestrator.run_until_idle(timeout_s=900)
        finally:
            orchestrator.close()
        seconds = time.perf_counter() - started
        state = orchestrator.state
        assert idle and state.want_counts[WantState.SUCCESSFUL] == len(state.wants), state.counts()
        assert not state.rejections, state.rejections[:3]
        return seconds, len(state.job_runs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--days", type=int, default=28)
    parser.add_argument("--rows", type=int, default=20_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()

    started = time.perf_counter()
    spark = spark_session()
    spark.sparkContext.setLogLevel("ERROR")
    print(f"spark start-up {time.perf_counter() - started:.1f} s ({spark.sparkContext.master})")
    plain_s: list[float] = []
    partbuild_s: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "data"
        generate_raw(spark, root, days=args.days, rows_per_day=args.rows)
        run_plain(spark, root, Path(tmp) / "warm-up", days=args.days)
        for round_ in range(args.repeat):
            sides = ["plain", "partbuild"] if round_ % 2 == 0 else ["partbuild", "plain"]
            for side in sides:
                out = Path(tmp) / f"{side}-{round_}"
                out.mkdir()
                if side == "plain":
                    t0 = time.perf_counter()
                    run_plain(spark, root, out, days=args.days)
                    plain_s.append(time.perf_counter() - t0)
                else:
                    seconds, runs = run_partbuild(spark, root, out, args.days)
                    partbuild_s.append(seconds)
            print(
                f"  round {round_ + 1}: plain {plain_s[-1]:.2f} s, partbuild {partbuild_s[-1]:.2f} s ({runs} job runs)"
            )
    spark.stop()

    plain, built = statistics.median(plain_s), statistics.median(partbuild_s)
    ratio = built / plain
    print(f"machine: {machine()}")
    print(
        f"W1 D={args.days} R={args.rows}: plain loop {plain:.2f} s, partbuild {built:.2f} s (medians of {args.repeat})"
    )
    verdict = "PASS" if ratio <= TARGET_RATIO else "MISS"
    print(f"w1: partbuild / plain = {ratio:.2f} (target <= {TARGET_RATIO}): {verdict}")


if __name__ == "__main__":
    main()
