"""The whole state read from the state store by a process that never folds the log (`stored_state`, issue 37).

Builds (or reuses, `--db`) a W1 log of `--instances`, and projects it into the store if it is not yet (a fold
and a first projection, in this process). Then a child process that holds no state opens the database and
answers from the rows alone: the time to its first answer, point reads through the `StateView` (an
instance, a want, a job run, a ref's canonical instance, the counts) now and as of seqs across the log,
each read in a fresh snapshot as a request would be, and the reads that still walk a whole table of rows
(every want, the runs in flight, the wants by ref). Its resident memory is printed after each.

    .venv/bin/python bench/stored_state.py [--db URL] [--instances 1000000] [--reads 500]

Targets (the issue's, for a `serve` that replays nothing): serving within 10 s, point reads p99 <= 10 ms,
resident memory <= 512 MiB. The walks have no target: they are what a replica's lists must not do.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile

from _common import machine, project_store, w1_log

CHILD = r"""
import json, sys, time
started = time.perf_counter()
import sqlalchemy as sa
from partbuild.state.database import Database
from partbuild.state.schema import state_records
from partbuild.state.store.stored import open_stored, stored_state

def rss():
    status = dict(line.split(":", 1) for line in open("/proc/self/status"))
    return int(status["VmRSS"].split()[0]) * 1024

def pct(values, p):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(p * len(ordered)) - 1))]

out = {}
with Database.open(sys.argv[1]) as db:
    records, counts = db.changes.records, db.changes.counts
    with open_stored(records) as stored:
        head = stored.head_seq
        stored_state(stored, head, db.log, counts).counts()
    out["first_answer_s"] = time.perf_counter() - started
    out["rss_after_first"] = rss()
    with records.engine.connect() as conn:
        def sample(kind):  # in the database: the child holds no list of every id
            query = sa.select(state_records.c.id).where(state_records.c.kind == kind)
            ids = conn.execute(query.order_by(sa.func.random()).limit(int(sys.argv[2]))).scalars().all()
            return [ids[i % len(ids)] for i in range(int(sys.argv[2]))]
        uuids, wants, runs, refs = sample(0), sample(1), sample(2), sample(3)
    reads = {
        "instance": lambda s, i: s.instances.get(uuids[i]),
        "want": lambda s, i: s.wants.get(wants[i]),
        "job run": lambda s, i: s.job_runs.get(runs[i]),
        "canonical instance": lambda s, i: s.canonical_instance(refs[i]),
        "counts": lambda s, i: s.counts(),
    }
    for label, seq in (("now", head), ("as of 50 %", head // 2), ("as of 10 %", head // 10)):
        for what, read in reads.items():
            times = []
            for i in range(len(uuids)):
                began = time.perf_counter()
                with open_stored(records) as stored:
                    read(stored_state(stored, seq, db.log, counts), i)
                times.append((time.perf_counter() - began) * 1000)
            out[f"{what} {label}"] = (pct(times, 0.5), pct(times, 0.99))
    out["rss_after_reads"] = rss()
    for walk in ("wants", "active_run_ids", "wants_by_ref"):
        began = time.perf_counter()
        with open_stored(records) as stored:
            size = len(getattr(stored_state(stored, head, db.log, counts), walk))
        out[f"walk {walk}"] = (time.perf_counter() - began, size)
    out["rss_after_walks"] = rss()
print(json.dumps(out))
"""

SERVE_S, READ_MS, RSS_BYTES = 10.0, 10.0, 512 << 20


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--db", help="a database URL or SQLite file (built when empty; default: a temporary file)")
    parser.add_argument("--instances", type=int, default=1_000_000)
    parser.add_argument("--reads", type=int, default=500)
    args = parser.parse_args()
    print(f"machine: {machine()}")
    with tempfile.TemporaryDirectory() as tmp, w1_log(args.db, tmp, "stored.db", args.instances) as (url, _log):
        project_store(url)
        done = subprocess.run([sys.executable, "-c", CHILD, url, str(args.reads)], capture_output=True, text=True)
        if done.returncode:
            raise SystemExit(done.stderr)
        out = json.loads(done.stdout)
    mib = 1 << 20
    print(
        f"a process holding no state: first answer (the counts now) after {out['first_answer_s']:.2f} s, "
        f"{out['rss_after_first'] / mib:.0f} MiB resident"
    )
    worst = 0.0
    for key, value in out.items():
        if isinstance(value, list) and not key.startswith("walk"):
            worst = max(worst, value[1])
            print(f"  {key}: p50 {value[0]:.2f} ms, p99 {value[1]:.2f} ms")
    print(f"  resident after the reads: {out['rss_after_reads'] / mib:.0f} MiB")
    for key, value in out.items():
        if key.startswith("walk"):
            print(f"  {key}: {value[0]:.2f} s for {value[1]:,} entries (every row of the table decoded)")
    print(f"  resident after the walks: {out['rss_after_walks'] / mib:.0f} MiB")
    verdicts = (
        out["first_answer_s"] <= SERVE_S,
        worst <= READ_MS,
        out["rss_after_reads"] <= RSS_BYTES,
    )
    print(
        f"stored_state: first answer <= {SERVE_S:.0f} s, point reads p99 <= {READ_MS:.0f} ms, "
        f"<= {RSS_BYTES // mib} MiB after them: {'PASS' if all(verdicts) else 'MISS'}"
    )


if __name__ == "__main__":
    main()
