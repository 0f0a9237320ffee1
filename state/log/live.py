"""The one live BuildState of a process: loaded once, kept current, read by many, folded by one.

`up` runs the HTTP API and the orchestrator in one process; both read the same
`LiveState` instead of each keeping (and replaying, and checkpointing) a copy.

Discipline: a readers/writer lock. API reads and orchestrator decisions are
readers (decisions are pure functions of the state); folding new events is the
only writer. Readers hold the lock only while they look at the state, never
while they append or do I/O. Folding is done page by page, so a large tail
never blocks readers for long, and events are read from the database before
the write lock is taken.

Reads of the past (`read_as_of`) are answered from the same state's histories
(state/fold/past.py), under the same read lock: no past state is built, kept
or replayed. A replay up to a seq is for audits only (`replay.state_as_of`).

A state that holds its working set (state/fold/cold.py) may find a record it cannot read back as of its head,
ever (`ReadBackRefused`: its registration went stale, so another process rewrote the row and kept no version
for it). It then loads itself again from the store (`load_again`), as a start would, and folds on: the new
state replaces the old one under the write lock, and `loads` counts the loads, so that what kept something
of the old state (a projector's pass, an orchestrator's helpers) knows to start over.
"""

from __future__ import annotations

import logging
import threading
import time
from bisect import bisect_right
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import fasteners

from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.fold.build_state import BuildState, FoldError
from partbuild.state.fold.cold import ReadBackRefused, WorkingSet
from partbuild.state.fold.history import clock_mark
from partbuild.state.fold.past import PastState
from partbuild.state.fold.records import Rejection
from partbuild.state.log.collector import settle_loaded_state, unsettle_loaded_state
from partbuild.state.log.replay import LoadReport, Progress, checkpoint, fold_page, load_state
from partbuild.state.log.store import EventLog
from partbuild.state.log.tailing import Tailer

logger = logging.getLogger("partbuild.state")

# Called under the write lock after events were folded: (state, events folded, seconds it took).
FoldListener = Callable[[BuildState, int, float], None]
# How a working set is loaded (state/store/cold_start.py): the log, a progress callback.
WorkingSetLoad = Callable[[EventLog, Progress | None], tuple[BuildState, WorkingSet]]


class SeqAfterHead(ValueError):
    """A read asked about a seq the log has not reached."""

    def __init__(self, what: str, seq: int, head: int) -> None:
        super().__init__(f"{what} {seq} is after the log head {head}")
        self.seq = seq
        self.head = head


def clock_after(log: EventLog, mark: tuple[int, int], seq: int, rejected: Callable[[int], bool]) -> int:
    """The log's clock as of `seq`, from `mark` (a seq at or before it, the clock then: `history.clock_mark`)
    and the events after the mark that the fold applied (a rejected event does not move the clock)."""
    mark_seq, clock = mark
    for page in log.iter_payload_pages(after_seq=mark_seq, upto_seq=seq):
        for event_seq, payload in page:
            if not rejected(event_seq):
                event = pb.Event()
                event.ParseFromString(payload)
                clock = max(clock, event.timestamp_ms)
    return clock


