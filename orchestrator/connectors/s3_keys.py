"""Where an S3 listing starts (StartAfter) for a cursor and a key range, and the resume tokens handed out.

S3 lists keys in ascending UTF-8 binary order, which is the byte order of
`ItemKey` (the relative key's UTF-8 bytes; the prefix every key shares does
not change their order). `StartAfter` is exclusive, so:

- after a cursor's last key: StartAfter = prefix + last key, exactly;
- from a key range's (inclusive) start: the greatest string below the start is
  infinite ("...y\\U0010FFFF\\U0010FFFF..."), so StartAfter is the start with
  its last character decremented and `_PAD` appended; the few keys that could
  fall between (ones starting with exactly that) are dropped by the caller,
  which filters every listed key against the bounds anyway.
- a bound that is not valid UTF-8 (no S3 key is) starts after its longest valid
  UTF-8 prefix, which sorts below it; the caller filters the rest.

A resume token is ListObjectsV2's NextContinuationToken, bound (by a BLAKE3
digest) to the bucket, the prefix and the last key it follows: a token that is
corrupt, or belongs to another position or source, fails the check and the
listing starts from the key instead.
"""

from __future__ import annotations

import blake3

from partbuild.orchestrator.connectors.toxic import MAX_RESUME_TOKEN_BYTES, ItemKey, ResumeToken

_PAD = "\U0010ffff" * 4  # the greatest code point, a few times: below the start, above almost any key
_TOKEN_MAGIC = b"pbs3\x01"
_CHECK_BYTES = 8
_HEADER = len(_TOKEN_MAGIC) + _CHECK_BYTES


def valid_utf8_prefix(raw: bytes) -> tuple[str, bool]:
    """The longest prefix of `raw` that decodes as UTF-8, and whether it is all of `raw`."""
    try:
        return raw.decode("utf-8"), True
    except UnicodeDecodeError as error:
        return raw[: error.start].decode("utf-8"), False


def _below(text: str) -> str:
    """A string just below `text` (non-empty) in UTF-8 order: its last character decremented, then padded."""
    last = ord(text[-1])
    if last == 0:
        return text[:-1]
    lower = last - 1
    if 0xD800 <= lower <= 0xDFFF:  # surrogates are not characters: step over them
        lower = 0xD7FF
    return text[:-1] + chr(lower) + _PAD


def start_after(prefix: str, lower: bytes | None, inclusive: bool) -> str | None:
    """The StartAfter for keys (relative to `prefix`) at or above (`inclusive`) or above `lower`; None: from the top."""
    if lower is None:
        return None
    text, whole = valid_utf8_prefix(lower)
    if whole and not inclusive:
        return prefix + text
    if not whole:
        # `text` < `lower`: starting after it includes everything at or above `lower`.
        return prefix + text if text else None
    below = _below(text)
    return prefix + below if below else None


def _check(bucket: str, prefix: str, last_key: ItemKey) -> bytes:
    hasher = blake3.blake3(bucket.encode("utf-8") + b"\x00" + prefix.encode("utf-8") + b"\x00")
    hasher.update(last_key.raw_bytes())
    return hasher.digest()[:_CHECK_BYTES]


def make_token(bucket: str, prefix: str, last_key: ItemKey, continuation: str) -> ResumeToken | None:
    """A resume token carrying S3's continuation token after `last_key`; None if it would be too long."""
    raw = _TOKEN_MAGIC + _check(bucket, prefix, last_key) + continuation.encode("utf-8")
    if len(raw) > MAX_RESUME_TOKEN_BYTES or not continuation:
        return None
    return ResumeToken(raw)


def read_token(bucket: str, prefix: str, last_key: ItemKey, token: ResumeToken) -> str | None:
    """S3's continuation token inside `token` when it was made for this source and `last_key`; else None."""
    raw = token.raw_bytes()
    if len(raw) <= _HEADER or not raw.startswith(_TOKEN_MAGIC):
        return None
    if raw[len(_TOKEN_MAGIC) : _HEADER] != _check(bucket, prefix, last_key):
        return None
    try:
        return raw[_HEADER:].decode("utf-8")
    except UnicodeDecodeError:
        return None
