"""`SplitEstimator`: the key that splits observed bytes about in half, in fixed memory.

Used to split a large scan between workers (`orchestrator/sources/key_ranges.py`
rebalances each pass's key ranges from the half-way keys of the last pass's, and
connectors answer `choose_split_point` with it): the observations are (key,
size) pairs seen while scanning, far too many to keep. (Batches of a job's
partitions by input bytes, `Job.batch_bytes`, are few enough to pack exactly.)
The estimator keeps a *priority sample* (Duffield, Lund and Thorup, "Priority
sampling for estimation of arbitrary subset sums", 2007):

- each observation of `size` bytes gets the priority `size / u`, u uniform in (0, 1];
- the `capacity + 1` highest priorities are kept in a min-heap (fixed memory:
  the heap never grows past that, whatever the number of observations);
- the lowest kept priority is the threshold `tau`; every other kept item stands
  for `max(size, tau)` bytes. These weights estimate the bytes of any key
  range without bias, and items of `tau` bytes or more are kept exactly.

`split_point` sorts the sample by key and returns the sampled key whose
estimated share of bytes before it is nearest one half. With at most
`capacity` observations it is exact: the best split of the observed keys.
Otherwise the estimated share before a key has a standard deviation of about
`0.5 / sqrt(capacity)`, whatever the order or the skew of the input; the
returned key's true share of bytes is within `ERROR_BOUND_FACTOR /
sqrt(capacity)` of the best achievable split's (the tests and
`bench/split_estimator.py` check this bound; at the default capacity of 4,096
it is 3.1 percentage points).

The sample is drawn with a seeded generator, so the same observations give the
same split point (connectors must be deterministic).
"""

from __future__ import annotations

import heapq
import math
import random
import sys
from itertools import accumulate

from partbuild.orchestrator.connectors.toxic import ItemKey

DEFAULT_CAPACITY = 4096
ERROR_BOUND_FACTOR = 2.0  # about 4 standard deviations of the estimated share


def error_bound(capacity: int) -> float:
    """The bound on |share before the split - 1/2| beyond the best split's, as a fraction of the bytes."""
    return ERROR_BOUND_FACTOR / math.sqrt(capacity)


class SplitEstimator:
    """A byte-weighted median key of a stream of (key, size) observations, in memory fixed by `capacity`."""

    __slots__ = ("_capacity", "_heap", "_observations", "_rng", "_total_bytes")

    def __init__(self, capacity: int = DEFAULT_CAPACITY, *, seed: int = 0) -> None:
        if isinstance(capacity, bool) or not isinstance(capacity, int):
            raise TypeError(f"capacity must be an int, not {type(capacity).__name__}")
        if capacity < 2:
            raise ValueError(f"capacity must be at least 2, got {capacity}")
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise TypeError(f"seed must be an int, not {type(seed).__name__}")
        self._capacity = capacity
        self._rng = random.Random(seed)
        # (priority, key bytes, size); the min-heap's root is the threshold once the heap is full.
        self._heap: list[tuple[float, bytes, int]] = []
        self._observations = 0
        self._total_bytes = 0

    @property
    def capacity(self) -> int:
        return self._capacity

    @property
    def observations(self) -> int:
        return self._observations

    @property
    def total_bytes(self) -> int:
        """The exact number of bytes observed."""
        return self._total_bytes

    @property
    def retained(self) -> int:
        """Entries held: at most capacity + 1, whatever the number of observations."""
        return len(self._heap)

    def observe(self, key: ItemKey, size: int) -> None:
        """Count `size` bytes at `key`. Sizes of 0 count as observations but weigh nothing."""
        if not isinstance(key, ItemKey):
            raise TypeError(f"key must be an ItemKey, not {type(key).__name__}")
        if isinstance(size, bool) or not isinstance(size, int):
            raise TypeError(f"size must be an int, not {type(size).__name__}")
        if size < 0:
            raise ValueError(f"size must be at least 0, got {size}")
        self._observations += 1
        if size == 0:
            return
        self._total_bytes += size
        priority = size / (1.0 - self._rng.random())  # 1 - random() is in (0, 1]: no division by zero
        if len(self._heap) <= self._capacity:
            heapq.heappush(self._heap, (priority, key.raw_bytes(), size))
        elif priority > self._heap[0][0]:
            heapq.heapreplace(self._heap, (priority, key.raw_bytes(), size))

    def _weighted_sample(self) -> list[tuple[bytes, float]]:
        """(key, estimated bytes) sorted by key, keys merged."""
        if len(self._heap) <= self._capacity:
            threshold, kept = 0.0, self._heap  # everything seen is here: exact weights
        else:
            threshold, kept = self._heap[0][0], self._heap[1:]  # the root only sets the threshold
        merged: dict[bytes, float] = {}
        for _, raw, size in kept:
            merged[raw] = merged.get(raw, 0.0) + max(float(size), threshold)
        return sorted(merged.items())

    def split_point(self) -> ItemKey | None:
        """The key starting the upper half: its estimated bytes before it are nearest half the total.

        None while fewer than two distinct keys of non-zero size were observed.
        """
        sample = self._weighted_sample()
        if len(sample) < 2:
            return None
        before = list(accumulate((weight for _, weight in sample), initial=0.0))
        half = before[-1] / 2
        # A split at index s leaves sample[:s] below it; s = 0 would leave the lower half empty.
        best = min(range(1, len(sample)), key=lambda s: (abs(before[s] - half), s))
        return ItemKey(sample[best][0])

    def deep_size(self) -> int:
        """Bytes held by the sample (the heap, its tuples and their contents), for memory checks."""
        total = sys.getsizeof(self._heap)
        for entry in self._heap:
            total += sys.getsizeof(entry) + sum(sys.getsizeof(part) for part in entry)
        return total


def exact_split_share(observations: list[tuple[bytes, int]], split: bytes) -> float:
    """The share of bytes strictly before `split`: what an estimate is judged by."""
    total = sum(size for _, size in observations)
    return sum(size for key, size in observations if key < split) / total


def best_split_share(observations: list[tuple[bytes, int]]) -> float:
    """The share before the best split of these observations (nearest one half, lower half non-empty)."""
    merged: dict[bytes, int] = {}
    for key, size in observations:
        merged[key] = merged.get(key, 0) + size
    weights = [merged[key] for key in sorted(merged) if merged[key] > 0]
    before = list(accumulate(weights, initial=0))
    total = before[-1]
    return min((before[s] / total for s in range(1, len(weights))), key=lambda share: abs(share - 0.5))
