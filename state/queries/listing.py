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
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from itertools import islice, takewhile
from typing import Any, Protocol

from partbuild.state.fold.build_state import BuildState
from partbuild.state.fold.view import StateView

RECENT_ADDS = 1_024  # the adds whose new refs are kept, so a pattern's refs take in only what was added
RECENT_ADD_REFS = 10_000  # an add bigger than this is not kept (a start-up's all refs): a full pass instead
FANOUT = 16  # the as-of skip lists: blocks of 16 refs, of 16 blocks, of 256 blocks, of 4096 blocks
LEVELS = 4


CHUNK_BITS = 12  # ids in tuples of 4096
_IN_CHUNK = (1 << CHUNK_BITS) - 1


class ChunkedIds:
    """Ids appended in order, held in full tuples of 4096 and a tuple of the rest: the cyclic GC stops scanning
    a tuple of strings after its first pass, where every full collection walked a list of every id (readers
    take one snapshot, `(full, rest)`, replaced whole by each append, so an index never reads half of one)."""

    def __init__(self) -> None:
        self.snapshot: tuple[tuple[tuple[str, ...], ...], tuple[str, ...]] = ((), ())

    def __len__(self) -> int:
        full, rest = self.snapshot
        return (len(full) << CHUNK_BITS) + len(rest)

    def __getitem__(self, index: int) -> str:
        full, rest = self.snapshot
        chunk = index >> CHUNK_BITS
        if chunk < len(full):
            return full[chunk][index & _IN_CHUNK]
        return rest[index - (len(full) << CHUNK_BITS)]

    def extend(self, ids: list[str]) -> None:
        full, rest = self.snapshot
        pending, size = [*rest, *ids], 1 << CHUNK_BITS
        cut = len(pending) - len(pending) % size
        if cut:
            full = (*full, *(tuple(pending[at : at + size]) for at in range(0, cut, size)))
        self.snapshot = (full, tuple(pending[cut:]))


class _CreationOrder:
    """Ids of one table in creation order, with their created seqs (strictly increasing)."""

    def __init__(self) -> None:
        self.ids = ChunkedIds()
        self.seqs = array("q")  # (an array: the cyclic GC does not scan it, where it walked a list of ints)

    def update(self, table: dict[str, Any]) -> None:
        new = len(table) - len(self.ids)
        if new > 0:
            # Dicts keep insertion (= creation) order: the new entries are the last ones.
            fresh = [key for key, _ in zip(reversed(table), range(new), strict=False)][::-1]
            self.ids.extend(fresh)  # first: every index a reader finds in `seqs` has its id
            self.seqs.extend(table[key].created_seq for key in fresh)

    def between(self, after: int, upto: int) -> Iterator[str]:
        """Ids created after `after` and at or before `upto`, oldest first (lazily: a page reads a few)."""
        seqs = self.seqs
        return map(self.ids.__getitem__, range(bisect_right(seqs, after), bisect_right(seqs, upto)))

    def has_seq(self, seq: int) -> bool:
        index = bisect_left(self.seqs, seq)
        return index < len(self.seqs) and self.seqs[index] == seq

    def newest(self, upto: int, before: int | None) -> Iterator[tuple[int, str]]:
        """(created seq, id) of those created at or before `upto` and before seq `before`, newest first."""
        seqs, ids = self.seqs, self.ids
        top = bisect_right(seqs, upto)
        if before is not None:
            top = min(top, bisect_left(seqs, before))
        return ((seqs[i], ids[i]) for i in range(top - 1, -1, -1))


class CreationOrder(Protocol):
    """Ids of wants or job runs in creation order: a live state's (`_CreationOrder`) or the store's."""

    def between(self, after: int, upto: int) -> Iterator[str]: ...

    def has_seq(self, seq: int) -> bool: ...

    def newest(self, upto: int, before: int | None) -> Iterator[tuple[int, str]]: ...


class Listing(Protocol):
    """The paged listings' reads: `ListingIndex` below, or a replica's from the store (state/store/listing.py)."""

    @property
    def wants(self) -> CreationOrder: ...

    @property
    def runs(self) -> CreationOrder: ...

    def refs_from(self, prefix: str, after: str | None) -> Iterator[str]: ...

    def refs_as_of(self, seq: int, prefix: str, after: str | None) -> Iterator[str]: ...

    def refs_matching(self, key: str, prefix: str, match: Callable[[str], object]) -> Sequence[str]: ...

    def added_to(self, key: str, older: Sequence[str]) -> list[str] | None: ...


