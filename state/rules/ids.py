"""Deterministic identifiers derived from the log position.

The fold never draws random numbers: an instance UUID is a UUIDv5 of the seq of
the event that created it and the ref, so every replay reproduces it exactly.
"""

from __future__ import annotations

import hashlib
import uuid

# Fixed namespace for partbuild instance UUIDs (itself uuid5(NAMESPACE_URL, "partbuild:instance")).
INSTANCE_NAMESPACE = uuid.uuid5(uuid.NAMESPACE_URL, "partbuild:instance")
# SHA-1 state after hashing the namespace; copying it skips re-hashing 16 bytes per UUID.
_NAMESPACE_SHA1 = hashlib.sha1(INSTANCE_NAMESPACE.bytes)
# Hex digit -> the same digit with its top two bits set to 10 (8, 9, a or b).
_VARIANT_DIGIT = {digit: "89ab"[int(digit, 16) & 3] for digit in "0123456789abcdef"}


def instance_uuid(seq: int, ref: str) -> str:
    """The UUID of the instance of `ref` created by the event at `seq`.

    Equal to `str(uuid.uuid5(INSTANCE_NAMESPACE, f"{seq}/{ref}"))`, computed
    without building a `uuid.UUID` object because replay calls it once per instance.
    """
    sha1 = _NAMESPACE_SHA1.copy()
    sha1.update(f"{seq}/{ref}".encode())
    h = sha1.hexdigest()
    # Version 5 in the 13th hex digit; the RFC 4122 variant (10xx) in the top bits of the 17th.
    return f"{h[:8]}-{h[8:12]}-5{h[13:16]}-{_VARIANT_DIGIT[h[16]]}{h[17:20]}-{h[20:32]}"
