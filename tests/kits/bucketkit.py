"""The bucket function's reference and test data, for the tests of `bucket_column` (classic and Connect)."""

from __future__ import annotations

import hashlib
import hmac
import random

GITHUB_KEY = "farosai/airbyte-github-source"

# The spec's nine vectors (../shared/seeds/000_bd2cd5cf0c30dd73.txt): (data, bucket_total, bucket).
SPEC_VECTORS = [
    ("facebook/react", 12, 9),
    ("torvalds/linux", 12, 9),
    ("openai/gpt", 7, 3),
    ("openai/evals", 7, 1),
    ("vercel/next.js", 12, 7),
    ("octo-org/hello-world", 10, 6),
    ("octo-org/repo", 10, 4),
    ("myco/frontend", 10, 8),
    ("myco/backend", 10, 7),
]

# Keys of 0, 1, 64 and 65 (just over one MD5 block: hashed first) and 200 bytes, and non-ASCII ones,
# one of them exactly a block (2-byte characters) and one over it (4-byte characters).
KEYS = [
    "",
    "k",
    "k" * 64,
    "k" * 65,
    "partbuild/" * 20,
    GITHUB_KEY,
    "clé/日本/😀",
    "é" * 32,
    "🔑" * 20,
]
TOTALS = [1, 2, 7, 12, 1000, 2**31]

_ALPHABETS = [
    "abcdefghijklmnopqrstuvwxyz0123456789/=-_.",
    "àáâãäåçèéêëìíîïñòóôõöùúûüýÿßœæÀÉÎÕÜ",  # accents: 2 UTF-8 bytes each
    "日本語中文字漢한국어ひらがなカタカナ",  # CJK: 3 bytes
    "😀🎉🚀🧪𝔘𝕟𝖎𐍈🀄",  # outside the BMP: 4 bytes, a surrogate pair in the JVM
]


def reference(key: str, data: str, total: int) -> int:
    """The bucket function as the spec defines it."""
    return int(hmac.new(key.encode(), data.encode(), hashlib.md5).hexdigest()[:8], 16) % total + 1


def sample_strings(count: int, seed: int) -> list[str]:
    """`count` strings or more: every ASCII length 0..200 (MD5's padding boundaries), mixed scripts, 4 KiB."""
    rng = random.Random(seed)
    values = ["x" * n for n in range(201)]
    values += ["a" * 4096, "é" * 2048, "日" * 1365 + "a", "😀" * 1024]  # 4 KiB of UTF-8 each
    while len(values) < count:
        alphabet = "".join(rng.sample(_ALPHABETS, rng.randint(1, len(_ALPHABETS))))
        values.append("".join(rng.choice(alphabet) for _ in range(rng.randint(0, 80))))
    return values