class _SortedRefs:
    """Refs in sorted order, each with a lower bound of its first instance's created seq ("first").

    Merging new refs in is deferred to reads of the whole list (folds stay cheap) and done under a lock, since
    several readers may merge at once; readers keep the lists they got, never changed after. Each add is a
    generation: a reader that keeps its own list of some refs (`ListingIndex.refs_matching`) asks for the refs
    added since its generation (`added_since`) and splices those in, with no merge of the whole list.
    """

    def __init__(self) -> None:
        self.refs: tuple[str, ...] = ()  # a tuple: the cyclic GC stops scanning it after its first pass
        self.firsts = array("q")
        self._pending: list[str] = []
        self._pending_firsts = array("q")
        self._skips: list[array[int]] | None = None  # per level, the least first of each of its blocks
        self.generation = 0  # adds so far
        # (generation, its new refs, or None when too many to keep) of the last adds.
        self._recent: deque[tuple[int, list[str] | None]] = deque(maxlen=RECENT_ADDS)
        self._lock = threading.Lock()

    def add(self, refs: list[str], firsts: list[int]) -> None:
        kept = list(refs) if len(refs) <= RECENT_ADD_REFS else None
        with self._lock:
            self._pending.extend(refs)
            self._pending_firsts.extend(firsts)
            self.generation += 1
            self._recent.append((self.generation, kept))

    def sorted(self) -> tuple[tuple[str, ...], array[int]]:
        """Every ref, sorted, and their firsts."""
        with self._lock:
            if self._pending:
                self._merge()
            return self.refs, self.firsts

    def added_since(self, generation: int) -> tuple[int, list[str] | None]:
        """(the generation now, the refs added since `generation`, unsorted, or None if they were not kept)."""
        with self._lock:
            if generation == self.generation:
                return generation, []
            batches = [batch for added, batch in self._recent if added > generation]
            kept = [batch for batch in batches if batch is not None]
            if len(batches) != self.generation - generation or len(kept) != len(batches):
                return self.generation, None
            return self.generation, [ref for batch in kept for ref in batch]

    def sorted_now(self) -> tuple[tuple[str, ...], int]:
        """(every ref sorted, the generation it is of)."""
        with self._lock:
            if self._pending:
                self._merge()
            return self.refs, self.generation

    def with_skips(self) -> tuple[tuple[str, ...], array[int], list[array[int]]]:
        """`sorted()` and the skip lists of the as-of scan (built on the first as-of read after a merge)."""
        with self._lock:
            if self._pending:
                self._merge()
            if self._skips is None:
                below, self._skips = self.firsts, []
                for _ in range(LEVELS):
                    below = array("q", (min(below[i : i + FANOUT]) for i in range(0, len(below), FANOUT)))
                    self._skips.append(below)
            return self.refs, self.firsts, self._skips

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
        self.refs, self.firsts, self._skips = tuple(refs), firsts, None
        self._pending, self._pending_firsts = [], array("q")


