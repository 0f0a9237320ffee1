"""A page of `/changes` (issue 37): what one page of 100 costs, whatever the range.

`changes_page` stops looking once its page is full: it visits the records created up to the page's last
change, in creation order, and no further. Before, every page computed every change of the whole range,
sorted them, then sliced (the issue measured 9.4-11.1 s a page on the 1.24M-event W1 log); that way,
`changes_between` + a slice, is timed beside it in the same run.

Folds `--events` of the benchmarks' W1 history into a state in this process (no database), then times a page
of `--limit` for: the whole log from its start, the second half from its middle, a page deep into the
whole log (after a cursor at the middle), and the last 1,000 seqs. Target: p99 <= 50 ms a page for any range
(the issue's, for the store on disk: this in-memory page is not there yet for deep pages).

    .venv/bin/python bench/changes_pages.py [--events 1000000] [--limit 100] [--rounds 5]
"""

from __future__ import annotations

import argparse
import time
from bisect import bisect_right

from _common import machine, percentile, w1_history

from partbuild.state.fold.build_state import BuildState
from partbuild.state.queries.changes import Change, changes_between, changes_page

TARGET_MS = 50.0


def folded(events: int) -> BuildState:
    state = BuildState()
    started = time.perf_counter()
    for seq, event in enumerate(w1_history(events), 1):
        state.apply(seq, event)
    print(f"folded {events:,} events ({len(state.instances):,} instances) in {time.perf_counter() - started:.0f} s")
    return state


def before(state: BuildState, first: int, last: int, limit: int, after: tuple[int, int, str] | None) -> list[Change]:
    """The page as it was computed before: every change of the range, sorted, then sliced."""
    found = changes_between(state, first, last)
    start = 0 if after is None else bisect_right(found, after, key=lambda change: change.key)
    return found[start : start + limit]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--limit", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    print(f"machine: {machine()}")
    state = folded(args.events)
    head, middle = state.head_seq, state.head_seq // 2
    cursor = changes_page(state, middle - 1, middle, 1)[0].key  # a change at the middle: a deep cursor
    cases = {
        "the whole log, first page": (0, head, None),
        "the second half, first page": (middle, head, None),
        "the whole log, a page after a cursor at its middle": (0, head, cursor),
        "the last 1,000 seqs, first page": (head - 1_000, head, None),
    }
    verdicts = []
    for label, (first, last, after) in cases.items():
        now: list[float] = []
        for _ in range(args.rounds):
            started = time.perf_counter()
            page = changes_page(state, first, last, args.limit, after)
            now.append((time.perf_counter() - started) * 1000)
        started = time.perf_counter()
        assert before(state, first, last, args.limit, after) == page
        was = (time.perf_counter() - started) * 1000
        p99 = percentile(now, 99)
        verdicts.append(p99 <= TARGET_MS)
        print(f"{label}: p99 {p99:.1f} ms a page of {len(page)} (before: {was:.0f} ms; target <= {TARGET_MS} ms)")
    print(f"changes_pages: {'PASS' if all(verdicts) else 'MISS'}")


if __name__ == "__main__":
    main()
