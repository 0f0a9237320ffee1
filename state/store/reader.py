"""A read replica's state: the reads of a `LiveState`, answered from the state store, nothing folded.

`StoreReader` has the read side of `LiveState` (state/log/live.py): `head_seq`, `read()`, `read_as_of(seq)`,
`read_at_least(seq)`, `catch_up()`, tailing. Its head is the store's watermark, which the processes that
fold the log (`serve`, `up`) move as they project; it holds that seq and a bounded cache of the rows read
at it, so a replica starts at once and its memory does not grow with the history. Each read opens one
snapshot of the database and answers from the rows as of its seq (`stored_state`, state/store/stored.py):
the same functions as a read of the past of a live state, so the two cannot disagree.

Read-your-writes: `read_at_least(N)` waits (up to `wait_s`) for the watermark to reach N, which a projector
moves within about a second of the append; a seq the log has not reached is `SeqAfterHead`, one it has but
the store has not within the wait is `StoreBehind` (the caller says: try again).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager

from partbuild.state.fold.past import PastState
from partbuild.state.log.live import SeqAfterHead
from partbuild.state.log.store import EventLog
from partbuild.state.log.tailing import Tailer
from partbuild.state.store.changes import ChangeStore
from partbuild.state.store.stored import StoredRecords, open_stored, stored_state

logger = logging.getLogger("partbuild.state.store")

DEFAULT_WAIT_S = 10.0  # how long a read waits for the store to reach its `min_seq`
POLL_S = 0.02
MAX_KEPT_ROWS = 50_000  # decoded rows kept for the reads of one watermark (tens of MiB)


class StoreBehind(RuntimeError):
    """The log has the seq a read asked for, but the state store has not reached it within the wait."""

    def __init__(self, what: str, seq: int, watermark: int, waited_s: float) -> None:
        super().__init__(
            f"{what} {seq} is in the log, but the state store this replica reads is at seq {watermark} after "
            f"{waited_s:g} s (is a `serve` or `up` projecting it?); try again"
        )
        self.seq = seq
        self.watermark = watermark


class StoreNotReady(RuntimeError):
    """The state store's rows are not whole at its watermark (being written for the first time)."""


class ReadReplica(RuntimeError):
    """A write asked of a read replica, which folds nothing and so cannot check a write against the state."""

    def __init__(self) -> None:
        super().__init__(
            "this server is a read replica (`serve --replica`): nothing was written; send writes to a server "
            "that folds the log (`partbuild serve` or `partbuild up`)"
        )


class StoreReader:
    """The reads of a live state, from the state store: see the module docstring."""

    def __init__(self, log: EventLog, store: ChangeStore, *, wait_s: float = DEFAULT_WAIT_S) -> None:
        self.log = log
        self.store = store
        self.wait_s = wait_s
        self._head = store.watermark()
        self._tailer = Tailer("partbuild-store", self._tail_step)
        # The records of the newest watermark read, with the rows they decoded: reads of that watermark (the
        # same snapshot of every row) share them; the next watermark's begin again.
        self._kept: StoredRecords | None = None

    @property
    def head_seq(self) -> int:
        """The store's watermark when last looked at (`catch_up`)."""
        return self._head

    def catch_up(self) -> int:
        """Look at the store's watermark again; returns how many seqs it moved."""
        now = self.store.watermark()
        moved = now - self._head
        if moved > 0:
            self._head = now
        return max(moved, 0)

    def read_at_least(self, min_seq: int | None, what: str = "min_seq") -> None:
        """Wait until the store has reached `min_seq` (read-your-writes across processes)."""
        if min_seq is None or min_seq <= self._head:
            return
        started = time.monotonic()
        while True:
            self.catch_up()
            if min_seq <= self._head:
                return
            log_head = self.log.head()
            if min_seq > log_head:
                raise SeqAfterHead(what, min_seq, log_head)
            waited = time.monotonic() - started
            if waited >= self.wait_s:
                raise StoreBehind(what, min_seq, self._head, round(waited, 1))
            time.sleep(POLL_S)

    @contextmanager
    def read(self) -> Iterator[PastState]:
        """The state as of the store's watermark, in one snapshot of the database."""
        with self._opened(None) as state:
            yield state

    @contextmanager
    def read_as_of(self, seq: int) -> Iterator[PastState]:
        """The state exactly as it was right after the event at `seq` (waiting for the store to reach it)."""
        if seq < 0:
            raise ValueError("as_of_seq must not be negative")
        self.read_at_least(seq, "as_of_seq")
        with self._opened(seq) as state:
            yield state

    @contextmanager
    def _opened(self, seq: int | None) -> Iterator[PastState]:
        kept = self._kept
        if kept is not None and kept.decoded_rows > MAX_KEPT_ROWS:
            kept = None  # begin again: the rows kept are bounded, whatever was read at one watermark
        with open_stored(self.store.records, kept) as stored:
            if stored is None:
                raise StoreNotReady(
                    "the state store is not whole yet (a `serve` or `up` is writing it for the first time, or "
                    "`partbuild db upgrade` has not run); try again"
                )
            if stored.head_seq > self._head:
                self._head = stored.head_seq
            if stored is not kept and (kept is None or stored.head_seq >= kept.head_seq):
                self._kept = stored
            yield stored_state(stored, stored.head_seq if seq is None else seq, self.log, self.store.counts)

    def start_tailing(self, interval_s: float = 0.05) -> None:
        """Look at the watermark in the background (what `/healthz` says the state is at)."""
        self._tailer.start(interval_s)

    def _tail_step(self, interval_s: float) -> bool:
        try:
            self.catch_up()
        except Exception:  # a database hiccup must not stop the replica; the next tick retries
            logger.warning("reading the state store's watermark failed; retrying", exc_info=True)
            time.sleep(interval_s)
        return True

    def stop_tailing(self) -> None:
        self._tailer.stop()

    def close(self) -> None:
        self.stop_tailing()
