"""What every backend's leader lock implements: `LeaderLock`, `LockHolder`, `ExpelRefused`.

A lock can be taken from its holder: `holder()` says who holds it and
`expel(holder)` ends that hold (see the package docstring for why and when).
"""

from __future__ import annotations

import hashlib
import socket
from abc import ABC, abstractmethod
from dataclasses import dataclass
from types import TracebackType
from typing import Self

from partbuild.state.ops.members import MAX_HOST_LENGTH, check_group_name


def task_digest(task_id: str) -> str:
    """How a lock holder names its task: 16 hex digits of BLAKE2b (task ids may be longer than a name allows)."""
    return hashlib.blake2b(task_id.encode(), digest_size=8).hexdigest()


def this_host() -> str:
    """This machine's name as member rows record it."""
    return socket.gethostname()[:MAX_HOST_LENGTH]


@dataclass(frozen=True)
class LockHolder:
    """Who holds a group's lock (someone else than the asking lock object), as the lock's mechanism tells."""

    pid: int  # PostgreSQL: the holder's server backend; file lock: the holder's process, from the kernel
    task_digest: str | None  # `task_digest` of the task the holder declared; None when it declared none
    host: str | None  # file lock: the host of process `pid` (this one); PostgreSQL: None (a server backend)
    ours: bool  # it declared itself a partbuild leader lock: only such a holder may be expelled
    description: str  # for messages: the application name, or the file's pid and content


class ExpelRefused(Exception):
    """The database or the operating system refused to end a holder's hold (permissions)."""


class LeaderLock(ABC):
    """Non-blocking leadership of one group. Holding it is leading.

    `task_id` is the task the lock holds for (its member's): other members read it
    from `holder()` to judge whether the holder is alive. None for a lock held by
    no member (tests, tools): such a holder is never a live member.
    """

    expulsion = "expelled"  # what `expel` does to a holder, for messages

    def __init__(self, group: str, task_id: str | None = None) -> None:
        self.group = check_group_name(group)
        self.task_id = task_id

    @abstractmethod
    def try_acquire(self) -> bool:
        """Take the lock if it is free, without waiting; True when this object holds it now."""

    @abstractmethod
    def is_held(self) -> bool:
        """True while this object still holds the lock (checks with the database or file system)."""

    @abstractmethod
    def release(self) -> None:
        """Give the lock up if held; safe to call more than once."""

    @abstractmethod
    def holder(self) -> LockHolder | None:
        """Who holds the lock now; None when nobody does, or this object itself."""

    @abstractmethod
    def expel(self, holder: LockHolder, wait_ms: int = 1000) -> bool:
        """End `holder`'s hold if it still holds the lock; True when it was ended (the lock is free or freeing).

        Waits up to `wait_ms` for the holder to be gone, so that the next `try_acquire`
        usually succeeds (a later one does when the holder is slower to go). False,
        doing nothing, for a holder that is not `ours`, that no longer holds the
        lock, or (file lock) that is this very process. ExpelRefused when not permitted.
        """

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.release()
