"""`FilesystemConnector`: the regular files under a root directory, in byte order of their relative paths.

- Keys and refs are relative paths ('/'-separated bytes, any encoding); never
  the host's absolute path. `locations=True` adds a `Location` per item (the
  relative path, and a `file://` URL of the absolute path for Spark); it is off
  by default because the URL is host data the conformance rule keeps out of
  everything an item shows.
- The walk (`fs_walk`) holds one sorted listing per directory on the current
  path: memory is bounded by depth x widest directory, not by the tree's size.
- Resume is key-authoritative and needs no token: each call descends straight
  to the cursor's last key (a bisect per path component) on the live tree.
  Tokens are not handed out; any token a cursor carries is ignored.
- Confined: symlinks are never followed (skipped by the scan, refused by
  reads), FIFOs, sockets and devices are skipped, reads go through `openat`
  with `O_NOFOLLOW` (`fs_read`). Skips are counted in `stats.skipped` by reason
  and reported to `on_skip(path, reason)` when given; a skip passed again by a
  later page may be reported again (at least once).
- Versions are weak, from size and mtime_ns; the ctime is the item's change
  stamp (a write that puts the mtime back still moves it), so the scanner
  confirms by content when either moved. The inode is left out: a restore or a
  copy of the tree changes every inode. `read_range_as_listed` reads a file only
  while it is still the version and stamp the scan listed, so a digest is never
  filed under a version it was not read at.
- Errors: see `fs_errors` (vanished and denied entries are skipped, I/O faults
  fail the call retryable).
"""

from __future__ import annotations

import os
import time
import urllib.parse
from collections.abc import Callable
from typing import BinaryIO

from partbuild.orchestrator.connectors.contract import Capabilities
from partbuild.orchestrator.connectors.errors import EnumerateError, ReadError
from partbuild.orchestrator.connectors.fs_errors import fs_error
from partbuild.orchestrator.connectors.fs_read import bounded_reader, open_confined, pread_exactly
from partbuild.orchestrator.connectors.fs_walk import SkipHook, Walk, WalkStats
from partbuild.orchestrator.connectors.items import (
    MAX_LOCATION_CHARS,
    ConnectorTag,
    Location,
    Page,
    ScanItem,
    StableItemId,
    Version,
    metadata_value,
)
from partbuild.orchestrator.connectors.paging import Budgets, Cursor, KeyRange, check_byte_range
from partbuild.orchestrator.connectors.split_estimator import DEFAULT_CAPACITY, SplitEstimator
from partbuild.orchestrator.connectors.toxic import ItemKey, ItemRef

FILESYSTEM_TAG = ConnectorTag("fslocal")


def _check(name: str, value: object, kind: type) -> None:
    if not isinstance(value, kind):
        raise TypeError(f"{name} must be {kind.__name__}, not {type(value).__name__}")


def _successor(key: bytes) -> bytes:
    """The least byte string above `key`: resuming after a key is seeking to this."""
    return key + b"\x00"


