"""What quality checks cost a build (issue 34 item 4): the gate's one shared pass against the build alone.

Targets: the gate's cost <= 15 % of the same build without checks; checks that do nothing <= 2 %.

W1's daily work on `--days` days of generated raw clicks (examples/clicks/generate.py), built in
batches of `--batch` days as the daily job builds them (per day what `run_daily` does: its write,
through the side's `WriteObserver` as `ctx.write` does, so what Spark can observe of the checks is
computed in the write), each batch followed by the gate on its outputs (`run_gate`, what the
executor runs before the outcome). One SparkSession, partbuild's local settings. A warm-up build runs first (a cold JVM
is slow, and its outputs are each daily's "previous instance"); then every round runs each side
once, the order rotating, and medians are compared. The sides:

- `build`: the dailies, no checks;
- `w1 checks`: + W1's own daily check (`daily_not_empty`), observed in the write: no pass;
- `6 checks, one pass`: + six ready-made checks per daily (not empty, no nulls in url, no nulls in
  count, url unique, rows within a ratio of the raw day's, within a ratio of the previous instance's):
  the write observes what it can, one pass computes the rest (url unique, the raw and previous rows);
- `6 checks, per check`: the same six, each computed alone on each output (`Check.fn`: a Spark job or
  more per check per output, how every check ran before the shared pass; `--skip-per-check` to leave out);
- `6 no-op checks`: six plain `Check`s returning passed at once.

A side's gate cost is its gate time over its own build time in the same round (timed minutes apart,
two sides see different loads on a shared machine; the ratio to the `build` side is printed too).
The warm-up asserts the one-pass answers equal to the per-check ones.

    .venv/bin/python bench/checks_gate.py [--days 14] [--rows 20000] [--batch 7] [--rounds 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from datetime import date
from pathlib import Path
from typing import Any

from _common import machine

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repo root, for `examples`

from examples.clicks.generate import generate_raw
from examples.clicks.pipeline import DAILY_CHECKS, daily_counts, daily_ref, days_in_range, raw_ref, write_daily
from partbuild.orchestrator.checks import (
    Check,
    CheckContext,
    CheckOutcome,
    CheckTarget,
    GateVerdict,
    no_nulls,
    row_count_at_least,
    row_count_within_ratio_of_inputs,
    row_count_within_ratio_of_previous,
    run_gate,
    unique,
)
from partbuild.orchestrator.observed_writes import Observed, WriteObserver
from partbuild.orchestrator.spark import spark_session

GATE_TARGET = 0.15
NOOP_TARGET = 0.02
HEAVY = (
    row_count_at_least(1),
    no_nulls("url"),
    no_nulls("count"),
    unique("url"),
    row_count_within_ratio_of_inputs(0.0, 1.0),
    row_count_within_ratio_of_previous(0.5, 2.0),
)
NOOP = tuple(Check(f"noop_{n}", lambda context: CheckOutcome(True)) for n in range(6))


def per_check(checks: Sequence[Check], targets: Sequence[CheckTarget], spark: Any) -> list[list[CheckOutcome]]:
    """Every check alone on every output, in turn: the way checks ran before the shared pass."""
    found = []
    for target in targets:
        context = CheckContext(
            target.ref,
            target.instance_uuid,
            target.location,
            "daily_clicks",
            target.input_locations,
            lambda: spark,
            target.previous_location,
        )
        found.append([check.fn(context) for check in checks])
    return found


def same_answers(verdict: GateVerdict, alone: list[list[CheckOutcome]]) -> bool:
    """The gate's results say what each check said alone (metrics as the event keeps them: floats)."""
    for recorded, outcomes in zip(verdict.results, alone, strict=True):
        for result, outcome in zip(recorded.results, outcomes, strict=True):
            metrics = {key: float(value) for key, value in outcome.metadata.items()}
            if (result.passed, result.description, dict(result.metrics)) != (
                outcome.passed,
                outcome.description,
                metrics,
            ):
                return False
    return True


class Side:
    """One way of building the dailies: its checks (or none) and how they are run."""

    def __init__(self, name: str, checks: Sequence[Check], target: float | None, *, alone: bool = False) -> None:
        self.name = name
        self.checks = tuple(checks)
        self.target = target  # the most its gate may cost, as a fraction of the build
        self.alone = alone
        self.observer = WriteObserver(self.checks)  # what `ctx.write` attaches to each daily it writes
        self.builds: list[float] = []  # each round's seconds building the dailies (this side's own)
        self.gates: list[float] = []  # and checking them
        self.jobs: list[int] = []

    def run(self, spark: Any, env: Env, out: Path) -> None:
        """Build every batch, then check it; records the side's build and gate seconds and its Spark jobs."""
        group = f"checks-gate-{self.name}-{len(self.builds)}"
        spark.sparkContext.setJobGroup(group, self.name)
        built = gated = 0.0
        for batch in env.batches:
            started = time.perf_counter()
            targets = []
            for day in batch:
                location = str(out / daily_ref(day))
                observed = observed_write(spark, self.observer, env.raw[day], location)
                inputs = {raw_ref(day): env.raw[day]}
                uuid = f"{self.name}-{day}"
                targets.append(CheckTarget(daily_ref(day), uuid, location, inputs, env.previous[day], {}, observed))
            built += time.perf_counter() - started
            started = time.perf_counter()
            self._gate(spark, targets)
            gated += time.perf_counter() - started
        spark.sparkContext.setJobGroup("", "")
        self.builds.append(built)
        self.gates.append(gated)
        self.jobs.append(len(spark.sparkContext.statusTracker().getJobIdsForGroup(group)))

    def _gate(self, spark: Any, targets: list[CheckTarget]) -> None:
        if not self.checks:
            return
        if self.alone:
            per_check(self.checks, targets, spark)
            return
        verdict = run_gate(self.checks, targets, "daily_clicks", lambda: spark)
        assert all(not r.errored for c in verdict.results for r in c.results), verdict.results


