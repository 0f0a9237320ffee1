"""What a scan emits: items (key, ref, stable id, version, size, location) in non-empty pages.

`ScanItem`: an `ItemKey`, an `ItemRef`, a `StableItemId` (BLAKE3 keyed by its
`ConnectorTag`'s derived key: the same key under two connectors gives two ids), a
strong or weak `Version`, a size hint, an optional `Location` and, for weak versions,
an optional change stamp (a file's ctime: moved by any write, even one that puts the
version back; a reason to confirm the content, never a version on its own). `Page`: never
empty, keys strictly increasing, with the cursor to resume from (an optional token).
"""

from __future__ import annotations

import enum
import itertools
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Self

import blake3

from partbuild.orchestrator.connectors.paging import Cursor
from partbuild.orchestrator.connectors.toxic import ItemKey, ItemRef, ResumeToken

# BLAKE3's derive_key mode wants a hard-coded, globally unique context string.
_ITEM_ID_CONTEXT = "partbuild 2026 connectors stable item id v1"
_TAG_PATTERN = re.compile(r"[a-z][a-z0-9_-]{0,31}")
MAX_VERSION_BYTES = 256
MAX_LOCATION_CHARS = 2048


@dataclass(frozen=True, slots=True)
class ConnectorTag:
    """A connector type's name in item ids: the same key under two connectors gives two ids."""

    name: str

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _TAG_PATTERN.fullmatch(self.name):
            raise ValueError("a ConnectorTag is 1..32 chars of [a-z0-9_-], starting with a letter")

    def id_key(self) -> bytes:
        """The 32-byte BLAKE3 key this tag's item ids are derived with."""
        return blake3.blake3(self.name.encode("ascii"), derive_key_context=_ITEM_ID_CONTEXT).digest()


@dataclass(frozen=True, slots=True, order=True)
class StableItemId:
    """A 32-byte id of one item of one connector type, stable across scans (keyed BLAKE3 of the key).

    Shown in full hex: it is a keyed digest, not source bytes.
    """

    digest: bytes

    def __post_init__(self) -> None:
        if not isinstance(self.digest, bytes) or len(self.digest) != 32:
            raise ValueError("a StableItemId is 32 bytes")

    @classmethod
    def derive(cls, tag: ConnectorTag, key: ItemKey) -> Self:
        return cls(blake3.blake3(key.raw_bytes(), key=tag.id_key()).digest())

    def hex(self) -> str:
        return self.digest.hex()

    def __repr__(self) -> str:
        return f"StableItemId({self.digest.hex()[:16]}..)"


class VersionStrength(enum.Enum):
    STRONG = "strong"  # changes exactly when the content does: a content hash, an ETag of a simple upload
    WEAK = "weak"  # best effort from metadata (size + mtime): a rewrite within the clock's resolution may hide


def metadata_value(size: int, mtime_ns: int) -> bytes:
    """The value of a weak version from a file's size and modification time."""
    return f"size={size};mtime_ns={mtime_ns}".encode("ascii")


@dataclass(frozen=True, slots=True)
class Version:
    """An item's version as its connector sees it; compare only versions of the same strength."""

    strength: VersionStrength
    value: bytes

    def __post_init__(self) -> None:
        if not isinstance(self.strength, VersionStrength):
            raise TypeError(f"strength must be a VersionStrength, not {type(self.strength).__name__}")
        if not isinstance(self.value, bytes) or not 1 <= len(self.value) <= MAX_VERSION_BYTES:
            raise ValueError(f"a Version value is 1..{MAX_VERSION_BYTES} bytes")

    @classmethod
    def strong(cls, value: bytes) -> Self:
        return cls(VersionStrength.STRONG, value)

    @classmethod
    def from_content(cls, content: bytes) -> Self:
        """A strong version: the BLAKE3 digest of the whole content."""
        return cls.strong(blake3.blake3(content).digest())

    @classmethod
    def from_metadata(cls, size: int, mtime_ns: int) -> Self:
        """A weak version from a file's size and modification time."""
        for name, number in (("size", size), ("mtime_ns", mtime_ns)):
            if isinstance(number, bool) or not isinstance(number, int):
                raise TypeError(f"{name} must be an int, not {type(number).__name__}")
        return cls(VersionStrength.WEAK, metadata_value(size, mtime_ns))

    @property
    def is_strong(self) -> bool:
        return self.strength is VersionStrength.STRONG

    def __repr__(self) -> str:
        # An ETag or a metadata string is not a secret, but it is source text: a digest says enough.
        return f"Version({self.strength.value}, hash={blake3.blake3(self.value).hexdigest()[:8]}..)"


