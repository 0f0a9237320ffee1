"""Confined reads for the filesystem connector: a ref opens only a regular file inside the root.

A ref is a relative path ('/'-separated bytes). It is refused when it is
absolute, has an empty, '.' or '..' component, or holds a NUL byte. It is then
opened one component at a time relative to a directory fd (`openat`):
directories with `O_DIRECTORY | O_NOFOLLOW`, the file with `O_NOFOLLOW`, so a
symlink swapped in anywhere on the path after the scan fails with ELOOP (or
ENOTDIR) instead of leading out of the root. The file is `lstat`ed before it is
opened (a FIFO or device is never opened at all) and `fstat`ed after, and the
two must be the same regular file: that closes the window in which a device
could be renamed in between. `O_NONBLOCK` keeps even that case from hanging on
a FIFO.
"""

from __future__ import annotations

import errno
import io
import os
import stat
from typing import BinaryIO, cast

from partbuild.orchestrator.connectors.errors import ReadError
from partbuild.orchestrator.connectors.fs_errors import SYMLINK, VANISHED, fs_error
from partbuild.orchestrator.connectors.toxic import ItemRef

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def ref_components(item_ref: ItemRef) -> list[bytes]:
    """The path components of a ref; ReadError (permanent) when it could leave the root."""
    if not isinstance(item_ref, ItemRef):
        raise TypeError(f"item_ref must be ItemRef, not {type(item_ref).__name__}")
    raw = item_ref.raw_bytes()
    if raw.startswith(b"/"):
        raise ReadError.permanent("refused: the ref is an absolute path")
    if b"\x00" in raw:
        raise ReadError.permanent("refused: the ref holds a NUL byte")
    parts = raw.split(b"/")
    if any(part in (b"", b".", b"..") for part in parts):
        raise ReadError.permanent("refused: the ref has an empty, '.' or '..' component")
    return parts


def _open_error(error: OSError, action: str = "opening the item") -> ReadError:
    if error.errno in SYMLINK:
        return ReadError.permanent(f"{action}: refused a symlink on the path (symlinks are never followed)")
    if error.errno in VANISHED:
        return ReadError.permanent(f"{action}: not found (deleted, or a component is not a directory)")
    return fs_error(ReadError, action, error)


def open_dir(name: bytes, parent: int | None) -> int:
    """`openat(parent, name)` of a directory, never through a symlink (ELOOP when it is one)."""
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=parent)
    except NotADirectoryError:
        # Linux answers ENOTDIR for a symlink under O_DIRECTORY | O_NOFOLLOW: say which it was.
        if stat.S_ISLNK(os.stat(name, dir_fd=parent, follow_symlinks=False).st_mode):
            raise OSError(errno.ELOOP, "symlink") from None
        raise


def open_confined(root: bytes, item_ref: ItemRef) -> tuple[int, os.stat_result]:
    """An fd of the regular file `item_ref` names under `root`, and its fstat; the caller closes it."""
    parts = ref_components(item_ref)
    try:
        parent = open_dir(root, None)
    except OSError as error:
        raise _open_error(error, "opening the root directory") from None
    try:
        for part in parts[:-1]:
            child = open_dir(part, parent)
            os.close(parent)
            parent = child
        before = os.stat(parts[-1], dir_fd=parent, follow_symlinks=False)
        if not stat.S_ISREG(before.st_mode):
            raise ReadError.permanent(f"refused: not a regular file ({file_kind(before.st_mode)})")
        fd = os.open(parts[-1], _FILE_FLAGS, dir_fd=parent)
    except OSError as error:
        raise _open_error(error) from None
    finally:
        os.close(parent)
    after = os.fstat(fd)
    if not stat.S_ISREG(after.st_mode) or (after.st_dev, after.st_ino) != (before.st_dev, before.st_ino):
        os.close(fd)
        raise ReadError.permanent("refused: the file was replaced while it was being opened")
    return fd, after


def file_kind(mode: int) -> str:
    """A short name of a non-regular file type, for skip reasons and messages."""
    for test, name in (
        (stat.S_ISLNK, "symlink"),
        (stat.S_ISDIR, "directory"),
        (stat.S_ISFIFO, "fifo"),
        (stat.S_ISSOCK, "socket"),
        (stat.S_ISCHR, "char device"),
        (stat.S_ISBLK, "block device"),
    ):
        if test(mode):
            return name
    return "not a regular file"


class _BoundedFile(io.RawIOBase):
    """Reads an fd, failing once more than `limit` bytes came out (the file grew after the check)."""

    def __init__(self, fd: int, limit: int) -> None:
        super().__init__()
        self._fd = fd
        self._limit = limit
        self._count = 0

    def readable(self) -> bool:
        return True

    def fileno(self) -> int:
        return self._fd

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        # Ask for one byte past the limit at most: enough to notice growth, never a large overread.
        window = memoryview(buffer)[: max(0, self._limit - self._count) + 1]
        try:
            got = os.readv(self._fd, [window])
        except OSError as error:
            raise fs_error(ReadError, "reading the item", error) from None
        self._count += got
        if self._count > self._limit:
            raise ReadError.permanent(f"the item grew past max_bytes={self._limit} while being read")
        return got

    def close(self) -> None:
        if not self.closed:
            os.close(self._fd)
        super().close()


def bounded_reader(fd: int, limit: int) -> BinaryIO:
    """A buffered reader owning `fd` that refuses to return more than `limit` bytes."""
    return cast(BinaryIO, io.BufferedReader(_BoundedFile(fd, limit)))


def pread_exactly(fd: int, offset: int, length: int) -> bytes:
    """Up to `length` bytes from `offset`: fewer only at the end of the file (pread may return short)."""
    chunks: list[bytes] = []
    while length > 0:
        chunk = os.pread(fd, length, offset)
        if not chunk:
            break
        chunks.append(chunk)
        offset += len(chunk)
        length -= len(chunk)
    return b"".join(chunks)