def observed_write(spark: Any, observer: WriteObserver, raw: str, location: str) -> Observed | None:
    """`write_daily` as the daily job does it (`ctx.write`): the checks Spark can observe computed as it writes."""
    frame, watch = observer.observe(daily_counts(spark.read.parquet(raw)))
    frame.write.mode("overwrite").parquet(location)
    return watch.observed()


class Env:
    """The raw days, the batches the daily job builds, and each day's previous instance (the warm-up's)."""

    def __init__(self, root: Path, days: list[date], batch: int) -> None:
        self.raw = {day: str(root / raw_ref(day)) for day in days}
        self.batches = [days[i : i + batch] for i in range(0, len(days), batch)]
        self.previous: dict[date, str | None] = dict.fromkeys(days)


def warm_up(spark: Any, env: Env, out: Path) -> None:
    """A build whose outputs become each day's previous instance; also checks the one pass against per-check."""
    for batch in env.batches:
        targets = []
        for day in batch:
            location = str(out / daily_ref(day))
            write_daily(spark, env.raw[day], location)
            targets.append(CheckTarget(daily_ref(day), f"warm-{day}", location, {raw_ref(day): env.raw[day]}))
        verdict = run_gate(HEAVY, targets, "daily_clicks", lambda: spark)
        assert same_answers(verdict, per_check(HEAVY, targets, spark)), "one pass and per-check answers differ"
        for target, day in zip(targets, batch, strict=True):
            env.previous[day] = target.location


def report(sides: list[Side], args: argparse.Namespace) -> None:
    """Medians over the rounds; a gate's cost is measured against its own side's build in the same round."""
    print(f"machine: {machine()}")
    print(f"W1 dailies D={args.days} R={args.rows}, batches of {args.batch}, medians of {args.rounds} rounds:")
    print("  side                    build       gate   gate/build  gate/build side  Spark jobs")
    plain = sides[0].builds
    verdicts = []
    for side in sides:
        # Against its own build, timed in the same minute: the shared machine's drift between sides cancels.
        own = statistics.median(gate / built for gate, built in zip(side.gates, side.builds, strict=True))
        other = statistics.median(gate / built for gate, built in zip(side.gates, plain, strict=True))
        print(
            f"  {side.name:<22} {statistics.median(side.builds):6.2f} s {statistics.median(side.gates):7.3f} s"
            f" {100 * own:9.1f} % {100 * other:14.1f} %  {statistics.median(side.jobs):8.0f}"
        )
        if side.target is not None:
            verdicts.append((side.name, own, side.target))
    for name, cost, target in verdicts:
        verdict = "PASS" if cost <= target else "MISS"
        print(f"checks_gate: {name}: gate / build = {cost:.3f} (target <= {target}): {verdict}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--days", type=int, default=14)
    parser.add_argument("--rows", type=int, default=20_000, help="raw rows per day")
    parser.add_argument("--batch", type=int, default=7, help="dailies per job run (W1's daily_batch)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--shuffle-partitions", default="4", help="spark.sql.shuffle.partitions (partbuild's local 4)")
    parser.add_argument("--skip-per-check", action="store_true", help="leave out the per-check side (the slowest)")
    args = parser.parse_args()

    started = time.perf_counter()
    spark = spark_session(conf={"spark.sql.shuffle.partitions": args.shuffle_partitions})
    spark.sparkContext.setLogLevel("ERROR")
    print(f"spark start-up {time.perf_counter() - started:.1f} s ({spark.sparkContext.master})", flush=True)
    sides = [
        Side("build", (), None),
        Side("w1 checks", DAILY_CHECKS, GATE_TARGET),
        Side("6 checks, one pass", HEAVY, GATE_TARGET),
        Side("6 no-op checks", NOOP, NOOP_TARGET),
    ]
    if not args.skip_per_check:
        sides.append(Side("6 checks, per check", HEAVY, None, alone=True))
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "data"
        env = Env(root, days_in_range(args.days), args.batch)
        generate_raw(spark, root, days=args.days, rows_per_day=args.rows)
        warm_up(spark, env, Path(tmp) / "warm-up")
        for round_ in range(args.rounds):
            shift = round_ % len(sides)
            for side in sides[shift:] + sides[:shift]:
                side.run(spark, env, Path(tmp) / f"{round_}-{side.name}")
            figures = ", ".join(f"{side.name} {side.builds[-1]:.2f} + {side.gates[-1]:.3f} s" for side in sides)
            print(f"  round {round_ + 1}: {figures}", flush=True)
    spark.stop()
    report(sides, args)


if __name__ == "__main__":
    main()
