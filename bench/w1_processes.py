"""W1 as whole processes: partbuild's `want` + `run --until-idle` against the two-thread floor, in one run.

Target (issue 26, item 4): partbuild's want + run at most 1.05x the floor. The floor is
`bench/w1_floor.py`: one process, one SparkSession with partbuild's local settings, the same Spark
work (the dailies, then the weeklies) two Spark jobs at a time, as partbuild runs two job runs at once.
Both sides are whole processes from a cold start: interpreter, imports, JVM, the work, the exit.

The 28-day raw data is generated once; then `--rounds` rounds, each running every side once in a
rotating order so all see the same load: the floor process; partbuild's `want` process (the weekly
refs, as `make run`) then its `run --until-idle` process, on a fresh SQLite log and warehouse. The
graph is examples/clicks/pipeline.py's W1 without the quality checks (the floor checks nothing).
`--before DIR` adds a side: the same two processes with the partbuild of another checkout (its own
.venv), e.g. main's, each loading W1 from its own package. The weeklies of every side are compared (rows and
a digest of the sorted url, count pairs): a side that built something else stops the benchmark.

Every checkout's sources are compiled to bytecode before the rounds (as pip does for an installed package), and
the processes may write and read bytecode whatever the environment says: none pays for compiling at each start.

partbuild's breakdown comes from its log's event times: the `want` process; the `run` process from
its start to its first job run buffered (start-up, fold, first decision); from there to its last job
run's success (Spark start-up and the work); from there to the process's exit (close, shutdown).

    .venv/bin/python bench/w1_processes.py [--rounds 3] [--days 28] [--rows 20000] [--before /work/main]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from _common import machine

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # the repo root, for `examples`

from examples.clicks.pipeline import weekly_ref, weeks_in_range  # noqa: E402

TARGET_RATIO = 1.05
# The W1 graph without checks, from the `partbuild` package of whichever checkout loads it (a `--before`
# checkout may predate PARTBUILD_CLICKS_CHECKS, or a Job field this one's pipeline.py sets).
GRAPH_TEXT = """import os
from partbuild.examples.clicks.pipeline import build_graph
def graph():
    return build_graph(os.environ["PARTBUILD_CLICKS_ROOT"], int(os.environ["PARTBUILD_CLICKS_DAYS"]), checks=False)
