"""The partition status grid of one pattern: each known ref's cell state, runs of equal state, a day layout.

Pure functions over refs already in key order (the listing index's sorted refs, a
pattern's own refs under its literal prefix): the service looks the states up as
of a seq and these shape them so a page stays bounded (`MAX_CELLS`).

A cell's state is its canonical instance's state, lowercased, except a Live
instance whose latest checks warned (a non-blocking check failed): `warning`.
Refs the log knows nothing of are no cells at all; in a day layout the days
between the first and the last known one that have no instance are `none`.
"""

from __future__ import annotations

import datetime as dt
from array import array
from bisect import bisect_left, bisect_right
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, overload

MAX_CELLS = 2_000  # the most cells (single refs or ranges) a grid answer holds
NO_INSTANCE = "none"
MIXED = "mixed"


@dataclass(frozen=True)
class Cell:
    """One ref, or a run of consecutive refs (`first`..`last`, `count` of them) in one state (or `mixed`)."""

    first: str
    last: str
    state: str
    count: int
    counts: tuple[tuple[str, int], ...] = ()  # a mixed range's states

    @property
    def single(self) -> bool:
        return self.count == 1


def runs(cells: Iterable[tuple[str, str]]) -> Iterator[Cell]:
    """Consecutive (ref, state) pairs of equal state as one Cell each."""
    first = last = state = ""
    count = 0
    for ref, cell_state in cells:
        if count and cell_state == state:
            last, count = ref, count + 1
            continue
        if count:
            yield Cell(first, last, state, count)
        first = last = ref
        state, count = cell_state, 1
    if count:
        yield Cell(first, last, state, count)


