"""How bytes from outside (connector keys, tokens) are shown: never raw.

`redacted("ItemKey", data)` is `ItemKey(len=N, hash=XXXXXXXX..)`: the first four
bytes of a BLAKE3 digest tell two values apart in a log or an API answer and say
nothing more. The connector value types (`orchestrator/connectors/toxic.py`) and
the fold's record of a source scan print themselves this way.
"""

from __future__ import annotations

import blake3

DIGEST_HEX_CHARS = 8  # 32 bits: tells values apart in a log, too short to be a useful fingerprint


def digest_prefix(data: bytes) -> str:
    """The hex prefix of the BLAKE3 digest of `data` that redacted texts show."""
    return blake3.blake3(data).hexdigest()[:DIGEST_HEX_CHARS]


def redacted(kind: str, data: bytes) -> str:
    """`kind(len=N, hash=XXXXXXXX..)`, or `None` text for no bytes at all."""
    if not data:
        return "None"
    return f"{kind}(len={len(data)}, hash={digest_prefix(data)}..)"
