"""Indexes for paged listings: wants and job runs in creation order, refs in sorted order.

They follow a BuildState as it grows (`update` after events were folded), so a
page starts by bisection instead of a scan. Entities are never removed from
these tables (retention drops instances, not refs, wants or runs).

They hold what the live state holds; a page as of an earlier seq N lists only
what existed at N. Wants and runs carry their created seqs (a bisection bounds
them), refs a lower bound of the seq their first instance was created at
(blocks of refs all created after N are skipped), and the state as of N has the
last word on each ref.
"""

from __future__ import annotations

import threading
from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Iterator
from itertools import islice
from typing import Any

from partbuild.state.fold.build_state import BuildState

BLOCK = 64  # refs per block of the as-of skip list; a super block is BLOCK blocks
SUPER = BLOCK * BLOCK


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

    def between(self, after: int, upto: int) -> Iterator[str]:
        """Ids created after `after` and at or before `upto`, oldest first (lazily: a page reads a few)."""
        seqs = self.seqs
        return map(self.ids.__getitem__, range(bisect_right(seqs, after), bisect_right(seqs, upto)))

    def has_seq(self, seq: int) -> bool:
        index = bisect_left(self.seqs, seq)
        return index < len(self.seqs) and self.seqs[index] == seq


class _SortedRefs:
    """Refs in sorted order, each with a lower bound of its first instance's created seq ("first").

    Merging new refs in is deferred to reads (folds stay cheap) and done under a lock, since
    several readers may merge at once; readers keep the lists they got, never changed after.
    """

    def __init__(self) -> None:
        self.refs: list[str] = []
        self.firsts = array("q")
        self._pending: list[str] = []
        self._pending_firsts = array("q")
        self._skips: tuple[array[int], array[int]] | None = None  # min first of each block, of each super block
        self._lock = threading.Lock()

    def add(self, refs: list[str], firsts: list[int]) -> None:
        with self._lock:
            self._pending.extend(refs)
            self._pending_firsts.extend(firsts)

    def sorted(self) -> tuple[list[str], array[int]]:
        """Every ref, sorted, and their firsts."""
        with self._lock:
            if self._pending:
                self._merge()
            return self.refs, self.firsts

    def with_skips(self) -> tuple[list[str], array[int], array[int], array[int]]:
        """`sorted()` and the skip lists of the as-of scan (built on the first as-of read after a merge)."""
        with self._lock:
            if self._pending:
                self._merge()
            if self._skips is None:
                firsts = self.firsts
                blocks = array("q", (min(firsts[i : i + BLOCK]) for i in range(0, len(firsts), BLOCK)))
                supers = array("q", (min(blocks[i : i + BLOCK]) for i in range(0, len(blocks), BLOCK)))
                self._skips = blocks, supers
            return self.refs, self.firsts, *self._skips

    def _merge(self) -> None:
        pending, pending_firsts = self._pending, self._pending_firsts
        order = sorted(range(len(pending)), key=pending.__getitem__)
        old, old_firsts = self.refs, self.firsts
        if not old:
            refs = [pending[i] for i in order]
            firsts = array("q", [pending_firsts[i] for i in order])
        else:
            # Splice each new ref in: memory copies of the runs between them, a bisection each.
            refs, firsts, start = [], array("q"), 0
            for i in order:
                at = bisect_left(old, pending[i], start)
                refs += old[start:at]
                firsts += old_firsts[start:at]
                refs.append(pending[i])
                firsts.append(pending_firsts[i])
                start = at
            refs += old[start:]
            firsts += old_firsts[start:]
        self.refs, self.firsts, self._skips = refs, firsts, None
        self._pending, self._pending_firsts = [], array("q")


class ListingIndex:
    """Creation order of wants and job runs, sorted refs; updated by the one folding thread."""

    def __init__(self) -> None:
        self.wants = _CreationOrder()
        self.runs = _CreationOrder()
        self._refs = _SortedRefs()
        self._known_refs = 0
        self._first_floor = 0  # the newest first seq known exactly: no later ref's first is before it

    def update(self, state: BuildState) -> None:
        """Take in what `state` gained since the last update."""
        self.wants.update(state.wants)
        self.runs.update(state.job_runs)
        new_refs = len(state.canonical) - self._known_refs
        if new_refs > 0:
            # `canonical` keeps its refs in the order of their first instances (the fold never removes one).
            fresh = [ref for ref, _ in zip(reversed(state.canonical), range(new_refs), strict=False)][::-1]
            firsts = []
            for ref in fresh:
                first = _first_seq(state, ref)
                if first is None:  # retention dropped its first instance: the newest exact first before it bounds it
                    first = self._first_floor
                self._first_floor = max(self._first_floor, first)
                firsts.append(first)
            self._refs.add(fresh, firsts)
            self._known_refs = len(state.canonical)

    def refs(self) -> list[str]:
        """Every ref with an instance, sorted."""
        return self._refs.sorted()[0]

    def refs_from(self, prefix: str, after: str | None) -> islice[str]:
        """Sorted refs at or after `prefix`, strictly after `after` when given."""
        refs = self.refs()
        return islice(refs, _start(refs, prefix, after), None)

    def refs_as_of(self, seq: int, prefix: str, after: str | None) -> Iterator[str]:
        """Sorted refs under `prefix`, strictly after `after`, that may have had an instance at `seq`.

        Every ref that had one is yielded; a ref whose first instance retention dropped may be
        yielded although it came later: the caller asks the state as of `seq`.
        """
        refs, firsts, blocks, supers = self._refs.with_skips()
        i, end = _start(refs, prefix, after), len(refs)
        while i < end:
            if not i % SUPER and supers[i // SUPER] > seq:
                i += SUPER
            elif not i % BLOCK and blocks[i // BLOCK] > seq:
                i += BLOCK
            else:
                if firsts[i] <= seq:
                    yield refs[i]
                elif not refs[i].startswith(prefix):
                    return
                i += 1
                continue
            if i < end and not refs[i].startswith(prefix):
                return  # refs under a prefix are contiguous: a skip landed past them


def _start(refs: list[str], prefix: str, after: str | None) -> int:
    start = bisect_left(refs, prefix)
    if after is not None:
        start = max(start, bisect_right(refs, after))
    return start


def _first_seq(state: BuildState, ref: str) -> int | None:
    """The created seq of `ref`'s first instance, following `previous_uuid`; None where retention broke the chain."""
    instance = state.instances.get(state.canonical[ref])
    while instance is not None:
        if instance.previous_uuid is None:
            return instance.created_seq
        instance = state.instances.get(instance.previous_uuid)
    return None