def bounded(cells: Sequence[tuple[str, str]], most: int = MAX_CELLS) -> list[Cell]:
    """At most `most` cells: one per ref if they fit, else runs of equal state, else `most` ranges of equal size
    (a range holding several states is `mixed`, with their counts): a zoom (a key range) shows it in detail."""
    if len(cells) <= most:
        return [Cell(ref, ref, state, 1) for ref, state in cells]
    merged = list(runs(cells))
    if len(merged) <= most:
        return merged
    size = -(-len(cells) // most)
    out = []
    for start in range(0, len(cells), size):
        chunk = cells[start : start + size]
        counted = Counter(state for _, state in chunk)
        state = chunk[0][1] if len(counted) == 1 else MIXED
        out.append(Cell(chunk[0][0], chunk[-1][0], state, len(chunk), tuple(sorted(counted.items()))))
    return out


@dataclass(frozen=True)
class Month:
    """One row of a day layout: the days of a month within the span shown."""

    year: int
    month: int
    days: list[tuple[dt.date, str, str | None]]  # (day, state, ref or None when no instance)


def day_layout(cells: Sequence[tuple[str, str]], days: list[dt.date], most: int = MAX_CELLS) -> list[Month] | None:
    """Rows of months holding every day from the first known to the last (`days[i]` is `cells[i]`'s date), the
    days without an instance as `none`; None when the span is more than `most` days (then runs are shown)."""
    if not cells:
        return []
    by_day = {day: (ref, state) for day, (ref, state) in zip(days, cells, strict=True)}
    first, last = min(by_day), max(by_day)
    if (last - first).days + 1 > most:
        return None
    months: list[Month] = []
    day = first
    while day <= last:
        if not months or (months[-1].year, months[-1].month) != (day.year, day.month):
            months.append(Month(day.year, day.month, []))
        ref, state = by_day.get(day, (None, NO_INSTANCE))
        months[-1].days.append((day, state, ref))
        day += dt.timedelta(days=1)
    return months


def in_range(refs: Sequence[str], start: str | None, end: str | None) -> tuple[int, int]:
    """The slice of sorted `refs` from `start` to `end` (both included; None: open)."""
    low = bisect_left(refs, start) if start else 0
    high = bisect_right(refs, end) if end else len(refs)
    return low, max(low, high)


def run_starts(cells: Sequence[tuple[str, str]]) -> list[int]:
    """The index of the first cell of each run of equal state (kept with the cells: ranges then cost their runs)."""
    starts, previous = [], None
    for index, (_, state) in enumerate(cells):
        if state != previous:
            starts.append(index)
            previous = state
    return starts


def run_starts_after(cells: Sequence[tuple[str, str]], starts: list[int], changed: Iterable[int]) -> list[int]:
    """`run_starts(cells)` from the `starts` of the same cells before the ones at `changed` indices changed state.

    Whether index `p` starts a run depends only on the states at `p - 1` and `p`, so a change at `i` can move
    the starts at `i` and `i + 1` alone: each of those is set or cleared by a bisection (the list's shifts are
    memory moves), instead of a pass over every cell. Many changes: that pass.
    """
    affected = sorted({p for i in changed for p in (i, i + 1) if p < len(cells)})
    if len(affected) * 64 > len(cells):
        return run_starts(cells)
    out = list(starts)
    for p in affected:
        starts_here = p == 0 or cells[p][1] != cells[p - 1][1]
        at = bisect_left(out, p)
        present = at < len(out) and out[at] == p
        if starts_here and not present:
            out.insert(at, p)
        elif present and not starts_here:
            del out[at]
    return out


@dataclass(frozen=True)
class Splice:
    """Fresh refs spliced into a sorted list of refs, each at its place in key order: where they go, and where
    the old list's indices land (a list aligned with the old refs is brought along without a pass over it)."""

    positions: list[int]  # each fresh ref's insertion point in the old list (bisect_left), ascending

    @classmethod
    def of(cls, refs: Sequence[str], fresh: list[str]) -> Splice:
        """The splice of sorted `fresh` refs (none of them in `refs`) into sorted `refs`."""
        positions, start = [], 0
        for ref in fresh:
            start = bisect_left(refs, ref, start)
            positions.append(start)
        return cls(positions)

    def fresh_indices(self) -> list[int]:
        """The fresh refs' indices in the new list."""
        return [at + before for before, at in enumerate(self.positions)]

    def moved(self, index: int) -> int:
        """Where the old list's `index` lands in the new one."""
        return index + bisect_right(self.positions, index)

    @overload
    def applied(self, values: array[int], slot: int) -> array[int]: ...

    @overload
    def applied(self, values: Sequence[Any], slot: object) -> list[Any]: ...

    def applied(self, values: Sequence[Any], slot: object) -> Sequence[Any]:
        """`values` (aligned with the old refs) with `slot` at each fresh ref's place: copies of the slices between
        (an array of seqs gives an array, any other sequence a list)."""
        out: Any = values[:0] if isinstance(values, array) else []
        start = 0
        for at in self.positions:
            out += values[start:at]
            out.append(slot)
            start = at
        out += values[start:]
        return out


def run_starts_spliced(
    cells: Sequence[tuple[str, str]], starts: list[int], splice: Splice, changed: Iterable[int]
) -> list[int]:
    """`run_starts(cells)` for cells spliced (`splice`) from ones whose runs started at `starts`, then changed at
    the new list's `changed` indices: the old starts moved to their new places, then set or cleared around the
    fresh and the changed cells (`run_starts_after`). Many runs: a pass over the cells."""
    if len(starts) * 8 > len(cells):
        return run_starts(cells)
    return run_starts_after(cells, [splice.moved(start) for start in starts], [*splice.fresh_indices(), *changed])


def runs_between(cells: Sequence[tuple[str, str]], starts: list[int], low: int, high: int) -> list[Cell]:
    """The runs of `cells[low:high]` from the whole list's `run_starts`: a bisection, then one step per run."""
    out = []
    run = max(0, bisect_right(starts, low) - 1)
    while run < len(starts) and starts[run] < high:
        first = max(starts[run], low)
        end = min(starts[run + 1] if run + 1 < len(starts) else len(cells), high)
        out.append(Cell(cells[first][0], cells[end - 1][0], cells[first][1], end - first))
        run += 1
    return out