class FilesystemConnector:
    """Serves the regular files under `root` through the connector contract."""

    def __init__(
        self,
        root: str | os.PathLike[str] | bytes,
        *,
        tag: ConnectorTag = FILESYSTEM_TAG,
        locations: bool = False,
        on_skip: SkipHook | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        # Resolved once: the root itself may be reached through symlinks the operator chose; later opens
        # of the resolved path use O_NOFOLLOW, so a root replaced by a symlink afterwards is refused.
        self._root = os.path.realpath(os.fsencode(root))
        if not os.path.isdir(self._root):
            raise ValueError("FilesystemConnector: the root is not a directory")
        self.tag = tag
        self._locations = locations
        self._on_skip = on_skip
        self._clock = clock
        self.stats = WalkStats()

    def capabilities(self) -> Capabilities:
        return Capabilities(seek_by_key=True, token_resume=False, range_read=True, split_hints=True)

    # -- enumeration

    def _walk_from(self, key_range: KeyRange, cursor: Cursor, budgets: Budgets) -> tuple[Walk, bytes | None]:
        """A walk positioned at the first key of `key_range` after `cursor`, and the key range's end."""
        _check("key_range", key_range, KeyRange)
        _check("cursor", cursor, Cursor)
        _check("budgets", budgets, Budgets)
        if budgets.expired(self._clock()):
            raise EnumerateError.retryable("deadline passed before the call started")
        lower = b"" if key_range.start is None else key_range.start.raw_bytes()
        if cursor.last_key is not None:
            lower = max(lower, _successor(cursor.last_key.raw_bytes()))
        walk = Walk(self._root, self.stats, self._on_skip)
        try:
            walk.seek(lower)
        except BaseException:
            walk.close()
            raise
        return walk, None if key_range.end is None else key_range.end.raw_bytes()

    def fill_page(self, key_range: KeyRange, cursor: Cursor, budgets: Budgets) -> Page | None:
        """The next files of `key_range` after `cursor`, within budgets; None when none are left.

        A deadline ends a page early but never before its first item: a long run
        of skipped entries is walked through until one file is found or the key range ends.
        """
        walk, end = self._walk_from(key_range, cursor, budgets)
        taken: list[ScanItem] = []
        used = 0
        with walk:
            while len(taken) < budgets.max_items:
                if taken and budgets.expired(self._clock()):
                    break
                found = walk.next_file(end)
                if found is None:
                    break
                item = self._scan_item(*found)
                # Progress rule: the first item goes out even if it alone exceeds max_bytes.
                if taken and used + item.size > budgets.max_bytes:
                    break
                taken.append(item)
                used += item.size
        return Page(taken) if taken else None

    def _scan_item(self, path: bytes, found: os.stat_result) -> ScanItem:
        key = ItemKey(path)
        version = Version.from_metadata(found.st_size, found.st_mtime_ns)
        item_id = StableItemId.derive(self.tag, key)
        location = self._location(path)
        return ScanItem(key, ItemRef(path), item_id, version, found.st_size, location, found.st_ctime_ns)

    def _location(self, path: bytes) -> Location | None:
        if not self._locations:
            return None
        display = path.decode("utf-8", "backslashreplace")
        url = "file://" + urllib.parse.quote_from_bytes(os.path.join(self._root, path))
        if len(display) > MAX_LOCATION_CHARS:
            return None
        return Location(display, url if len(url) <= MAX_LOCATION_CHARS else None)

    def choose_split_point(self, key_range: KeyRange, cursor: Cursor, budgets: Budgets) -> ItemKey | None:
        """The byte-weighted median key of the next `max_items` files after the cursor (all of them if fewer).

        The files are fed to a `SplitEstimator`, so memory stays fixed however
        many are walked; the deadline ends the walk early. When the budget
        covers the whole remainder this splits it about in half by bytes; when
        it does not, it splits the walked part (the upper half is then larger).
        """
        walk, end = self._walk_from(key_range, cursor, budgets)
        estimator = SplitEstimator(min(DEFAULT_CAPACITY, max(2, budgets.max_items)))
        with walk:
            while estimator.observations < budgets.max_items and not budgets.expired(self._clock()):
                found = walk.next_file(end)
                if found is None:
                    break
                estimator.observe(ItemKey(found[0]), found[1].st_size)
        return estimator.split_point()

    # -- reads

    def _open(self, item_ref: ItemRef, budgets: Budgets) -> tuple[int, os.stat_result]:
        _check("budgets", budgets, Budgets)
        if budgets.expired(self._clock()):
            raise ReadError.retryable("deadline passed before the read started")
        return open_confined(self._root, item_ref)

    def open(self, item_ref: ItemRef, budgets: Budgets) -> BinaryIO:
        """The whole file; refused when it is larger than `max_bytes` (and failing if it grows past it)."""
        fd, found = self._open(item_ref, budgets)
        if found.st_size > budgets.max_bytes:
            os.close(fd)
            raise ReadError.permanent(f"item of {found.st_size} bytes exceeds max_bytes={budgets.max_bytes}")
        return bounded_reader(fd, budgets.max_bytes)

    def read_range(self, item_ref: ItemRef, offset: int, length: int, budgets: Budgets) -> bytes:
        """Bytes [offset, offset + min(length, max_bytes)) of the file; b"" past its end."""
        check_byte_range(offset, length)
        fd, _ = self._open(item_ref, budgets)
        try:
            return _pread(fd, offset, min(length, budgets.max_bytes))
        finally:
            os.close(fd)

    def read_range_as_listed(self, item: ScanItem, offset: int, length: int, budgets: Budgets) -> bytes:
        """`read_range` of a listed item, refused (retryable) when the file is no longer as listed.

        Checked on the open file (its fstat: size, mtime and ctime), before and after the read.
        """
        _check("item", item, ScanItem)
        check_byte_range(offset, length)
        fd, found = self._open(item.ref, budgets)
        try:
            if not _as_listed(item, found):
                raise ReadError.retryable("the item changed since it was listed")
            data = _pread(fd, offset, min(length, budgets.max_bytes))
            if not _as_listed(item, os.fstat(fd)):
                raise ReadError.retryable("the item changed while it was read")
            return data
        finally:
            os.close(fd)


def _pread(fd: int, offset: int, length: int) -> bytes:
    try:
        return pread_exactly(fd, offset, length)
    except OSError as error:
        raise fs_error(ReadError, "reading the item", error) from None


def _as_listed(item: ScanItem, found: os.stat_result) -> bool:
    """Whether a file's stat gives the version and change stamp `item` was listed with."""
    if found.st_ctime_ns != item.change_stamp or item.version.is_strong:
        return False
    return item.version.value == metadata_value(found.st_size, found.st_mtime_ns)
