"""Deterministic HMAC-MD5 bucketing of the partition space (seed 000)."""

from __future__ import annotations

import hashlib
import hmac


def bucket(key: str, data: str, bucket_total: int) -> int:
    """The 1-based bucket of `data` under namespace `key`: HMAC-MD5's first 32 bits modulo the total, plus one."""
    digest = hmac.new(key.encode("utf-8"), data.encode("utf-8"), hashlib.md5).digest()
    return int.from_bytes(digest[:4], "big") % bucket_total + 1
