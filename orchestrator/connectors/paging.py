"""Paging vocabulary: where a scan is (cursor), how much one call may do (budgets), which keys (range).

The cursor's last key is the only durable resume point. A token is a
connector's shortcut (a continuation marker of its own) and may be lost,
stale or corrupt: the connector must then resume from the last key alone.
That is why a token without a last key cannot be built.

`Cursor` (last key, optional token), `Budgets` (max items, max bytes, an optional
monotonic deadline; strict ints, zero refused), `KeyRange` (a key range of a scan:
`[start, end)`, either end open).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Self

from partbuild.orchestrator.connectors.toxic import ItemKey, ResumeToken


def _check_instance(name: str, value: object, kind: type | tuple[type, ...], optional: bool = False) -> None:
    if optional and value is None:
        return
    if not isinstance(value, kind):
        expected = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
        raise TypeError(f"{name} must be {expected}{' or None' if optional else ''}, not {type(value).__name__}")


@dataclass(frozen=True, slots=True)
class Cursor:
    """How far a scan got: the last key emitted, and optionally the connector's resume token."""

    last_key: ItemKey | None = None
    token: ResumeToken | None = None

    def __post_init__(self) -> None:
        _check_instance("Cursor.last_key", self.last_key, ItemKey, optional=True)
        _check_instance("Cursor.token", self.token, ResumeToken, optional=True)
        if self.token is not None and self.last_key is None:
            raise ValueError("a Cursor with a token needs a last_key: the last key is the durable resume point")

    @classmethod
    def initial(cls) -> Self:
        """Before the first item."""
        return cls()

    @classmethod
    def after(cls, last_key: ItemKey, token: ResumeToken | None = None) -> Self:
        return cls(last_key, token)

    def without_token(self) -> Cursor:
        """The key-only cursor every connector must accept."""
        return Cursor(self.last_key)


def _check_count(name: str, value: object) -> int:
    # Strict: bool is an int subclass and "10" is not a count.
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, not {type(value).__name__}")
    if value < 1:
        raise ValueError(f"{name} must be at least 1, got {value}")
    return value


@dataclass(frozen=True, slots=True)
class Budgets:
    """The most one call may do: items, bytes (by size hint) and an optional deadline.

    `deadline` is a `time.monotonic()`-style instant; connectors take the clock
    as a parameter so tests control time.
    """

    max_items: int
    max_bytes: int
    deadline: float | None = None

    def __post_init__(self) -> None:
        _check_count("max_items", self.max_items)
        _check_count("max_bytes", self.max_bytes)
        if self.deadline is not None:
            if isinstance(self.deadline, bool) or not isinstance(self.deadline, int | float):
                kind = type(self.deadline).__name__
                raise TypeError(f"deadline must be a number (monotonic seconds) or None, not {kind}")
            if math.isnan(self.deadline):
                raise ValueError("deadline must not be NaN")

    def expired(self, now: float) -> bool:
        return self.deadline is not None and now >= self.deadline


@dataclass(frozen=True, slots=True)
class KeyRange:
    """A key range of a scan: the keys in [start, end); `None` leaves that end open."""

    start: ItemKey | None = None
    end: ItemKey | None = None

    def __post_init__(self) -> None:
        _check_instance("KeyRange.start", self.start, ItemKey, optional=True)
        _check_instance("KeyRange.end", self.end, ItemKey, optional=True)
        if self.start is not None and self.end is not None and not self.start < self.end:
            raise ValueError("KeyRange needs start < end (the range is half-open, so start == end is empty)")

    @classmethod
    def everything(cls) -> Self:
        return cls()

    def __contains__(self, key: object) -> bool:
        if not isinstance(key, ItemKey):
            return False
        return (self.start is None or key >= self.start) and (self.end is None or key < self.end)


def check_byte_range(offset: object, length: object) -> None:
    """The arguments of a range read: ints (not bools, not "10"), neither below zero."""
    for name, number in (("offset", offset), ("length", length)):
        if isinstance(number, bool) or not isinstance(number, int):
            raise TypeError(f"{name} must be an int, not {type(number).__name__}")
        if number < 0:
            raise ValueError(f"{name} must be at least 0, got {number}")