@dataclass(frozen=True, slots=True)
class Location:
    """Where an item is, for people (UI, logs): a display text and an optional URL. Must not hold secrets."""

    display: str
    url: str | None = None

    def __post_init__(self) -> None:
        for name, text in (("display", self.display), ("url", self.url)):
            if text is None and name == "url":
                continue
            if not isinstance(text, str) or not 1 <= len(text) <= MAX_LOCATION_CHARS:
                raise ValueError(f"Location.{name} is a str of 1..{MAX_LOCATION_CHARS} chars")


def _check_size(size_hint: object) -> None:
    if size_hint is None:
        return
    if isinstance(size_hint, bool) or not isinstance(size_hint, int):
        raise TypeError(f"size_hint must be an int or None, not {type(size_hint).__name__}")
    if size_hint < 0:
        raise ValueError(f"size_hint must be at least 0, got {size_hint}")


@dataclass(frozen=True, slots=True)
class ScanItem:
    """One item of a scan. `size_hint` counts against a page's byte budget (None counts as 0)."""

    key: ItemKey
    ref: ItemRef
    item_id: StableItemId
    version: Version
    size_hint: int | None = None
    location: Location | None = None
    change_stamp: int | None = None  # with a weak version: moves whenever the item is written (a file's ctime)

    def __post_init__(self) -> None:
        for name, value, kind in (
            ("key", self.key, ItemKey),
            ("ref", self.ref, ItemRef),
            ("item_id", self.item_id, StableItemId),
            ("version", self.version, Version),
        ):
            if not isinstance(value, kind):
                raise TypeError(f"ScanItem.{name} must be {kind.__name__}, not {type(value).__name__}")
        _check_size(self.size_hint)
        if self.location is not None and not isinstance(self.location, Location):
            raise TypeError(f"ScanItem.location must be Location or None, not {type(self.location).__name__}")
        stamp = self.change_stamp
        if stamp is not None and (isinstance(stamp, bool) or not isinstance(stamp, int)):
            raise TypeError(f"ScanItem.change_stamp must be an int or None, not {type(stamp).__name__}")

    @property
    def size(self) -> int:
        return self.size_hint or 0


class Page:
    """A non-empty run of items in strictly increasing key order, and the token to resume after it.

    There is no empty page: a connector with nothing left returns None ("done").
    """

    __slots__ = ("items", "token")

    items: tuple[ScanItem, ...]
    token: ResumeToken | None

    def __init__(self, items: Iterable[ScanItem], token: ResumeToken | None = None) -> None:
        held = tuple(items)
        if not held:
            raise ValueError("a Page is never empty: return None when the key range is done")
        for item in held:
            if not isinstance(item, ScanItem):
                raise TypeError(f"a Page holds ScanItems, not {type(item).__name__}")
        if any(not a.key < b.key for a, b in itertools.pairwise(held)):
            raise ValueError("a Page's keys must strictly increase")
        if token is not None and not isinstance(token, ResumeToken):
            raise TypeError(f"a Page's token must be a ResumeToken or None, not {type(token).__name__}")
        self.items = held
        self.token = token

    @property
    def last_key(self) -> ItemKey:
        return self.items[-1].key

    @property
    def cursor(self) -> Cursor:
        """Where the next call resumes."""
        return Cursor(self.last_key, self.token)

    @property
    def total_size(self) -> int:
        return sum(item.size for item in self.items)

    def __len__(self) -> int:
        return len(self.items)

    def __repr__(self) -> str:
        return f"Page(items={len(self.items)}, last_key={self.last_key!r}, token={self.token!r})"
