"""Keeping the store up to the live state: a background thread that projects each span the state folded.

Each pass projects (watermark, head]: the changes, and what instances dropped by retention added to the
counts, are computed from the live state under its read lock, then written outside it in one transaction
with the counts they make and the watermark (`ChangeStore.write`). The first pass turns on the fold's
record of what it touches (`BuildState.touched`, state/fold/touched.py) and scans every record up to the
seq tracking began, in spans of at most `span` seqs (which bounds a transaction), reading each record once
(`ChangeScan`); each later pass reads the changes of the records touched since (`changes_of`), and writes the rows of
those records (state/store/records.py): its cost is its changes, not the state's size. A process that finds
the records' watermark behind its own first writes every record it holds (`_dump`, a chunk at a time).
Any number of processes holding a live state of one database may project: the watermark's compare and
set lets one of them write each span, and the others go on from where it got.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Iterable

from partbuild.state.fold.build_state import BuildState
from partbuild.state.fold.history import dropped_deltas_between
from partbuild.state.fold.touched import Touched
from partbuild.state.log.live import LiveState
from partbuild.state.queries.changes import ChangeScan, changes_of
from partbuild.state.store.changes import ChangeStore
from partbuild.state.store.records import RecordPass, all_keys, rows_of, touched_keys

logger = logging.getLogger("partbuild.state.store")

# Seqs per transaction of a scanning pass: bounds the rows it holds, whatever the log's length, and how long
# it keeps SQLite's write lock from the log's appenders (about 75,000 rows of W1, well under a second).
DEFAULT_SPAN = 20_000
DUMP_CHUNK = 20_000  # records encoded under one hold of the read lock when a process writes them all
MAX_RETRY_GAP_S = 60.0  # the longest wait between failing passes


class Beat:
    """A projecting process's call that says it is alive (`say`: at most once every `every_s`): a failure is
    logged once per streak, never raised (the beat is for other processes' starts; the projection goes on)."""

    def __init__(self, call: Callable[[], None], every_s: float, end: Callable[[], None] | None = None) -> None:
        """`end`: called when the projector stops (the process no longer projects)."""
        self.call, self.every_s, self.end = call, every_s, end
        self._failing = False
        self._said = -math.inf  # (monotonic) the first `say` calls at once

    def say(self) -> None:
        now = time.monotonic()
        if now - self._said < self.every_s:
            return
        self._said = now
        try:
            self.call()
        except Exception:
            if not self._failing:
                logger.warning("could not say this process projects the state store; retrying", exc_info=True)
            self._failing = True
        else:
            self._failing = False


class Projector:
    """Projects `live`'s changes into `store`, now (`project`) or in the background (`start`)."""

    def __init__(
        self, live: LiveState, store: ChangeStore, *, span: int = DEFAULT_SPAN, writer: str | None = None
    ) -> None:
        """`writer`: this process's holder in `state_projectors` when it holds a working set (the versions of
        the rows it replaces are kept for the others only: state/store/row_versions.py)."""
        self.live = live
        self.store = store
        self.span = span
        self.writer = writer
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._beat: Beat | None = None
        # Whether this process wrote every record it held since its fold began tracking (`_dump`): its passes
        # then make the records whole, wherever the records' watermark was.
        self._whole = False
        self._scan: ChangeScan | None = None  # the scan of the passes up to the seq tracking began
        # Called with the watermark after each call of `project` (a working set evicts: state/store/cold_start.py).
        self.after_pass: list[Callable[[int], None]] = []
        self.spans_lost = 0  # spans another process wrote: another process folds and projects this database
        self._left_at: int | None = None  # the watermark after this projector's last pass
        self._loads = live.loads  # the live state's load this projector's own records are of
        live.on_fold(lambda _state, _count, _seconds: self._wake.set())

    def project(self) -> int:
        """Write every change up to the live state's head; returns the watermark reached."""
        mark = self.store.watermark()
        if self._left_at is not None and mark > self._left_at:
            self.spans_lost += 1  # moved since this projector's last pass: by another process
        if self.live.loads != self._loads:
            self._start_over()
        loads = self._loads
        while mark < self.live.head_seq or (mark == self.live.head_seq and self._records_behind(mark)):
            drained = records = None
            with self.live.read() as state:
                if self.live.loads != loads:
                    break  # loaded again since this pass began: the next pass starts over
                head = state.head_seq
                touched = state.touched
                if touched is None:  # from now on every record the fold changes is tracked
                    touched = state.touched = Touched(head, len(state.dropped_changes))
                    self._whole = False
                if touched.since <= mark:
                    # Every record changed after the mark is in it: the pass costs its changes.
                    self._scan = None
                    last, drained = head, touched
                    state.touched = touched.after(head, len(state.dropped_changes))
                    changes = changes_of(state, mark, last, drained)
                    dropped = dropped_deltas_between(state, mark, last, drained.dropped_from)
                    rows = rows_of(state, touched_keys(state, drained), mark)
                    records = RecordPass(rows, whole=self._whole, writer=self.writer)
                else:  # up to the seq tracking began (first, or behind another projector's mark): scan
                    last = min(head, touched.since, mark + self.span)
                    changes = self._scan_of(state, touched.since).changes(state, mark, last)
                    dropped = dropped_deltas_between(state, mark, last)
            try:
                written = self.store.write(mark, last, changes, self._dropped, dropped, records)
            except BaseException:
                self._give_back(drained, loads)  # not written: still owed
                raise
            if written:
                mark = last
                if records is not None and not self._whole and self._records_behind(mark):
                    self._dump(loads)  # the records are not whole: make them so, for the next pass to say it
                    if not self._whole:
                        break  # tracking stopped during the dump: the next call starts again
                continue
            mark = self.store.watermark()  # another projector wrote this span: go on from where it got
            self.spans_lost += 1
            self._give_back(drained, loads)  # what it drained may still be owed past that mark
        self._left_at = mark
        for after in self.after_pass:
            after(mark)
        return mark

    def _start_over(self) -> None:
        """The live state was loaded again (`LiveState.load_again`): project it as a start's projector would
        (it tracks what it touches from its load's head; what it holds was not written by this projector)."""
        self._loads = self.live.loads
        self._whole = False
        self._scan = None

    def _give_back(self, drained: Touched | None, loads: int) -> None:
        if drained is not None:
            with self.live.read() as state:
                if state.touched is not None and self.live.loads == loads:  # (not into a state loaded since)
                    state.touched.absorb(drained)

    def _scan_of(self, state: BuildState, until: int) -> ChangeScan:
        """The scan up to `until` (the seq tracking began) that this pass goes on with: one read of each record
        for every span of it, where `changes_between` per span read every record each time."""
        if self._scan is None or self._scan.until != until:
            self._scan = ChangeScan(state, until, self.span)
        return self._scan

    def _records_behind(self, mark: int) -> bool:
        """Whether the records are not known whole at the changes' watermark `mark` (a pass with nothing new
        to fold is still owed: it writes them all, or says they are whole); never while a newer format owns
        them (a newer partbuild projects the same database: it writes them)."""
        records = self.store.records
        return records.watermark() != mark and not records.newer_format()

    def _dump(self, loads: int) -> None:
        """Write the row of every record the live state (its load `loads`) holds, `DUMP_CHUNK` at a time; what
        changes meanwhile is tracked, and written by the passes."""
        with self.live.read() as state:
            if self.live.loads != loads:
                return
            keys = all_keys(state)
        for start in range(0, len(keys), DUMP_CHUNK):
            with self.live.read() as state:
                if state.touched is None or self.live.loads != loads:
                    return  # tracking stopped (or another state): what changed during the dump is not known
                rows = rows_of(state, keys[start : start + DUMP_CHUNK], instance_cells=False)
            self.store.records.dump(rows, self.writer)
        self._whole = True
        # Every row was just written: a planner that has never seen the tables would read pages of them
        # badly (it guesses a handful of rows, and sorts where an index gives the order).
        self.store.records.analyze()

    def _dropped(self, uuids: Iterable[str]) -> set[str]:
        with self.live.read() as state:
            held = state.instances
            return {uuid for uuid in uuids if uuid not in held}

    def start(self, gap_s: float = 1.0, beat: Beat | None = None) -> Projector:
        """Project in a thread whenever the live state has folded, at most once every `gap_s`; `beat`: this
        process said to be projecting after the first pass, then every `beat.every_s` (state/ops/projectors.py).

        The gap bounds what the passes cost (each scans the records changed since the watermark under the
        read lock) while the log moves fast; reads of the newest seqs meanwhile come from the live state.
        """
        if self._thread is None:
            self._stop.clear()
            self._wake.set()  # what the live state loaded
            self._beat = beat
            args = (gap_s, beat)
            self._thread = threading.Thread(target=self._run, args=args, name="partbuild-project", daemon=True)
            self._thread.start()
        return self

    def _run(self, gap_s: float, beat: Beat | None) -> None:
        failures = 0
        while True:
            woke = self._wake.wait(beat.every_s if beat is not None else None)
            if self._stop.is_set():
                return
            if not woke:  # idle: only the beat
                if beat is not None:
                    beat.say()
                continue
            self._wake.clear()  # before the pass: a fold during it wakes the next one
            try:
                self.project()
            except Exception:  # a database hiccup (or a read-only one) must not stop the projection
                failures += 1
                self._wake.set()
                # Said once per streak, then retried less and less often: reads meanwhile use the live state.
                if failures == 1:
                    logger.warning("projecting the state's changes failed; retrying", exc_info=True)
            else:
                if failures:
                    logger.info("projecting the state's changes works again after %d failed passes", failures)
                failures = 0
            if beat is not None:  # (after the pass: the first one is not kept waiting by it)
                beat.say()
            self._stop.wait(min(gap_s * 2**failures, MAX_RETRY_GAP_S) if failures else gap_s)

    def stop(self) -> None:
        """Stop the thread (a pass in flight finishes its transaction first)."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
            self._thread = None
        beat, self._beat = self._beat, None
        if beat is not None and beat.end is not None:
            try:
                beat.end()
            except Exception:  # (its row goes stale in STALE_MS anyway)
                logger.warning("could not say this process stopped projecting the state store", exc_info=True)
