"""Log growth of an idle `partbuild up` with two discovered sources: events appended while nothing changes.

Target: 0 events appended over the idle period (default 10 minutes), however
often the sources are scanned.

Each executable given (`--partbuild NAME=PATH`, default `after=.venv/bin/partbuild`)
is spawned as a real process:

    partbuild up --db sqlite:///<tmp>/log.db --graph examples/idle_sources.py --warehouse <tmp>/warehouse
                 --host 127.0.0.1 --port 0

with a graph of two source datasets (`a`, `b`), each discovered by scanning a
directory tree of `--days` day directories (a part file and `_SUCCESS` each) with
`rescan_every_s=--rescan` and no jobs (Spark is never started). The connector is
the filesystem connector, counting the passes it ends in a file next to its root,
so passes are seen from outside. Measured:

- after the first passes observed every partition (2 x `--days` PartitionObserved)
  and one more pass of each source ended, the log's head; then `--minutes` of
  nothing changing; then the head again: the events appended while idle (target 0),
  and the passes each source made meanwhile;
- the process's CPU time over the idle period (user + system, from /proc), for context.

Then SIGTERM. Executables run one after another, each with a fresh database and tree.
The child gets PYTHONDONTWRITEBYTECODE=1 (another checkout's executable writes nothing there).

    .venv/bin/python bench/idle_log_growth.py [--minutes 10] [--rescan 1] [--days 28]
                                              [--partbuild before=/path/to/bin/partbuild after=.venv/bin/partbuild]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import machine

REPO = Path(__file__).resolve().parent.parent
TARGET_EVENTS = 0
SOURCES = ("a", "b")


def passes(root: Path, name: str) -> int:
    path = root / f"{name}.passes"
    return len(path.read_text().splitlines()) if path.exists() else 0


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process, from /proc/PID/stat."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def head(db_file: Path) -> int:
    """The log's last seq, read with sqlite3: any partbuild version's log (whatever its migrations) reads alike."""
    with contextlib.closing(sqlite3.connect(f"file:{db_file}?mode=ro", uri=True)) as db:
        return db.execute("SELECT coalesce(max(seq), 0) FROM events").fetchone()[0]


def observed(db_file: Path) -> int:
    if not db_file.exists():
        return 0
    with contextlib.closing(sqlite3.connect(f"file:{db_file}?mode=ro", uri=True)) as db:
        try:
            return db.execute("SELECT count(*) FROM events WHERE event_type = 'partition_observed'").fetchone()[0]
        except sqlite3.OperationalError:  # not created yet
            return 0


def wait(condition: object, process: subprocess.Popen[bytes], what: str, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():  # type: ignore[operator]
        if process.poll() is not None:
            raise SystemExit(f"`up` exited ({process.returncode}) before {what}")
        if time.monotonic() > deadline:
            raise SystemExit(f"no {what} within {timeout_s} s")
        time.sleep(0.2)


def run(name: str, exe: str, args: argparse.Namespace) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="partbuild-idle-") as tmp:
        root = Path(tmp) / "sources"
        for source in SOURCES:
            for day in range(args.days):
                directory = root / source / f"date=2026-{1 + day // 28:02d}-{1 + day % 28:02d}"
                directory.mkdir(parents=True)
                (directory / "part-00000.parquet").write_bytes(b"x" * 1000)
                (directory / "_SUCCESS").write_bytes(b"")
        graph = REPO / "examples" / "idle_sources.py"
        db_file = Path(tmp) / "log.db"
        db = f"sqlite:///{db_file}"
        env = {key: value for key, value in os.environ.items() if not key.startswith("PARTBUILD_")}
        env |= {"IDLE_ROOT": str(root), "IDLE_RESCAN_S": str(args.rescan), "PYTHONDONTWRITEBYTECODE": "1"}
        command = [
            exe, "up", "--db", db, "--graph", str(graph), "--warehouse", f"{tmp}/warehouse",
            "--host", "127.0.0.1", "--port", "0",
        ]  # fmt: skip
        output = (Path(tmp) / "up.log").open("wb")
        process = subprocess.Popen(command, env=env, cwd=tmp, stdout=output, stderr=subprocess.STDOUT)
        try:
            wait(
                lambda: observed(db_file) == len(SOURCES) * args.days,
                process,
                "first passes",
            )
            first = {source: passes(root, source) for source in SOURCES}
            wait(lambda: all(passes(root, s) > first[s] for s in SOURCES), process, "second passes")
            start_head, start_passes, start_cpu = (
                head(db_file),
                {s: passes(root, s) for s in SOURCES},
                cpu_s(process.pid),
            )
            print(f"[{name}] idle from head {start_head} for {args.minutes} min ...", flush=True)
            deadline = time.monotonic() + args.minutes * 60
            while time.monotonic() < deadline:
                if process.poll() is not None:
                    raise SystemExit(f"`up` exited ({process.returncode}) while idle")
                time.sleep(1)
            end_head, end_cpu = head(db_file), cpu_s(process.pid)
            made = {s: passes(root, s) - start_passes[s] for s in SOURCES}
        finally:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(60)
            except subprocess.TimeoutExpired:
                process.kill()
    return {"events": end_head - start_head, "passes": min(made.values()), "cpu": end_cpu - start_cpu}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--rescan", type=float, default=1.0, help="rescan_every_s of both sources")
    parser.add_argument("--days", type=int, default=28, help="day directories per source")
    parser.add_argument("--partbuild", nargs="+", default=[f"after={REPO / '.venv/bin/partbuild'}"])
    args = parser.parse_args()
    print(machine())
    print(f"2 sources x {args.days} days, rescan_every_s={args.rescan}, idle {args.minutes} min, `up` over SQLite")
    results = {}
    for spec in args.partbuild:
        name, _, exe = spec.partition("=")
        results[name] = run(name, os.path.abspath(exe), args)
    for name, result in results.items():
        per_day = result["events"] / (args.minutes * 60) * 86_400
        verdict = "PASS" if result["events"] <= TARGET_EVENTS else "MISS"
        print(
            f"{name}: {result['events']:.0f} events appended while idle (target {TARGET_EVENTS}: {verdict}; "
            f"{per_day:,.0f} a day at this rate), {result['passes']:.0f} passes of each source, "
            f"{result['cpu']:.1f} s CPU ({100 * result['cpu'] / (args.minutes * 60):.1f}% of one core)"
        )


if __name__ == "__main__":
    sys.exit(main())
