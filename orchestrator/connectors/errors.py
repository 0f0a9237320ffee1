"""What a connector raises: errors classed retryable or permanent, with an optional delay.

A connector's message often quotes its source (an HTTP body, an OS error), so
control and format characters are removed before the message is stored: a
source cannot forge log lines (newlines) or reorder what a terminal shows
(bidirectional overrides). Messages are also bounded, so one error cannot flood
a log. Connectors must still keep raw keys, refs and tokens out of messages:
sanitizing removes characters, not secrets.
"""

from __future__ import annotations

import enum
import math
import unicodedata
from typing import Self

MAX_MESSAGE_CHARS = 1024


class ErrorClass(enum.Enum):
    """Whether the same request may succeed later."""

    RETRYABLE = "retryable"  # transient: timeouts, throttling, a server's 503
    PERMANENT = "permanent"  # will not succeed until something outside changes: 403, 404, a malformed ref


def sanitize_message(message: str) -> str:
    """The message without control/format characters (Unicode category C*), bounded in length."""
    if not isinstance(message, str):
        raise TypeError(f"an error message must be a str, not {type(message).__name__}")
    kept = "".join(ch for ch in message if not unicodedata.category(ch).startswith("C"))
    if len(kept) > MAX_MESSAGE_CHARS:
        kept = kept[: MAX_MESSAGE_CHARS - 3] + "..."
    return kept


def _check_retry_after(retry_after: float | None) -> float | None:
    if retry_after is None:
        return None
    if isinstance(retry_after, bool) or not isinstance(retry_after, int | float):
        raise TypeError(f"retry_after must be a number of seconds, not {type(retry_after).__name__}")
    if not math.isfinite(retry_after) or retry_after < 0:
        raise ValueError(f"retry_after must be finite and at least 0, got {retry_after}")
    return float(retry_after)


class ConnectorError(Exception):
    """A connector's failure: its class, a sanitized message, an optional delay in seconds before a retry."""

    def __init__(self, error_class: ErrorClass, message: str, retry_after: float | None = None) -> None:
        if not isinstance(error_class, ErrorClass):
            raise TypeError(f"error_class must be an ErrorClass, not {type(error_class).__name__}")
        self.error_class = error_class
        self.message = sanitize_message(message)
        self.retry_after = _check_retry_after(retry_after)
        if self.retry_after is not None and error_class is ErrorClass.PERMANENT:
            raise ValueError("a permanent error has no retry_after: retrying will not help")
        super().__init__(self.message)

    @property
    def is_retryable(self) -> bool:
        return self.error_class is ErrorClass.RETRYABLE

    @classmethod
    def retryable(cls, message: str) -> Self:
        """A retryable failure with no advice on when."""
        return cls(ErrorClass.RETRYABLE, message)

    @classmethod
    def rate_limited(cls, message: str, retry_after: float) -> Self:
        """The source asked to slow down: retryable after `retry_after` seconds."""
        if retry_after is None:
            raise ValueError("rate_limited needs a retry_after")
        return cls(ErrorClass.RETRYABLE, message, retry_after)

    @classmethod
    def permanent(cls, message: str) -> Self:
        return cls(ErrorClass.PERMANENT, message)

    def __str__(self) -> str:
        delay = "" if self.retry_after is None else f", retry after {self.retry_after:g}s"
        return f"{self.error_class.value}{delay}: {self.message}"

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.error_class.value}, {self.message!r}, retry_after={self.retry_after})"


class EnumerateError(ConnectorError):
    """Listing a source failed (fill a page, choose a split point)."""


class ReadError(ConnectorError):
    """Opening or reading an item failed."""

    @classmethod
    def unsupported(cls, feature: str) -> Self:
        """The connector does not have this capability: asking again will not help."""
        return cls.permanent(f"unsupported: {feature}")