class LiveState:
    """A BuildState kept current with the log, shared by every component of a process."""

    def __init__(
        self,
        log: EventLog,
        *,
        snapshot_every: int = 0,
        use_snapshots: bool = True,
        progress: Progress | None = None,
        strict: bool = False,
        load: WorkingSetLoad | None = None,
    ) -> None:
        """Load from the newest usable snapshot plus the tail (or, without `use_snapshots`, replay it all).

        With `snapshot_every` > 0, checkpoint now and on `close` when that many events past the newest.
        `load`: how to load the state instead (a working set: state/store/cold_start.py), with no snapshots;
        called again when the working set cannot fold on (`load_again`).
        """
        self.log = log
        if load is not None:
            use_snapshots = False
        self.snapshots = log.snapshots if use_snapshots else None
        self.snapshot_every = snapshot_every if use_snapshots else 0
        # A state that holds its working set: its records gone cold are read back from the store's rows.
        self.working: WorkingSet | None = None
        self._load = load
        self.loads = 1  # how many times the state was loaded: 1, then one more at each `load_again`
        if load is None:
            self._state, self.loaded = load_state(log, self.snapshots, progress=progress)
        else:
            self._state, self.working = load(log, progress)
            self.loaded = LoadReport(snapshot_seq=0, replayed=self._state.head_seq, ignored_snapshots=0)
        self._state.strict = strict
        self._lock = fasteners.ReaderWriterLock()
        self._fold_lock = threading.Lock()  # one folder at a time, so events are applied once and in order
        self._listeners: list[FoldListener] = []
        self._tailer = Tailer("partbuild-tail", self._tail_step)
        # Servers (not one-shot CLI reads, which may have read-only access) snapshot at start and stop.
        self.checkpoint()
        settle_loaded_state()

    # ----------------------------------------------------------------- reading

    @property
    def state(self) -> BuildState:
        """The live state object, unlocked: for counts and tests. Readers use `read()`."""
        return self._state

    @property
    def head_seq(self) -> int:
        return self._state.head_seq

    @contextmanager
    def read(self) -> Iterator[BuildState]:
        """Hold the state still while looking at it (shared with other readers)."""
        with self._lock.read_lock():
            yield self._state

    @contextmanager
    def hold(self) -> Iterator[BuildState]:
        """Hold the state still, alone, for a change that is not a fold (a working set evicting records)."""
        with self._lock.write_lock():
            yield self._state

    def read_at_least(self, min_seq: int | None, what: str = "min_seq") -> None:
        """Fold until the state has seen `min_seq` (read-your-writes across processes)."""
        if min_seq is not None and min_seq > self._state.head_seq:
            self.catch_up()
            if min_seq > self._state.head_seq:
                raise SeqAfterHead(what, min_seq, self._state.head_seq)

    @contextmanager
    def read_as_of(self, seq: int) -> Iterator[BuildState | PastState]:
        """The state exactly as it was right after the event at `seq`, read from the live state's histories.

        Held still like `read()`; the present itself when `seq` is the head.
        """
        if seq < 0:
            raise ValueError("as_of_seq must not be negative")
        self.read_at_least(seq, "as_of_seq")
        with self._lock.read_lock():
            state = self._state
            yield state if seq == state.head_seq else PastState(state, seq, lambda: self._clock_at(state, seq))

    def _clock_at(self, state: BuildState, seq: int) -> int:
        """The log's clock as of `seq`: the kept mark at or before it, then the applied events after the mark."""
        rejections = state.rejections

        def rejected(event_seq: int) -> bool:
            index = bisect_right(rejections, event_seq, key=_rejection_seq) - 1
            return index >= 0 and rejections[index].seq == event_seq

        return clock_after(self.log, clock_mark(state, seq), seq, rejected)

    # ----------------------------------------------------------------- folding (the one writer)

    def on_fold(self, listener: FoldListener) -> None:
        """Call `listener` under the write lock whenever new events were folded (derived indexes)."""
        self._listeners.append(listener)

    def catch_up(self) -> int:
        """Fold whatever was appended since the last catch-up; returns how many events. A working set that
        cannot read a record back as of its head, ever, is loaded again first (`load_again`)."""
        loads = self.loads
        try:
            return self._fold_new()
        except ReadBackRefused as exc:
            if self._load is None:
                raise
            self.load_again(exc, loads=loads)
            return self._fold_new()

    def load_again(self, why: ReadBackRefused, *, loads: int) -> None:
        """Replace a working set that cannot fold on (`why`) with one loaded again from the store, unless it was
        loaded again since the caller's look (`loads`, the count it saw). Not from under `read()`."""
        assert self._load is not None and self.working is not None, "only a working set is loaded again"
        with self._fold_lock:
            if self.loads != loads:
                return  # another thread did, after the same refusal
            head = self._state.head_seq
            logger.warning("the working set cannot fold past seq %d (%s): loading it again from the store", head, why)
            state, working = self._load(self.log, None)
            unsettle_loaded_state()  # the old state's records may go: frozen, their cycles would stay
            with self._lock.write_lock():
                state.strict = self._state.strict
                working.pins.update(self.working.pins)
                self._state, self.working = state, working
                self.loads += 1
            settle_loaded_state()
            logger.warning("the working set was loaded again at seq %d (it had stopped at %d)", state.head_seq, head)

    def _fold_new(self) -> int:
        with self._fold_lock:
            folded = 0
            started = time.perf_counter()
            for page in self.log.iter_payload_pages(after_seq=self._state.head_seq):
                with self._lock.write_lock():
                    fold_page(self._state, page)
                folded += len(page)
            if folded:
                seconds = time.perf_counter() - started
                with self._lock.write_lock():
                    for listener in self._listeners:
                        listener(self._state, folded, seconds)
            return folded

    def start_tailing(self, interval_s: float = 0.05) -> None:
        """Keep the state current in the background (other processes append too)."""
        self._tailer.start(interval_s)

    def _tail_step(self, interval_s: float) -> bool:
        try:
            self.catch_up()
        except FoldError:  # a bug in the fold: the state is half-applied and refuses events; say so once
            logger.exception("the state is broken at seq %d; reads answer as of then", self._state.head_seq)
            return False
        except ReadBackRefused as exc:  # a state that cannot go on, and cannot load again: said once
            logger.error("the state stops folding at seq %d: %s; start it again", self._state.head_seq, exc)
            return False
        except Exception:  # a database hiccup must not kill the reader; the next tick retries
            logger.warning("catching up with the log failed; retrying", exc_info=True)
            time.sleep(interval_s)
        return True

    def stop_tailing(self) -> None:
        self._tailer.stop()

    # ----------------------------------------------------------------- checkpoints

    def checkpoint(self) -> int | None:
        """Snapshot the state if it is `snapshot_every` events past the newest snapshot."""
        if self.snapshots is None or self.snapshot_every <= 0:
            return None
        with self.read() as state:
            return checkpoint(state, self.snapshots, self.snapshot_every)

    def close(self) -> None:
        """Stop tailing and checkpoint: called once, by whoever created this live state."""
        self.stop_tailing()
        self.checkpoint()


def _rejection_seq(rejection: Rejection) -> int:
    return rejection.seq
