"""`InMemoryConnector`: a deterministic connector over items held in memory.

The reference for the contract and a fixture for tests and simulations. Items
are sorted once; a page resumes by binary search from the cursor's last key.
With `tokens=True` it also hands out resume tokens (the next index, bound to
the digest of the key before it) and uses one only when it still matches the
cursor's last key; a corrupt or stale token falls back to the key, which is
always authoritative. Split points are exact byte-weighted medians from
prefix sums: the whole data set is in memory anyway.
"""

from __future__ import annotations

import bisect
import io
import itertools
import struct
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import BinaryIO

import blake3

from partbuild.orchestrator.connectors.contract import Capabilities
from partbuild.orchestrator.connectors.errors import EnumerateError, ReadError
from partbuild.orchestrator.connectors.items import ConnectorTag, Page, ScanItem, StableItemId, Version
from partbuild.orchestrator.connectors.paging import Budgets, Cursor, KeyRange, check_byte_range
from partbuild.orchestrator.connectors.toxic import ItemKey, ItemRef, ResumeToken

IN_MEMORY_TAG = ConnectorTag("inmem")
_TOKEN_MAGIC = b"pbim1"
_TOKEN = struct.Struct(">5sQ8s")  # magic, index of the next item, digest prefix of the key before it


@dataclass(frozen=True, slots=True)
class MemoryItem:
    """One item to serve: its key, its content, and its ref (the key's bytes unless given)."""

    key: ItemKey
    data: bytes
    ref: ItemRef | None = None


def _check_budgets(budgets: object) -> Budgets:
    if not isinstance(budgets, Budgets):
        raise TypeError(f"budgets must be Budgets, not {type(budgets).__name__}")
    return budgets


