"""What reads as of a seq share: pages that say their seq, the cursors such a page gives, messages.

A paged list's cursor is the key of a page's last item; with the same
`as_of_seq`, the next page continues the same list as of the same seq, and a
cursor naming an item created after that seq is no cursor of that list.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from partbuild.api.models.common import PageOut


def page_at(items: list[Any], limit: int, key: Callable[[Any], str], as_of_seq: int) -> PageOut[Any]:
    """A page of `items` as of `as_of_seq`, with the cursor of the next one when it is full."""
    return PageOut(items=items, next_cursor=key(items[-1]) if len(items) == limit else None, as_of_seq=as_of_seq)


def by(created_seq: int, as_of_seq: int | None) -> bool:
    """Whether something created at `created_seq` exists as of `as_of_seq` (None: now)."""
    return as_of_seq is None or created_seq <= as_of_seq


def as_of_suffix(as_of_seq: int | None) -> str:
    """ " as of seq N" for a message about a read as of N, else nothing."""
    return "" if as_of_seq is None else f" as of seq {as_of_seq}"
