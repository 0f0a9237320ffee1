"""The connector contract: what a connector can do (`Capabilities`, all false by default) and the methods it offers.

An ordered connector lists a source's items in strictly increasing key order,
a page at a time, within budgets, and can resume from the last key it
emitted. `fill_page` returns a non-empty page or None when nothing in the
range is left; it raises `EnumerateError`. Reads raise `ReadError`.

Budgets: a page holds at most `max_items` items and at most `max_bytes` bytes
by size hint, except that the first item of a page is emitted even when its
size alone exceeds `max_bytes` (otherwise an item larger than the budget would
stall the scan forever). A deadline ends a page early; a call whose deadline
has already passed raises a retryable error.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import BinaryIO, Protocol, runtime_checkable

from partbuild.orchestrator.connectors.items import ConnectorTag, Page
from partbuild.orchestrator.connectors.paging import Budgets, Cursor, KeyRange
from partbuild.orchestrator.connectors.toxic import ItemKey, ItemRef


@dataclass(frozen=True, slots=True)
class Capabilities:
    """Optional features a connector advertises; none by default."""

    seek_by_key: bool = False  # can resume at any key, not only at the cursor it handed out
    token_resume: bool = False  # hands out resume tokens and uses them when they are valid
    range_read: bool = False  # serves byte ranges of an item
    split_hints: bool = False  # choose_split_point can answer

    def __post_init__(self) -> None:
        for name in ("seek_by_key", "token_resume", "range_read", "split_hints"):
            if type(getattr(self, name)) is not bool:
                raise TypeError(f"Capabilities.{name} must be a bool")


@runtime_checkable
class Connector(Protocol):
    """An ordered source of items. One instance serves one caller at a time."""

    tag: ConnectorTag

    def capabilities(self) -> Capabilities: ...

    def fill_page(self, key_range: KeyRange, cursor: Cursor, budgets: Budgets) -> Page | None:
        """The next items of `key_range` after `cursor`, or None when none are left."""
        ...

    def choose_split_point(self, key_range: KeyRange, cursor: Cursor, budgets: Budgets) -> ItemKey | None:
        """A key splitting what remains of `key_range` after `cursor` into two halves of about equal bytes.

        The key is above the cursor's last key and the key range's start, below its end; None when the
        remainder cannot be split (fewer than two items) or the connector has no split hints.
        """
        ...

    def open(self, item_ref: ItemRef, budgets: Budgets) -> BinaryIO:
        """A reader of the whole item; reading more than `budgets.max_bytes` raises ReadError."""
        ...

    def read_range(self, item_ref: ItemRef, offset: int, length: int, budgets: Budgets) -> bytes:
        """At most `min(length, budgets.max_bytes)` bytes from `offset`; b"" past the end."""
        ...