class InMemoryConnector:
    """Serves sorted in-memory items through the connector contract."""

    def __init__(
        self,
        items: Iterable[MemoryItem],
        *,
        tag: ConnectorTag = IN_MEMORY_TAG,
        tokens: bool = False,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        held = sorted(items, key=lambda item: item.key)
        if any(a.key == b.key for a, b in itertools.pairwise(held)):
            raise ValueError("InMemoryConnector: two items share a key")
        self.tag = tag
        self._tokens = tokens
        self._clock = clock
        self._keys = [item.key for item in held]
        self._scan_items = [self._scan_item(item) for item in held]
        self._data = {(item.ref or ItemRef(item.key.raw_bytes())): item.data for item in held}
        if len(self._data) != len(held):
            raise ValueError("InMemoryConnector: two items share a ref")
        # _prefix[i] = bytes of items [0, i): a range's bytes in O(1), its byte median by bisect.
        self._prefix = list(itertools.accumulate((len(item.data) for item in held), initial=0))

    def _scan_item(self, item: MemoryItem) -> ScanItem:
        ref = item.ref or ItemRef(item.key.raw_bytes())
        item_id = StableItemId.derive(self.tag, item.key)
        return ScanItem(item.key, ref, item_id, Version.from_content(item.data), len(item.data))

    def capabilities(self) -> Capabilities:
        return Capabilities(seek_by_key=True, token_resume=self._tokens, range_read=True, split_hints=True)

    # -- enumeration

    def fill_page(self, key_range: KeyRange, cursor: Cursor, budgets: Budgets) -> Page | None:
        """The next items of `key_range` after `cursor`, within budgets; None when none are left."""
        start, end = self._remaining(key_range, cursor)
        if start >= end:
            return None
        budgets = _check_budgets(budgets)
        if budgets.expired(self._clock()):
            raise EnumerateError.retryable("deadline passed before the page started")
        taken: list[ScanItem] = []
        used = 0
        for index in range(start, min(end, start + budgets.max_items)):
            item = self._scan_items[index]
            # Progress rule: the first item goes out even if it alone exceeds max_bytes.
            if taken and (used + item.size > budgets.max_bytes or budgets.expired(self._clock())):
                break
            taken.append(item)
            used += item.size
        return Page(taken, self._token_after(start + len(taken)))

    def choose_split_point(self, key_range: KeyRange, cursor: Cursor, budgets: Budgets) -> ItemKey | None:
        """The key nearest the byte midpoint of what remains; it starts the upper half."""
        _check_budgets(budgets)
        start, end = self._remaining(key_range, cursor)
        if end - start < 2:
            return None
        prefix = self._prefix
        target = (prefix[start] + prefix[end]) / 2
        # The upper half starts at index s in [start+1, end-1]; its lower half holds prefix[s] - prefix[start].
        upper = min(max(bisect.bisect_left(prefix, target, start + 1, end), start + 1), end - 1)
        lower = max(upper - 1, start + 1)
        best = min((lower, upper), key=lambda s: (abs(prefix[s] - target), s))
        return self._keys[best]

    def _remaining(self, key_range: KeyRange, cursor: Cursor) -> tuple[int, int]:
        if not isinstance(key_range, KeyRange):
            raise TypeError(f"key_range must be KeyRange, not {type(key_range).__name__}")
        if not isinstance(cursor, Cursor):
            raise TypeError(f"cursor must be Cursor, not {type(cursor).__name__}")
        start = 0 if key_range.start is None else bisect.bisect_left(self._keys, key_range.start)
        end = len(self._keys) if key_range.end is None else bisect.bisect_left(self._keys, key_range.end)
        if cursor.last_key is not None:
            start = max(start, self._resume_index(cursor))
        return start, end

    def _resume_index(self, cursor: Cursor) -> int:
        assert cursor.last_key is not None
        from_token = self._index_from_token(cursor)
        if from_token is not None:
            return from_token
        return bisect.bisect_right(self._keys, cursor.last_key)  # key-authoritative

    # -- tokens

    def _token_after(self, next_index: int) -> ResumeToken | None:
        if not self._tokens:
            return None
        before = self._keys[next_index - 1].raw_bytes()
        return ResumeToken(_TOKEN.pack(_TOKEN_MAGIC, next_index, blake3.blake3(before).digest()[:8]))

    def _index_from_token(self, cursor: Cursor) -> int | None:
        """The index a token names, when it is well formed and agrees with the cursor's last key."""
        if not self._tokens or cursor.token is None or cursor.last_key is None:
            return None
        raw = cursor.token.raw_bytes()
        if len(raw) != _TOKEN.size:
            return None
        magic, index, check = _TOKEN.unpack(raw)
        if magic != _TOKEN_MAGIC or not 1 <= index <= len(self._keys):
            return None
        before = self._keys[index - 1]
        if before != cursor.last_key or blake3.blake3(before.raw_bytes()).digest()[:8] != check:
            return None  # stale (another position) or forged: the key decides
        return index

    # -- reads

    def _content(self, item_ref: ItemRef, budgets: Budgets) -> bytes:
        if not isinstance(item_ref, ItemRef):
            raise TypeError(f"item_ref must be ItemRef, not {type(item_ref).__name__}")
        if _check_budgets(budgets).expired(self._clock()):
            raise ReadError.retryable("deadline passed before the read started")
        data = self._data.get(item_ref)
        if data is None:
            raise ReadError.permanent("no item has this ref")  # never quote the ref
        return data

    def open(self, item_ref: ItemRef, budgets: Budgets) -> BinaryIO:
        """The whole item; refused when it is larger than `max_bytes`."""
        data = self._content(item_ref, budgets)
        if len(data) > budgets.max_bytes:
            raise ReadError.permanent(f"item of {len(data)} bytes exceeds max_bytes={budgets.max_bytes}")
        return io.BytesIO(data)

    def read_range(self, item_ref: ItemRef, offset: int, length: int, budgets: Budgets) -> bytes:
        """Bytes [offset, offset + min(length, max_bytes)) of the item; b"" past its end."""
        check_byte_range(offset, length)
        data = self._content(item_ref, budgets)
        return data[offset : offset + min(length, budgets.max_bytes)]
