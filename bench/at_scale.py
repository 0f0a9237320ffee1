"""Issue 37's benchmark at scale: a W1-shaped log of `--instances` (10M: about 12M events), what a process
holds and how fast the store answers, with this code and, side by side where it can still run, another's.

Builds (or reuses, `--db`) the log, then in this process: folds it (the time and the resident memory a
`serve` or `up` holds: its whole live state), projects it into the store (a first projection: changes,
counts and records), and times point reads (rows and memory), a `/changes` page of 100 over random ranges
and the counts as of seqs across the log (from the store). Then `partbuild replay --verify` in a process of
its own (wall time, peak memory). `--other NAME=PYTHONPATH` (e.g. `main=/tmp/main/typecheck`, SQLite only):
the fold's memory and `replay --verify` of that code too, in processes of their own, on a copy of the log made
before this code projects its store, stamped with the schema revision that code knows (its tables are a
subset: older code refuses a database a newer one upgraded).

    .venv/bin/python bench/at_scale.py [--db URL] [--instances 10000000] [--reads 500] [--other main=PATH]

Targets (the issue's, at 10M): `up` <= 2 GiB resident (a process holds its whole state: the fold's
resident memory is the floor of `serve` and `up`), point reads p99 <= 10 ms, a page p99 <= 50 ms, counts p99
<= 200 ms, `replay --verify` >= 150,000 events/s in <= 2 GiB.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import random
import re
import sqlite3
import subprocess
import sys
import tempfile
import time

from _common import machine, percentile, rss_bytes, w1_log
from record_rows import point_reads

from partbuild.state.database import Database
from partbuild.state.fold.past import PastState
from partbuild.state.log.live import LiveState
from partbuild.state.store.projector import Projector

GIB = 1 << 30
FOLD_SCRIPT = (
    "import sys, time\n"
    "from partbuild.state.database import Database\n"
    "from partbuild.state.log.live import LiveState\n"
    "with Database.open(sys.argv[1]) as db:\n"
    "    started = time.perf_counter()\n"
    "    live = LiveState(db.log, use_snapshots=False)\n"
    "    status = dict(line.split(':', 1) for line in open('/proc/self/status'))\n"
    "    kib = [int(status[name].split()[0]) for name in ('VmRSS', 'VmHWM')]\n"
    "    print(time.perf_counter() - started, kib[0] * 1024, kib[1] * 1024)\n"
)


def _fold_elsewhere(url: str, pythonpath: str) -> tuple[float, int, int]:
    """(seconds, resident bytes after, peak resident bytes) of a fold of the whole log by the code on
    `pythonpath`, in a process of its own."""
    env = {**os.environ, "PYTHONPATH": pythonpath}
    done = subprocess.run([sys.executable, "-c", FOLD_SCRIPT, url], env=env, capture_output=True, text=True, check=True)
    seconds, resident, peak = done.stdout.split()
    return float(seconds), int(resident), int(peak)


def _revision_of(pythonpath: str) -> str:
    script = "from partbuild.state.migrate import head_revision; print(head_revision())"
    env = {**os.environ, "PYTHONPATH": pythonpath}
    return subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True).stdout.strip()


def _copy_for(url: str, pythonpath: str, tmp: str, name: str) -> str:
    """A copy of the SQLite log at `url` that the code on `pythonpath` opens (its head revision stamped)."""
    copy = os.path.join(tmp, f"{name}.db")
    source = sqlite3.connect(url.removeprefix("sqlite:///"))
    with sqlite3.connect(copy) as target:
        source.backup(target)
        target.execute("UPDATE alembic_version SET version_num = ?", (_revision_of(pythonpath),))
    source.close()
    return f"sqlite:///{copy}"


def _verify_elsewhere(url: str, pythonpath: str) -> tuple[float, int, str]:
    """(wall seconds, peak resident bytes, the verdict line) of `partbuild replay --verify` by that code."""
    env = {**os.environ, "PYTHONPATH": pythonpath}
    cli = "from partbuild.api.cli import main; main()"
    command = ["/usr/bin/time", "-f", "%e %M", sys.executable, "-c", cli, "replay", "--db", url]
    done = subprocess.run([*command, "--verify"], env=env, capture_output=True, text=True)
    wall, peak_kib = done.stderr.strip().splitlines()[-1].split()
    verdict = next((line.strip() for line in done.stdout.splitlines() if line.startswith("verify")), "verify: ?")
    return float(wall), int(peak_kib) * 1024, re.sub(r"\s+", " ", verdict)


def _timed_p99(reads: list[object]) -> float:
    times = []
    for read in reads:
        started = time.perf_counter()
        read()  # type: ignore[operator]
        times.append((time.perf_counter() - started) * 1000)
    return percentile(times, 0.99)


def store_reads(db: Database, live: LiveState, count: int) -> list[bool]:
    """Pages of changes and counts as of seqs, from the store; True per read kind in target."""
    head = live.head_seq
    rng = random.Random(37)
    ranges = [sorted(rng.sample(range(head), 2)) for _ in range(count)]
    page = _timed_p99([lambda r=r: db.changes.page(r[0], r[1], 100) for r in ranges])
    print(f"a /changes page of 100 from the store, random ranges: p99 {page:.1f} ms (target <= 50 ms)")
    verdicts = [page <= 50]
    for seq in (head // 10, head // 2, head - 1):
        with live.read_as_of(seq) as past:
            assert isinstance(past, PastState)
            past.counts_reader = db.changes.counts
            counts = _timed_p99([past.counts for _ in range(max(5, count // 50))])
        print(f"counts as of seq {seq:,} from the store: p99 {counts:.1f} ms (target <= 200 ms)")
        verdicts.append(counts <= 200)
    return verdicts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--db", help="a database URL or SQLite file (built when empty; default: a temporary file)")
    parser.add_argument("--instances", type=int, default=10_000_000)
    parser.add_argument("--reads", type=int, default=500)
    parser.add_argument("--other", action="append", default=[], help="NAME=PYTHONPATH of other code to compare")
    args = parser.parse_args()
    print(f"machine: {machine()}")
    this = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "typecheck")
    sides = [("this", this), *(tuple(other.split("=", 1)) for other in args.other)]
    with tempfile.TemporaryDirectory() as tmp, w1_log(args.db, tmp, "scale.db", args.instances) as (url, log):
        events = log.head()
        urls = {"this": url} | {name: _copy_for(url, path, tmp, name) for name, path in sides[1:]}
        for name, path in sides:  # each side's fold alone in a process: what a server of it holds
            seconds, resident, peak = _fold_elsewhere(urls[name], path)
            print(
                f"{name}: folded {events:,} events in {seconds:.0f} s ({events / seconds:,.0f} events/s), "
                f"{resident / GIB:.2f} GiB resident after, {peak / GIB:.2f} GiB at the peak (target <= 2 GiB)"
            )
        # In a child process: its live state is gone before the audits start theirs (at 10M, two states
        # would not fit in 24 GiB).
        child = multiprocessing.get_context("fork").Process(target=_fold_project_read, args=(url, args.reads))
        child.start()
        child.join()
        for name, path in sides:
            wall, peak, verdict = _verify_elsewhere(urls[name], path)
            print(
                f"{name}: replay --verify {wall:.0f} s ({events / wall:,.0f} events/s), peak {peak / GIB:.2f} GiB "
                f"(target >= 150,000 events/s, <= 2 GiB); {verdict}"
            )
        print(f"at_scale reads ({url.split(':', 1)[0]}): {'PASS' if child.exitcode == 0 else 'MISS'}")


def _fold_project_read(url: str, reads: int) -> None:
    """Fold, project (a first projection) and time the reads; exits 1 when a read misses its target."""
    with Database.open(url, auto_upgrade=True) as db:
        live = LiveState(db.log, use_snapshots=False)
        print(f"folded here: {len(live.state.instances):,} instances; resident {rss_bytes()[0] / GIB:.2f} GiB")
        started = time.perf_counter()
        Projector(live, db.changes).project()
        print(f"first projection (changes, counts, records): {time.perf_counter() - started:.0f} s", flush=True)
        verdicts = [point_reads(db, live, reads), *store_reads(db, live, reads)]
    sys.stdout.flush()
    os._exit(0 if all(verdicts) else 1)


if __name__ == "__main__":
    main()
