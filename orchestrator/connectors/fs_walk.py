"""The filesystem connector's walk: regular files in byte order of their relative paths, in bounded memory.

Order. A file's key is its path relative to the root, '/'-separated bytes. A
directory's whole subtree shares the prefix `name/`, so it sits in key order
exactly where `name + b"/"` sorts among its siblings. Sorting each listing by
name, with b"/" appended to directory names, therefore yields full-path order;
sorting by plain names would not when a sibling holds a byte below '/': "a!b"
< "a/b" < "a0", yet plain names sort "a" (the directory) before "a!b".

Memory. The walk holds a stack of frames, one per directory from the root down
to the current one, each with that directory's sorted listing (names only) and
an open directory fd. So it holds at most depth x widest directory names,
whatever the tree's size: it never builds a list of the tree. One fd per level
is open during a call; keys are at most 4,096 bytes, so depth is too (and a
tree deeper than the process's fd limit fails the call retryable, EMFILE).

Seek. Resuming at a key descends straight to it: in each directory on the
key's path, a bisect on the sorted listing finds the first entry at or after
the rest of the key; the entry just before it is entered only when it is a
directory whose `name/` prefixes the rest. Only the directories on that path
are listed, never the ones before it.

Confinement. Directories are opened relative to their parent's fd with
`O_NOFOLLOW`; symlinks, FIFOs, sockets and devices are skipped with a reason,
never followed or opened.
"""

from __future__ import annotations

import bisect
import os
import stat
from collections.abc import Callable
from dataclasses import dataclass, field

from partbuild.orchestrator.connectors.errors import EnumerateError
from partbuild.orchestrator.connectors.fs_errors import SYMLINK, fs_error, skip_reason
from partbuild.orchestrator.connectors.fs_read import file_kind, open_dir
from partbuild.orchestrator.connectors.toxic import MAX_ITEM_KEY_BYTES

SkipHook = Callable[[bytes, str], None]  # (relative path, with a trailing b"/" for a directory; reason)


@dataclass
class WalkStats:
    """Counters a caller (and the tests) can read: how much listing a scan did."""

    dirs_listed: int = 0
    files_statted: int = 0
    skipped: dict[str, int] = field(default_factory=dict)


@dataclass(slots=True)
class _Frame:
    fd: int
    prefix: bytes  # this directory's relative path + b"/" (b"" for the root)
    names: list[bytes]  # sort keys: a file's name, or a directory's name + b"/"
    odd: dict[bytes, str]  # names not to emit (symlinks, FIFOs, ...) and why
    index: int = 0  # the next entry to visit


def _list(fd: int) -> tuple[list[bytes], dict[bytes, str]]:
    """A directory's sort keys, sorted, and its entries that are neither directories nor regular files."""
    names: list[bytes] = []
    odd: dict[bytes, str] = {}
    with os.scandir(fd) as entries:  # scandir dups the fd: ours stays open
        for entry in entries:
            name = os.fsencode(entry.name)
            try:
                # d_type from the listing: no stat per entry unless the filesystem does not report it.
                if entry.is_dir(follow_symlinks=False):
                    names.append(name + b"/")
                    continue
                if not entry.is_file(follow_symlinks=False):
                    odd[name] = file_kind(entry.stat(follow_symlinks=False).st_mode)
            except FileNotFoundError:
                continue  # deleted while listed
            names.append(name)
    names.sort()
    return names, odd


class Walk:
    """One pass over the tree from a seek point; close it (or use `with`) to release its fds."""

    def __init__(self, root: bytes, stats: WalkStats, on_skip: SkipHook | None = None) -> None:
        self._stats = stats
        self._on_skip = on_skip
        self._stack: list[_Frame] = []
        try:
            fd = open_dir(root, None)
        except OSError as error:
            if error.errno in SYMLINK:
                raise EnumerateError.permanent("opening the root directory: refused, it is now a symlink") from None
            raise fs_error(EnumerateError, "opening the root directory", error) from None
        self._push(fd, b"")

    def __enter__(self) -> Walk:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def close(self) -> None:
        while self._stack:
            os.close(self._stack.pop().fd)

    def _skip(self, path: bytes, reason: str) -> None:
        self._stats.skipped[reason] = self._stats.skipped.get(reason, 0) + 1
        if self._on_skip is not None:
            self._on_skip(path, reason)

    def _push(self, fd: int, prefix: bytes) -> None:
        try:
            names, odd = _list(fd)
        except OSError as error:
            os.close(fd)
            raise fs_error(EnumerateError, "listing a directory", error) from None
        self._stats.dirs_listed += 1
        self._stack.append(_Frame(fd, prefix, names, odd))

    def _enter(self, frame: _Frame, sort_key: bytes) -> bool:
        """Push the directory `sort_key` (name + b"/") of `frame`; False when it was skipped."""
        path = frame.prefix + sort_key
        if len(path) >= MAX_ITEM_KEY_BYTES:  # every key below would be too long for an ItemKey
            self._skip(path, "path too long")
            return False
        try:
            fd = open_dir(sort_key[:-1], frame.fd)
        except OSError as error:
            reason = skip_reason(error)  # a symlink swapped in, deleted, or not ours to read
            if reason is None:
                raise fs_error(EnumerateError, "opening a directory", error) from None
            self._skip(path, reason)
            return False
        self._push(fd, path)
        return True

    def seek(self, lower: bytes) -> None:
        """Position the walk before the first key >= `lower` (call once, on a fresh walk)."""
        rest = lower
        while True:
            frame = self._stack[-1]
            index = bisect.bisect_left(frame.names, rest)
            frame.index = index
            before = frame.names[index - 1] if index > 0 else b""
            # Only a directory whose prefix starts `rest` can hold keys both below and above it.
            if not (before.endswith(b"/") and rest.startswith(before)) or not self._enter(frame, before):
                return
            rest = rest[len(before) :]

    def next_file(self, end: bytes | None) -> tuple[bytes, os.stat_result] | None:
        """The next regular file below `end` (exclusive) and its lstat, or None when there is none."""
        while self._stack:
            frame = self._stack[-1]
            if frame.index >= len(frame.names):
                os.close(self._stack.pop().fd)
                continue
            sort_key = frame.names[frame.index]
            frame.index += 1
            path = frame.prefix + sort_key
            if end is not None and path >= end:  # a directory's prefix is below all its keys
                self.close()
                return None
            if sort_key.endswith(b"/"):
                self._enter(frame, sort_key)
                continue
            found = self._regular(frame, sort_key, path)
            if found is not None:
                return path, found
        return None

    def _regular(self, frame: _Frame, name: bytes, path: bytes) -> os.stat_result | None:
        """The lstat of a listed file when it is still a regular file with a usable key, else None (skipped)."""
        if name in frame.odd:
            self._skip(path, frame.odd[name])
            return None
        if len(path) > MAX_ITEM_KEY_BYTES:
            self._skip(path, "path too long")
            return None
        try:
            found = os.stat(name, dir_fd=frame.fd, follow_symlinks=False)
        except OSError as error:
            reason = skip_reason(error)
            if reason is None:
                raise fs_error(EnumerateError, "reading a file's metadata", error) from None
            self._skip(path, reason)
            return None
        self._stats.files_statted += 1
        if not stat.S_ISREG(found.st_mode):  # replaced since the listing
            self._skip(path, file_kind(found.st_mode))
            return None
        return found
