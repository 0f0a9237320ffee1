"""Scan items, in key order, folded into the partitions of a source dataset.

A partition is a directory under the connector's root (`Discovery.keys`, e.g.
`date={date:date}`); its items are the keys below it. Keys sharing a prefix are
contiguous in key order, so a partition is complete as soon as the scan lists a
key outside it, and only the open partition is held, as a running digest: memory
does not grow with the number of files in a partition or of partitions.

`PartitionAssembler` folds items into `FoundPartition`s (ref, directory, files, bytes,
a digest of every file's name, version and size; strong only if every file's
version is; complete if the marker was there); `settled_key` is the cursor to record.
With `stamps` (a source that confirms content), the newest change stamp of its
items goes into the version too: a file's ctime, which any write sets to now, past
every earlier one, so a write that puts size and mtime back still moves the
version (one comparison per item: the pass over unchanged files stays as cheap).
The version without it is kept beside it (`unstamped_version`), since partitions
observed before stamps carry that one.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import blake3

from partbuild.orchestrator.connectors.items import ScanItem
from partbuild.orchestrator.graph import GraphError, PartitionPattern


@dataclass(frozen=True, slots=True)
class FoundPartition:
    """A partition directory the scan listed completely."""

    ref: str
    directory: str  # relative to the connector's root
    items: int
    bytes: int
    version: str  # a digest of every item's name, version and size
    strong: bool  # every item's version was strong (a content hash or an ETag)
    complete: bool  # the completeness marker was among its items (always, without a marker)
    unstamped_version: str | None = None  # with change stamps: the version without them (as before stamps)


_NO_STAMP = -(1 << 63)  # below every change stamp (an int64 of ns)


class _Open:
    __slots__ = ("bytes", "digest", "directory", "fields", "items", "last_key", "marked", "stamp", "strong")

    def __init__(self, directory: str, fields: dict[str, object]) -> None:
        self.directory = directory
        self.fields = fields
        self.digest = blake3.blake3()
        self.stamp = _NO_STAMP  # the newest change stamp of its items
        self.items = 0
        self.bytes = 0
        self.strong = True
        self.marked = False
        self.last_key = b""


def _framed(data: bytes) -> bytes:
    return len(data).to_bytes(4, "big") + data


class PartitionAssembler:
    """Feed items in key order; get each partition once the scan has moved past it.

    `settled_key` is the last key everything up to which is accounted for (in a
    partition handed out, or outside every partition): the cursor to record, since
    a scan resumed after it lists the open partition again from its first item.
    """

    def __init__(
        self, keys: PartitionPattern, refs: PartitionPattern, marker: str | None, *, stamps: bool = False
    ) -> None:
        if set(keys.fields) != set(refs.fields):
            raise GraphError(
                f"key pattern {keys.template!r} must have the fields of {refs.template!r}: "
                f"{sorted(keys.fields)} != {sorted(refs.fields)}"
            )
        self._keys = keys
        self._refs = refs
        self._marker = marker
        self._stamps = stamps
        self._depth = keys.template.count("/") + 1
        self._open: _Open | None = None
        self.settled_key = b""
        self.unmatched = 0  # items outside every partition (other files, undecodable names)

    def feed(self, items: Iterable[ScanItem]) -> list[FoundPartition]:
        """Take the next items; return the partitions they closed."""
        closed: list[FoundPartition] = []
        for item in items:
            raw = item.key.raw_bytes()
            current = self._open
            split = self._split(raw)
            if split is None:
                self._close(closed)
                self._outside(raw)
                continue
            directory, name = split
            if current is None or current.directory != directory:
                self._close(closed)
                fields = self._keys.match(directory)
                if fields is None:
                    self._outside(raw)
                    continue
                current = self._open = _Open(directory, fields)
            current.digest.update(_framed(name.encode()) + _framed(item.version.value))
            current.digest.update(b"s" if item.version.is_strong else b"w")
            current.digest.update(item.size.to_bytes(8, "big"))
            if self._stamps and item.change_stamp is not None and item.change_stamp > current.stamp:
                current.stamp = item.change_stamp
            current.items += 1
            current.bytes += item.size
            current.strong = current.strong and item.version.is_strong
            current.marked = current.marked or name == self._marker
            current.last_key = raw
        return closed

    def _split(self, raw: bytes) -> tuple[str, str] | None:
        """(partition directory candidate, the rest of the key), or None for a key too shallow or not UTF-8."""
        depth = self._depth
        try:
            parts = raw.decode("utf-8").split("/", depth)
        except UnicodeDecodeError:
            return None
        if len(parts) <= depth or not parts[depth]:
            return None
        return "/".join(parts[:depth]), parts[depth]

    def partition_start(self, key: bytes) -> bytes:
        """The least key of the partition holding `key` (its directory and a slash); `key` itself outside one.

        A key range boundary there never cuts a partition in two.
        """
        split = self._split(key)
        if split is None or self._keys.match(split[0]) is None:
            return key
        return (split[0] + "/").encode()

    def finish(self) -> list[FoundPartition]:
        """The scan listed everything: close the open partition."""
        closed: list[FoundPartition] = []
        self._close(closed)
        return closed

    def _outside(self, raw: bytes) -> None:
        self.unmatched += 1
        self.settled_key = raw

    def _close(self, closed: list[FoundPartition]) -> None:
        partition = self._open
        if partition is None:
            return
        self._open = None
        self.settled_key = partition.last_key
        version = unstamped = partition.digest.hexdigest()[:32]
        if partition.stamp != _NO_STAMP:
            stamp = partition.stamp.to_bytes(8, "big", signed=True)
            version = blake3.blake3(version.encode() + stamp).hexdigest()[:32]
        closed.append(
            FoundPartition(
                ref=self._refs.format(**partition.fields),
                directory=partition.directory,
                items=partition.items,
                bytes=partition.bytes,
                version=version,
                strong=partition.strong,
                complete=self._marker is None or partition.marked,
                unstamped_version=unstamped if version != unstamped else None,
            )
        )