class ListingIndex:
    """Creation order of wants and job runs, sorted refs; updated by the one folding thread."""

    def __init__(self) -> None:
        self.wants = _CreationOrder()
        self.runs = _CreationOrder()
        self._refs = _SortedRefs()
        self._known_refs = 0
        self._first_floor = 0  # the newest first seq known exactly: no later ref's first is before it
        # key -> (the refs' generation it was taken at, its refs, the ones refs were spliced into, those refs)
        self._matching: dict[str, tuple[int, tuple[str, ...], tuple[str, ...] | None, list[str] | None]] = {}
        self._matching_lock = threading.Lock()

    def update(self, state: BuildState) -> None:
        """Take in what `state` gained since the last update."""
        self.wants.update(state.wants)
        self.runs.update(state.job_runs)
        new_refs = len(state.canonical) - self._known_refs
        if new_refs > 0:
            # `canonical` keeps its refs in the order of their first instances (the fold never removes one).
            fresh = [ref for ref, _ in zip(reversed(state.canonical), range(new_refs), strict=False)][::-1]
            self._refs.add(fresh, self._firsts(state, fresh))
            self._known_refs = len(state.canonical)

    def _firsts(self, state: StateView, fresh: list[str]) -> list[int]:
        """The created seq of each ref's first instance, following `previous_uuid` (once per ref: at start, a
        ref's whole history); where retention dropped it, the newest first known before it, a lower bound."""
        canonical, instances, floor = state.canonical, state.instances, self._first_floor
        firsts = []
        for ref in fresh:
            instance = instances.get(canonical[ref])
            while instance is not None and instance.previous_uuid is not None:
                instance = instances.get(instance.previous_uuid)
            if instance is not None and instance.created_seq > floor:
                floor = instance.created_seq
            firsts.append(floor if instance is None else instance.created_seq)
        self._first_floor = floor
        return firsts

    def refs(self) -> tuple[str, ...]:
        """Every ref with an instance, sorted."""
        return self._refs.sorted()[0]

    def refs_matching(self, key: str, prefix: str, match: Callable[[str], object]) -> Sequence[str]:
        """Sorted refs under `prefix` for which `match` is truthy (a pattern's refs: the grid's per-job index), kept
        under `key`; refs added since are matched alone and spliced in (the refs under a prefix are contiguous:
        a first pass is a bisection, then one pass). A tuple, never changed: the cyclic GC stops scanning it."""
        with self._matching_lock:
            cached = self._matching.get(key)
        generation = cached[0] if cached is not None else -1
        now, added = self._refs.added_since(generation)
        if cached is not None and now == generation:
            return cached[1]
        base = fresh = None
        if cached is not None and added is not None:  # no merge of the whole list: the refs added, spliced in
            fresh = sorted(ref for ref in added if ref.startswith(prefix) and match(ref))
            base = cached[1]
            found = tuple(spliced(base, fresh)) if fresh else base
        else:
            refs, now = self._refs.sorted_now()
            under = takewhile(lambda ref: ref.startswith(prefix), islice(refs, bisect_left(refs, prefix), None))
            found = tuple(ref for ref in under if match(ref))
        with self._matching_lock:
            self._matching[key] = (now, found, base, fresh)
        return found

    def added_to(self, key: str, older: Sequence[str]) -> list[str] | None:
        """The refs the last `refs_matching(key)` spliced into `older` (sorted), or None if it did not splice into
        that list (a first pass, or `older` is from further back): then compare the lists."""
        with self._matching_lock:
            cached = self._matching.get(key)
        return cached[3] if cached is not None and cached[2] is older else None

    def refs_from(self, prefix: str, after: str | None) -> islice[str]:
        """Sorted refs at or after `prefix`, strictly after `after` when given."""
        refs = self.refs()
        return islice(refs, _start(refs, prefix, after), None)

    def refs_as_of(self, seq: int, prefix: str, after: str | None) -> Iterator[str]:
        """Sorted refs under `prefix`, strictly after `after`, that may have had an instance at `seq`.

        Every ref that had one is yielded; a ref whose first instance retention dropped may be
        yielded although it came later: the caller asks the state as of `seq`.
        """
        refs, firsts, skips = self._refs.with_skips()
        # The largest block starting at i whose refs all came after `seq` is skipped whole.
        levels = [(FANOUT ** (level + 1), mins) for level, mins in reversed(list(enumerate(skips)))]
        i, end = _start(refs, prefix, after), len(refs)
        while i < end:
            for size, mins in levels:
                if not i % size and mins[i // size] > seq:
                    i += size
                    if i < end and not refs[i].startswith(prefix):
                        return  # refs under a prefix are contiguous: a skip landed past them
                    break
            else:
                if firsts[i] <= seq:
                    yield refs[i]
                elif not refs[i].startswith(prefix):
                    return
                i += 1


def spliced(old: Sequence[str], fresh: list[str]) -> list[str]:
    """A new sorted list: sorted `old` with sorted `fresh` (none of them in `old`) spliced in, by bisection."""
    out: list[str] = []
    start = 0
    for ref in fresh:
        at = bisect_left(old, ref, start)
        out += old[start:at]
        out.append(ref)
        start = at
    out += old[start:]
    return out


def _start(refs: Sequence[str], prefix: str, after: str | None) -> int:
    start = bisect_left(refs, prefix)
    if after is not None:
        start = max(start, bisect_right(refs, after))
    return start
