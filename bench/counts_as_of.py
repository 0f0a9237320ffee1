"""Counts as of a seq (issue 37): `GET /counts?as_of_seq=N` from the state store, beside the scan it replaces.

The state store's `state_counts` table (state/store/counts.py) holds, per (kind, state), a row at each seq
where that count changed: the counts as of any seq are one index probe per state, in one statement. Beside
it, in the same run and with the same answer asserted, `PastState.counts()` without the store: a scan of
every instance, want and job run. Both are timed alone (the counts) and as the route answers
(`counts_out`: the counts plus, per waiting state, how many an active want needs, which reads the wants
as of the seq either way).

Builds (or reuses, `--db`) a W1 log of `--instances`, folds it, projects it into the store (timed: the
`db upgrade` of an existing log, changes and counts together), then reads as of seqs at 10 %, 50 % and 90 %
of the log and one before its head. Target: p99 <= 200 ms (the issue's, for 10M instances).

    .venv/bin/python bench/counts_as_of.py [--db URL] [--instances 1000000] [--rounds 20]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Callable

from _common import machine, percentile, w1_log

from partbuild.api.service.operations import counts_out
from partbuild.state.database import Database
from partbuild.state.fold.past import PastState
from partbuild.state.log.live import LiveState
from partbuild.state.store.projector import Projector

TARGET_MS = 200.0


def p99_ms(read: Callable[[], object], rounds: int) -> float:
    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        read()
        times.append((time.perf_counter() - started) * 1000)
    return percentile(times, 0.99)


def measure(db: Database, rounds: int) -> bool:
    """Fold, project, then time the counts as of each seq from the store and by the scan; True: in target."""
    started = time.perf_counter()
    live = LiveState(db.log, use_snapshots=False)
    print(
        f"folded {live.head_seq:,} events ({len(live.state.instances):,} instances) in "
        f"{time.perf_counter() - started:.0f} s",
        flush=True,
    )
    started, before = time.perf_counter(), db.changes.watermark()
    Projector(live, db.changes).project()
    print(f"projected {live.head_seq - before:,} events into the store in {time.perf_counter() - started:.0f} s")
    head = live.head_seq
    verdicts = []
    for seq in (head // 10, head // 2, head * 9 // 10, head - 1):
        with live.read_as_of(seq) as past:
            assert isinstance(past, PastState)
            scanned = past.counts()
            past.counts_reader = db.changes.counts
            assert past.counts() == scanned
            from_store = p99_ms(past.counts, rounds)
            route_store = p99_ms(lambda: counts_out(past), rounds)
            past.counts_reader = None
            from_scan = p99_ms(past.counts, max(3, rounds // 4))
            route_scan = p99_ms(lambda: counts_out(past), max(3, rounds // 4))
        verdicts.append(route_store <= TARGET_MS)
        print(
            f"as of seq {seq:,}: counts p99 {from_store:.1f} ms from the store, {from_scan:.1f} ms by the scan; "
            f"the route's answer {route_store:.1f} ms / {route_scan:.1f} ms (target <= {TARGET_MS:.0f} ms)"
        )
    return all(verdicts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--db", help="a database URL or SQLite file (built when empty; default: a temporary file)")
    parser.add_argument("--instances", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args()
    print(f"machine: {machine()}")
    with (
        tempfile.TemporaryDirectory() as tmp,
        w1_log(args.db, tmp, "counts.db", args.instances) as (url, _),
        Database.open(url, auto_upgrade=True) as db,
    ):
        passed = measure(db, args.rounds)
        print(f"counts_as_of ({db.backend}): {'PASS' if passed else 'MISS'}")


if __name__ == "__main__":
    main()
