"""`partbuild replay --bounded` (the audit in bounded memory) and `replay --bounded --verify` on a W1 log, this
code against another's in the same run: wall time, events per second, the peak resident memory of the command
and the processes it starts.

Builds (or reuses, `--db FILE`) the SQLite W1 log of `--instances`; `--verify` first projects its state store
(`partbuild db upgrade`, once) and runs the verifying modes too (alone with `--no-audit`). Each side runs
each mode in a process of its own (the CLI run by `python -c` with the side's PYTHONPATH), alternating sides,
`--rounds` times. `--other NAME=PYTHONPATH` (e.g. `main=/tmp/main/typecheck`, a clone of main with
`typecheck/` as this repo's) adds a side. `--replay-verify` adds `replay --verify` (the whole state in
memory) for this code, once.

    .venv/bin/python bench/bounded_replay.py [--db FILE] [--instances 1000000] [--verify] [--other main=PATH]

Targets (the issue's, at 10M instances): `replay --verify` >= 150,000 events/s in <= 2 GiB.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from _common import machine, proc_stats, w1_log

GIB = 1 << 30
TARGET_EVENTS_PER_S = 150_000
TARGET_PEAK = 2 * GIB
CLI = "import sys; from partbuild.api.cli import main; main(sys.argv[1:])"
MODES = {"bounded": ["--bounded"], "bounded verify": ["--bounded", "--verify"], "verify": ["--verify"]}


def tree_rss(root: int) -> int:
    """The resident bytes of `root` and its descendants, from /proc."""
    children: dict[int, list[int]] = {}
    for pid, _, fields in proc_stats():
        children.setdefault(int(fields[1]), []).append(pid)
    total, todo = 0, [root]
    while todo:
        pid = todo.pop()
        todo += children.get(pid, [])
        try:
            with open(f"/proc/{pid}/status") as status:
                total += next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmRSS:"))
        except (OSError, StopIteration):
            continue  # gone meanwhile
    return total


def run(url: str, path: str, flags: list[str], scratch: str) -> tuple[float, int, dict[str, object]]:
    """(wall seconds, peak resident bytes of the command's processes, its JSON report)."""
    command = [sys.executable, "-c", CLI, "replay", "--db", url, "--json", *flags]
    if "--bounded" in flags:
        command += ["--scratch-dir", scratch]
    env = os.environ | {"PYTHONPATH": path}
    started = time.perf_counter()
    child = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    peak = 0
    done = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not done.wait(0.2):
            peak = max(peak, tree_rss(child.pid))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    out, err = child.communicate()
    wall = time.perf_counter() - started
    done.set()
    sampler.join()
    if child.returncode not in (0, 1):
        raise SystemExit(f"{' '.join(command)} exited {child.returncode}: {err.strip()[-2000:]}")
    return wall, peak, json.loads(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--db", help="a SQLite file (built when empty; default: a temporary file)")
    parser.add_argument("--instances", type=int, default=1_000_000)
    parser.add_argument("--verify", action="store_true", help="project the store and run the verifying modes too")
    parser.add_argument("--replay-verify", action="store_true", help="`replay --verify` (whole state) once too")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--no-audit", action="store_true", help="with --verify: the verifying modes alone")
    parser.add_argument("--scratch-dir", default=None, help="where the bounded replays' scratch databases go")
    parser.add_argument("--other", action="append", default=[], help="NAME=PYTHONPATH of other code to compare")
    args = parser.parse_args()
    print(f"machine: {machine()}", flush=True)
    this = str(Path(__file__).resolve().parent.parent / "typecheck")
    sides = [("this", this), *(tuple(other.split("=", 1)) for other in args.other)]
    with tempfile.TemporaryDirectory() as tmp, w1_log(args.db, tmp, "bounded.db", args.instances) as (url, log):
        events = log.head()
        modes = [] if args.no_audit and args.verify else ["bounded"]
        if args.verify:
            started = time.perf_counter()
            subprocess.run([sys.executable, "-c", CLI, "db", "upgrade", "--db", url], check=True)
            print(f"store projected (db upgrade) in {time.perf_counter() - started:.0f} s", flush=True)
            modes.append("bounded verify")
        scratch = args.scratch_dir or tmp
        runs = [(name, path, mode) for mode in modes for _ in range(args.rounds) for name, path in sides]
        if args.replay_verify:
            runs.append(("this", this, "verify"))
        for name, path, mode in runs:
            wall, peak, report = run(url, path, MODES[mode], scratch)
            verdict = {True: "verified", False: "NOT verified", None: "-"}[report.get("verified")]  # type: ignore[index]
            pace = events / wall
            print(
                f"{name:>6} replay {' '.join(MODES[mode]):<20} {wall:7.1f} s  {pace:9,.0f} events/s  "
                f"peak {peak / GIB:5.2f} GiB  {verdict}  digest {str(report['digest'])[:12]}  "
                f"(target >= {TARGET_EVENTS_PER_S:,} events/s, <= {TARGET_PEAK / GIB:.0f} GiB: "
                f"{'PASS' if pace >= TARGET_EVENTS_PER_S and peak <= TARGET_PEAK else 'MISS'})",
                flush=True,
            )


if __name__ == "__main__":
    main()
