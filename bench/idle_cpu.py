"""CPU an idle `partbuild run` process takes on SQLite: a want waiting for source data that never comes.

Target: an idle orchestrator uses at most 1% of a core (on two cores, what it takes is taken from the
Spark jobs of the runs in flight). Against `--before CHECKOUT` (its own .venv), measured in the same run,
alternating: the new one must use no more than the before one.

Each side is a real `partbuild run` (no `--until-idle`) on its own SQLite log holding one want for a
daily partition whose raw day is never there (so the loop steps, looks for the source every 2 s, and
waits). After `--settle` seconds of start-up, the process's user + system CPU time (/proc/<pid>/stat)
is read over `--seconds`; then SIGTERM.

    .venv/bin/python bench/idle_cpu.py [--before /work/wt/before] [--rounds 2] [--seconds 20]
"""

from __future__ import annotations

import argparse
import signal
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from _common import machine, process_cpu_seconds

REPO = Path(__file__).resolve().parents[1]
TARGET_CORE_SHARE = 0.01
GRAPH = """
from partbuild.orchestrator.graph import Graph, Job, SourceDataset

graph = Graph(
    [Job("daily", ["daily/date={date:date}"], lambda ctx: None, inputs=lambda p: [f"raw/date={p['date']}"])],
    [SourceDataset("raw", "raw/date={date:date}", locate=lambda partition: None)],
)
"""


def idle_share(exe: Path, work: Path, settle_s: float, seconds: float) -> float:
    """The share of one core an idle `run` process of `exe` uses over `seconds`."""
    graph, db = work / "graph.py", f"sqlite:///{work / 'idle.db'}"
    graph.write_text(GRAPH)
    want = [exe, "want", "--db", db, "--graph", graph, "daily/date=2026-01-01"]
    subprocess.run(want, check=True, capture_output=True)
    command = [exe, "run", "--db", db, "--graph", graph, "--warehouse", work / "warehouse"]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(settle_s)
        before = process_cpu_seconds(process.pid)
        time.sleep(seconds)
        return (process_cpu_seconds(process.pid) - before) / seconds
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=60)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before", type=Path, help="Another checkout (with its .venv) to measure in the same run.")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--settle", type=float, default=8.0)
    args = parser.parse_args()
    sides = {"this checkout": REPO / ".venv" / "bin" / "partbuild"}
    if args.before is not None:
        sides["before"] = args.before / ".venv" / "bin" / "partbuild"
    shares: dict[str, list[float]] = {side: [] for side in sides}
    print(f"machine: {machine()}")
    with tempfile.TemporaryDirectory(prefix="idle-cpu-") as tmp:
        for round_ in range(args.rounds):
            for side, exe in sides.items():
                work = Path(tmp) / f"{side.replace(' ', '-')}-{round_}"
                work.mkdir()
                shares[side].append(idle_share(exe, work, args.settle, args.seconds))
                print(f"  round {round_ + 1}, {side}: {shares[side][-1]:.2%} of a core", flush=True)
    mine = statistics.median(shares["this checkout"])
    verdict = "PASS" if mine <= TARGET_CORE_SHARE else "MISS"
    print(f"idle run process: {mine:.2%} of a core (median; target <= {TARGET_CORE_SHARE:.0%}): {verdict}")
    if "before" in shares:
        before = statistics.median(shares["before"])
        ratio = mine / before if before else float("inf")
        print(f"  before: {before:.2%} of a core; this / before = {ratio:.3f} (target <= 1.0)")


if __name__ == "__main__":
    main()
