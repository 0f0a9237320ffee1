"""Indexes for paged listings: wants and job runs in creation order, refs in sorted order.

They follow a BuildState as it grows (`update` after events were folded), so a
page starts by bisection instead of a scan. Entities are never removed from
these tables (retention drops instances, not refs, wants or runs).
"""

from __future__ import annotations

import threading
from bisect import bisect_left, bisect_right
from heapq import merge
from itertools import islice
from typing import Any

from partbuild.state.fold.build_state import BuildState


class _CreationOrder:
    """Ids of one table in creation order, with their created seqs (strictly increasing)."""

    def __init__(self) -> None:
        self.ids: list[str] = []
        self.seqs: list[int] = []

    def update(self, table: dict[str, Any]) -> None:
        new = len(table) - len(self.ids)
        if new > 0:
            # Dicts keep insertion (= creation) order: the new entries are the last ones.
            fresh = [key for key, _ in zip(reversed(table), range(new), strict=False)][::-1]
            self.ids.extend(fresh)
            self.seqs.extend(table[key].created_seq for key in fresh)

    def after(self, seq: int) -> list[str]:
        """Ids created after `seq`, oldest first."""
        return self.ids[bisect_right(self.seqs, seq) :]

    def has_seq(self, seq: int) -> bool:
        index = bisect_left(self.seqs, seq)
        return index < len(self.seqs) and self.seqs[index] == seq


class ListingIndex:
    """Creation order of wants and job runs, sorted refs; updated by the one folding thread."""

    def __init__(self) -> None:
        self.wants = _CreationOrder()
        self.runs = _CreationOrder()
        self._sorted_refs: list[str] = []
        self._pending_refs: list[str] = []
        self._known_refs = 0
        self._refs_lock = threading.Lock()  # readers merge pending refs lazily, possibly several at once

    def update(self, state: BuildState) -> None:
        """Take in what `state` gained since the last update."""
        self.wants.update(state.wants)
        self.runs.update(state.job_runs)
        new_refs = len(state.canonical) - self._known_refs
        if new_refs > 0:
            fresh = [ref for ref, _ in zip(reversed(state.canonical), range(new_refs), strict=False)]
            with self._refs_lock:
                self._pending_refs.extend(fresh)
            self._known_refs = len(state.canonical)

    def refs(self) -> list[str]:
        """Every ref with an instance, sorted. Merging is deferred to reads: folds stay cheap."""
        with self._refs_lock:
            if self._pending_refs:
                self._sorted_refs = list(merge(self._sorted_refs, sorted(self._pending_refs)))
                self._pending_refs = []
            return self._sorted_refs

    def refs_from(self, prefix: str, after: str | None) -> islice[str]:
        """Sorted refs at or after `prefix`, strictly after `after` when given."""
        refs = self.refs()
        start = bisect_left(refs, prefix)
        if after is not None:
            start = max(start, bisect_right(refs, after))
        return islice(refs, start, None)
