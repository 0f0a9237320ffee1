"""Partition ref validation: the one rule every writer and the fold share."""

from __future__ import annotations

import re

MAX_REF_BYTES = 4096
# C0 and C1 control characters and DEL: invisible in logs and terminals, never meaningful in a ref.
# A character class body in the syntax Python and ECMA-262 (the OpenAPI document's pattern) share.
CONTROL_CHARACTERS = r"\x00-\x1f\x7f-\x9f"
_CONTROL = re.compile(f"[{CONTROL_CHARACTERS}]")


def ref_problem(ref: str) -> str | None:
    """Say what is wrong with a partition ref, or None when it is valid."""
    if not ref:
        return "partition ref is empty"
    # len(ref) is a cheap lower bound of the UTF-8 size; encode only when it may be too long.
    if len(ref) * 4 > MAX_REF_BYTES and len(ref.encode("utf-8", "surrogatepass")) > MAX_REF_BYTES:
        return f"partition ref is longer than {MAX_REF_BYTES} bytes of UTF-8"
    if ref.isprintable():  # no control character (they are not printable): the common case, without a regex
        return None
    match = _CONTROL.search(ref)
    if match is not None:
        return f"partition ref contains control character {match.group()!r} at position {match.start()}"
    return None
