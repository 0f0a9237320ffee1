"""A page of `/changes` (issue 37): what one page of 100 costs, whatever the range, from the state store.

The state store's `state_changes` table (state/store/changes.py) holds every change keyed by (seq, kind, id):
a page is one range scan of the key. Beside it, in the same run and with the same answer asserted, the live
state's page (`changes_page`: it stops once its page is full, but visits every record created up to the
page's last change).

Builds (or reuses, `--db`) a W1 log of `--instances`, folds it (`LiveState`), projects it into the store
(timed: the `db upgrade` of an existing log), then times a page of `--limit` for: the whole log from its
start, the second half from its middle, a page deep into the whole log (after a cursor at the middle), and
the last 1,000 seqs. Also timed: one projector pass of the last 1,000 seqs at this size, from the records
the fold touched (what `serve` and `up` do after their first pass) and by a scan of every record (the
first). Target: p99 <= 50 ms a page for any range.

    .venv/bin/python bench/changes_pages.py [--db URL] [--instances 1000000] [--limit 100] [--rounds 20]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Callable

from _common import machine, percentile, w1_log

from partbuild.state.database import Database
from partbuild.state.fold.build_state import BuildState
from partbuild.state.fold.touched import Touched
from partbuild.state.log.live import LiveState
from partbuild.state.queries.changes import Change, changes_between, changes_of, changes_page
from partbuild.state.store.projector import Projector

TARGET_MS = 50.0
Page = Callable[[int, int, int, "tuple[int, int, str] | None"], list[Change]]


def timed(page: Page, first: int, last: int, limit: int, after: tuple[int, int, str] | None, rounds: int) -> float:
    """p99 in ms of `rounds` calls."""
    took = []
    for _ in range(rounds):
        started = time.perf_counter()
        page(first, last, limit, after)
        took.append((time.perf_counter() - started) * 1000)
    return percentile(took, 0.99)


def print_pass_costs(state: BuildState, first: int) -> None:
    """A projector pass of (first, head]: from what the fold touched (as it tracks them), and by a scan."""
    touched = Touched(first)  # what the fold's tracking holds after those seqs: the records changed in them
    for table, keys in (
        (state.instances, touched.instances),
        (state.wants, touched.wants),
        (state.job_runs, touched.runs),
    ):
        keys.update(key for key, record in table.items() if record.updated_seq > first)
    took = {}
    for label, compute in (
        ("the records the fold touched", lambda: changes_of(state, first, state.head_seq, touched)),
        ("a scan of every record", lambda: changes_between(state, first, state.head_seq)),
    ):
        started = time.perf_counter()
        compute()
        took[label] = (time.perf_counter() - started) * 1000
    seqs = state.head_seq - first
    print(
        f"a projector pass of the last {seqs:,} seqs: "
        + ", ".join(f"{ms:.1f} ms from {label}" for label, ms in took.items())
    )


def measure(db: Database, limit: int, rounds: int) -> bool:
    """Fold, project, then time each case's page from the store and from the live state; True: all in target."""
    started = time.perf_counter()
    live = LiveState(db.log, use_snapshots=False)
    print(f"folded {live.head_seq:,} events in {time.perf_counter() - started:.0f} s", flush=True)
    started, before = time.perf_counter(), db.changes.watermark()
    Projector(live, db.changes).project()
    seconds = time.perf_counter() - started
    projected = live.head_seq - before
    print(f"projected {projected:,} events into the store in {seconds:.0f} s", flush=True)
    state, store = live.state, db.changes
    head, middle = state.head_seq, state.head_seq // 2
    print_pass_costs(state, head - 1_000)
    cursor = changes_page(state, middle - 1, middle, 1)[0].key  # a change at the middle: a deep cursor
    cases = {
        "the whole log, first page": (0, head, None),
        "the second half, first page": (middle, head, None),
        "the whole log, a page after a cursor at its middle": (0, head, cursor),
        "the last 1,000 seqs, first page": (head - 1_000, head, None),
    }

    def in_memory(first: int, last: int, limit: int, after: tuple[int, int, str] | None) -> list[Change]:
        return changes_page(state, first, last, limit, after)

    verdicts = []
    for label, (first, last, after) in cases.items():
        assert store.page(first, last, limit, after) == in_memory(first, last, limit, after)
        from_store = timed(store.page, first, last, limit, after, rounds)
        from_live = timed(in_memory, first, last, limit, after, rounds)
        verdicts.append(from_store <= TARGET_MS)
        print(
            f"{label}: p99 {from_store:.1f} ms from the store, {from_live:.1f} ms from the live state "
            f"(target <= {TARGET_MS:.0f} ms)"
        )
    return all(verdicts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--db", help="a database URL or SQLite file (built when empty; default: a temporary file)")
    parser.add_argument("--instances", type=int, default=1_000_000)
    parser.add_argument("--limit", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args()
    print(f"machine: {machine()}")
    with (
        tempfile.TemporaryDirectory() as tmp,
        w1_log(args.db, tmp, "changes.db", args.instances) as (url, _),
        Database.open(url, auto_upgrade=True) as db,
    ):
        passed = measure(db, args.limit, args.rounds)
        print(f"changes_pages ({db.backend}): {'PASS' if passed else 'MISS'}")


if __name__ == "__main__":
    main()
