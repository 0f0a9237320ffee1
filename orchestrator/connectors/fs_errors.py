"""How the filesystem connector classes OS errors, and the messages it gives (never a path).

The classes, decided once for listing and reading alike:

- vanished (ENOENT, ENOTDIR): the entry was deleted or replaced between a
  listing and its use. A scan skips it (it is no longer part of the tree); a
  read of its ref fails permanently (the ref names nothing now).
- denied (EACCES, EPERM): the scan skips the entry with the reason "permission
  denied" rather than failing the page: a permanent error on one entry would
  stop the scan at that key forever, and a retry will not grant permission. A
  read fails permanently: it will not succeed until someone changes the modes.
- symlink (ELOOP under O_NOFOLLOW): a symlink where a directory or file was;
  skipped by a scan, refused by a read.
- transient (EIO, EAGAIN, EINTR, EMFILE, ENFILE, ENOMEM, ENOBUFS, ESTALE,
  ETIMEDOUT, EBUSY): the whole call fails retryable and the caller retries from
  the same cursor; nothing is skipped for a fault that may pass.
- anything else: permanent.

Messages name the operation and the errno only: an OSError's own text quotes
the path, which is source data and may be a secret.
"""

from __future__ import annotations

import errno
import os
from typing import TypeVar

from partbuild.orchestrator.connectors.errors import ConnectorError

E = TypeVar("E", bound=ConnectorError)

VANISHED = frozenset({errno.ENOENT, errno.ENOTDIR})
DENIED = frozenset({errno.EACCES, errno.EPERM})
SYMLINK = frozenset({errno.ELOOP})
TRANSIENT = frozenset(
    {
        errno.EIO,
        errno.EAGAIN,
        errno.EINTR,
        errno.EMFILE,
        errno.ENFILE,
        errno.ENOMEM,
        errno.ENOBUFS,
        errno.ESTALE,
        errno.ETIMEDOUT,
        errno.EBUSY,
    }
)


def describe(error: OSError) -> str:
    """The errno's name and text, without the path the OSError carries."""
    number = error.errno
    if number is None:
        return type(error).__name__
    return f"{errno.errorcode.get(number, str(number))} ({os.strerror(number)})"


def skip_reason(error: OSError) -> str | None:
    """Why a scan skips an entry after this error, or None when the error must fail the call."""
    if error.errno in VANISHED:
        return "vanished"
    if error.errno in DENIED:
        return "permission denied"
    if error.errno in SYMLINK:
        return "symlink"
    return None


def fs_error(kind: type[E], action: str, error: OSError) -> E:
    """`kind` (EnumerateError or ReadError) classed retryable or permanent by the errno."""
    message = f"{action} failed: {describe(error)}"
    if error.errno in TRANSIENT:
        return kind.retryable(message)
    return kind.permanent(message)