"""


@dataclass
class Timings:
    """One side's wall seconds per round, and partbuild's phases (name -> seconds per round)."""

    total: list[float] = field(default_factory=list)
    phases: dict[str, list[float]] = field(default_factory=dict)

    def add(self, total: float, phases: dict[str, float]) -> None:
        self.total.append(total)
        for name, seconds in phases.items():
            self.phases.setdefault(name, []).append(seconds)


def run_process(command: list[str], env: dict[str, str], log: Path) -> float:
    """Wall seconds of one whole process, its output in `log`; it must succeed."""
    started = time.perf_counter()
    with log.open("w") as out:
        done = subprocess.run(command, env=env, stdout=out, stderr=subprocess.STDOUT, timeout=1800)
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} exited {done.returncode}: see {log}\n{log.read_text()[-2000:]}")
    return elapsed


def run_floor(data: Path, work: Path, days: int, env: dict[str, str]) -> tuple[float, dict[str, float], Path]:
    """The floor process; (seconds, its phases, the weeklies' root)."""
    out = work / "out"
    command = [sys.executable, str(REPO / "bench" / "w1_floor.py"), "--data", str(data), "--out", str(out)]
    seconds = run_process([*command, "--days", str(days)], env, work / "floor.log")
    printed = (work / "floor.log").read_text().strip().splitlines()[-1]
    phases = json.loads(printed)
    return seconds, {"session": phases["session_s"], "work": phases["work_s"]}, out / "agg" / "weekly_clicks"


def run_partbuild(exe: Path, days: int, work: Path, env: dict[str, str]) -> tuple[float, dict[str, float], Path]:
    """`want` then `run --until-idle` on a fresh log and warehouse; (seconds, phases, the weeklies' root)."""
    db = f"sqlite:///{work / 'partbuild.db'}"
    graph = work / "w1_graph.py"
    graph.write_text(GRAPH_TEXT)
    refs = [weekly_ref(week) for week in weeks_in_range(days)]
    want_s = run_process([str(exe), "want", "--db", db, "--graph", str(graph), *refs], env, work / "want.log")
    run_started_ms = time.time() * 1000
    command = [str(exe), "run", "--db", db, "--graph", str(graph), "--warehouse", str(work / "warehouse")]
    run_s = run_process([*command, "--until-idle"], env, work / "run.log")
    run_ended_ms = run_started_ms + run_s * 1000
    with sqlite3.connect(work / "partbuild.db") as conn:
        times = conn.execute("SELECT event_type, recorded_at_ms FROM events ORDER BY seq").fetchall()
    first_buffer = min(ms for kind, ms in times if kind == "job_run_buffer")
    last_success = max(ms for kind, ms in times if kind == "job_run_success")
    phases = {
        "want process": want_s,
        "run: start to first run buffered": (first_buffer - run_started_ms) / 1000,
        "run: first run buffered to last run done": (last_success - first_buffer) / 1000,
        "run: last run done to exit": (run_ended_ms - last_success) / 1000,
    }
    return want_s + run_s, phases, work / "warehouse" / "agg" / "weekly_clicks"


def weeklies_digest(root: Path) -> str:
    """Rows and a digest of every weekly's sorted (url, count) pairs, whatever the directory layout."""
    import pyarrow.parquet as pq

    digest = hashlib.sha256()
    rows = 0
    for week in sorted(root.iterdir()):
        # partbuild writes each instance under `_instance=<uuid>` (which readers skip as hidden): read it there.
        instances = sorted(week.glob("_instance=*")) or [week]
        table = pq.read_table(instances[-1], columns=["url", "count"])
        pairs = sorted(zip(table.column("url").to_pylist(), table.column("count").to_pylist(), strict=True))
        rows += len(pairs)
        digest.update(f"{week.name}:{pairs}".encode())
    return f"{rows} rows, sha256 {digest.hexdigest()[:16]}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--days", type=int, default=28)
    parser.add_argument("--rows", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--before", type=Path, help="Another checkout (with its .venv) to time as a side too.")
    parser.add_argument("--partbuild", type=Path, default=REPO / ".venv" / "bin" / "partbuild")
    args = parser.parse_args()
    sides = {"floor": None, "partbuild": args.partbuild}
    if args.before is not None:
        sides["before"] = args.before / ".venv" / "bin" / "partbuild"
    timings = {side: Timings() for side in sides}
    reference: str | None = None  # the weeklies' digest of the first side that ran
    print(f"machine: {machine()}", flush=True)
    with tempfile.TemporaryDirectory(prefix="w1-processes-") as tmp:
        data = Path(tmp) / "data"
        env = {**os.environ, "PARTBUILD_CLICKS_ROOT": str(data), "PARTBUILD_CLICKS_DAYS": str(args.days)}
        # Bytecode as an installed package has it (pip compiles at install): written once, here, before the rounds,
        # so no side pays for compiling its sources (an environment with PYTHONDONTWRITEBYTECODE recompiles each run).
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        for checkout in {REPO, *([args.before] if args.before is not None else [])}:
            python = checkout / ".venv" / "bin" / "python"
            packages = [str(checkout / name) for name in ("api", "orchestrator", "state", "examples", "bench")]
            run_process([str(python), "-m", "compileall", "-q", *packages], env, Path(tmp) / "compile.log")
        generate = [sys.executable, "-m", "examples.clicks.generate", "--root", str(data), "--days", str(args.days)]
        run_process([*generate, "--rows", str(args.rows)], {**env, "PYTHONPATH": str(REPO)}, Path(tmp) / "gen.log")
        names = list(sides)
        for round_ in range(args.rounds):
            order = names[round_ % len(names) :] + names[: round_ % len(names)]
            line = []
            for side in order:
                work = Path(tmp) / f"{side}-{round_}"
                work.mkdir()
                load = os.getloadavg()[0]
                exe = sides[side]
                if exe is None:
                    seconds, phases, weeklies = run_floor(data, work, args.days, env)
                else:
                    seconds, phases, weeklies = run_partbuild(exe, args.days, work, env)
                timings[side].add(seconds, phases)
                digest = weeklies_digest(weeklies)
                reference = reference or digest
                if digest != reference:
                    raise SystemExit(f"{side} built other weeklies: {digest}, not {reference}")
                line.append(f"{side} {seconds:.2f} s (load {load:.1f})")
            print(f"  round {round_ + 1}: " + ", ".join(line), flush=True)
    report(timings, args, reference or "")


def report(timings: dict[str, Timings], args: argparse.Namespace, digest: str) -> None:
    """Medians, partbuild's phases, the ratio to the floor and the verdict."""
    print(f"W1 D={args.days} R={args.rows}, medians of {args.rounds} rounds; weeklies of every side: {digest}")
    floor = statistics.median(timings["floor"].total)
    for side, timing in timings.items():
        median = statistics.median(timing.total)
        print(f"  {side}: {median:.2f} s ({median / floor:.3f}x the floor)")
        for name, values in timing.phases.items():
            print(f"    {name}: {statistics.median(values):.2f} s")
    ratio = statistics.median(timings["partbuild"].total) / floor
    verdict = "PASS" if ratio <= TARGET_RATIO else "MISS"
    print(f"w1 processes: partbuild want + run / floor = {ratio:.3f} (target <= {TARGET_RATIO}): {verdict}")
    print(f"load average after: {', '.join(f'{x:.1f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
