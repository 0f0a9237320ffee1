"""A working set kept bounded while its process runs, and saved so that a start, after a clean stop or a crash,
folds only the tail of the log (state/store/cold_start.py loads it).

After each pass of the state store's projector, what the rows now hold (and decisions do not need) is evicted
(`keep_working_set`). A record may go cold once its row as of the fold's head holds it, which is known two
ways: the rows are whole at a seq b (the `records` watermark) with the record's last change at or before b and
b at or before the head (whoever wrote them: this process's passes, or another's); or, when another process
wrote the rows past this fold's head, its row as of the head (state/store/row_versions.py) is read and found
equal to what the fold holds (`_Eviction.settle`). Every `CHECKPOINT_EVERY` events the working set is also
saved as a checkpoint: the working set at the state's head in a snapshot of its own format, and that seq set
as the floor of the rows' versions, so the records the checkpoint left in the rows can be read back as of it
however far the rows move on before the next start. A clean stop saves one at the head, after a last pass
(`save_working_set`), so the next start folds nothing but what was appended after it.
"""

from __future__ import annotations

import logging
import time
from typing import Final

from partbuild.state.db import begin_write
from partbuild.state.fold.build_state import BuildState
from partbuild.state.fold.cold import INSTANCE, REF, RUN, WANT
from partbuild.state.log.live import LiveState
from partbuild.state.log.replay import SNAPSHOTS_KEPT
from partbuild.state.log.snapshot import WorkingSetSnapshot, working_set_format
from partbuild.state.store.cold_rows import ROW_KIND, rows_as_of
from partbuild.state.store.projector import Projector
from partbuild.state.store.records import decoded, row_value
from partbuild.state.store.row_versions import set_floor

logger = logging.getLogger("partbuild.state.store")

CHECKPOINT_EVERY: Final = 50_000  # events folded between two checkpoints of a running working set
BOUNDARIES_KEPT: Final = 256  # the rows' watermarks seen ahead of the fold, waiting for its head to pass them


def checkpoint(live: LiveState, projector: Projector, projected: int) -> int | None:
    """Evict what the rows hold as of `projected` (their watermark), save the working set at the state's head,
    and keep the rows as they are now for it (called between two passes of `projector`: nothing writes rows
    meanwhile); the seq saved, or None."""
    with live.hold() as state:
        working = live.working
        assert working is not None
        if state.touched is None or state.touched.since > projected:
            return None
        began = time.perf_counter()
        working.evict(working.evictable(projected=projected, for_decisions=True))
        seq = state.head_seq
        snapshot = WorkingSetSnapshot(working)
        held_s = time.perf_counter() - began  # the fold and the writes waited as long
    payload = snapshot.payload()  # the cold keys, most of it, written after letting go
    snapshots = live.log.snapshots
    snapshots.save(seq, working_set_format(), payload)
    with begin_write(projector.store.records.engine) as conn:
        set_floor(conn, seq)
    snapshots.prune(keep=SNAPSHOTS_KEPT)
    logger.info(
        "saved the working set at seq %d (%d bytes, the state held %.2f s): a start folds from there",
        seq,
        len(payload),
        held_s,
    )
    return seq


def save_working_set(live: LiveState, projector: Projector) -> int | None:
    """At a clean stop (nothing folding): project to the head, then save a checkpoint there, so the next start
    folds only what is appended after it; the seq saved, or None."""
    assert live.working is not None
    try:
        mark = projector.project()
        if mark != live.state.head_seq or projector.store.records.watermark() != mark:
            return None
        return checkpoint(live, projector, mark)
    except Exception:  # a snapshot is only a cache: the next start replays instead
        logger.exception("could not save the working set")
        return None


def keep_working_set(live: LiveState, projector: Projector, *, checkpoint_every: int = CHECKPOINT_EVERY) -> None:
    """After each pass of `projector`, evict from `live`'s working set what its rows now hold (and decisions do
    not need), and save a checkpoint every `checkpoint_every` events (0: never)."""
    projector.after_pass.append(_Eviction(live, projector, checkpoint_every).after_pass)


_TOUCHED_KINDS: Final = {INSTANCE: "instances", WANT: "wants", RUN: "runs", REF: "refs"}


class _Eviction:
    """What `keep_working_set` does after each pass (module doc)."""

    def __init__(self, live: LiveState, projector: Projector, checkpoint_every: int) -> None:
        self.live, self.projector = live, projector
        self.checkpoint_every = checkpoint_every
        self._start_over(live.state)

    def _start_over(self, state: BuildState) -> None:
        """Follow the live state's working set as loaded (at start, or again: `LiveState.load_again`)."""
        working = self.live.working
        assert working is not None and working.state is state, "a live state holding its working set"
        self.working = working
        self.evicted_since = -1  # the `touched.since` of the last eviction: a pass that drained nothing, nothing new
        self.saved = state.head_seq  # (the load's head: from a checkpoint, or no more than a span replayed)
        # The rows' watermarks seen, ascending: the rows are whole at each. A load that tracks from the start
        # (state/store/cold_start.py) tracks from a seq they are whole at.
        touched = state.touched
        self.boundaries: list[int] = [] if touched is None else [touched.since]
        self.settled_since: int | None = None  # the `touched.since` a settle left: what it did not touch is as its row

    def _swapped(self, state: BuildState) -> bool:
        """Whether `state` (the live state, held) is not the one this eviction follows: loaded again since."""
        return state is not self.working.state

    def after_pass(self, _mark: int) -> None:
        written = self.projector.store.records.watermark()  # (read before the head: the rows are whole there)
        with self.live.read() as state:
            if self._swapped(state):
                self._start_over(state)
                return
            head, touched = state.head_seq, state.touched
        if touched is None:
            return
        since = touched.since
        self._seen(written, since)
        known = max((seq for seq in self.boundaries if since <= seq <= head), default=None)
        if known is None and self.settled_since != since:
            return  # nothing the fold holds is known to be as its row yet: wait for its head to pass a watermark
        if written >= head > since:  # another process wrote the rows up to this fold's head or past it
            settled = self.settle(written)
            if settled is None:
                return
            projected = settled
        elif since == self.evicted_since or known is None:
            return  # every held record is looked at each time: not on passes that wrote nothing
        else:
            projected = known
        self._evict(projected)

    def _seen(self, written: int, since: int) -> None:
        boundaries = [seq for seq in self.boundaries if seq >= since]
        if written >= since and (not boundaries or written > boundaries[-1]):
            boundaries.append(written)
        self.boundaries = boundaries[-BOUNDARIES_KEPT:]

    def _evict(self, projected: int) -> None:
        live, working = self.live, self.working
        if self.checkpoint_every and projected - self.saved >= self.checkpoint_every:
            try:
                self.saved = checkpoint(live, self.projector, projected) or self.saved
            except Exception:  # a checkpoint is only a cache: a start after a crash replays more instead
                logger.exception("could not save a checkpoint of the working set")
        else:
            with live.hold() as state:
                touched = state.touched
                if touched is None or touched.since > projected or self._swapped(state):
                    return
                working.evict(working.evictable(projected=projected, for_decisions=True))
        with live.read() as state:
            touched = state.touched
            self.evicted_since = -1 if touched is None or self._swapped(state) else touched.since

    def settle(self, written: int) -> int | None:
        """The records changed since the last look, no longer tracked (evictable) where their rows as of the
        fold's head hold them: all of them when the rows are whole at the head (`written`, the rows' watermark,
        is the head), else those that may go and are found as their row as of the head holds them (the others
        stay tracked). The head it settled at, or None when the fold is past `written` by now: the tracking
        then goes on from where it was (a pass of this process may write what changed since)."""
        working, records = self.working, self.projector.store.records
        with self.live.hold() as state:
            drained, head = state.touched, state.head_seq
            if drained is None or head > written or self._swapped(state):
                return None
            state.touched = after = drained.after(head, len(state.dropped_changes))
            self.settled_since = head
            if head == written:
                return head
            checked: dict[str, list[str]] = {}
            for kind, name in _TOUCHED_KINDS.items():
                held = [key for key in getattr(drained, name) if working.is_held(kind, key)]
                checked[kind] = working.may_go(kind, held, for_decisions=True)
                getattr(after, name).update(set(held).difference(checked[kind]))  # looked at next time
        rows = {}
        with records.engine.connect() as conn:
            for kind, keys in checked.items():
                rows[kind], _ = rows_as_of(conn, records, ROW_KIND[kind], keys, head)
        with self.live.hold() as state:
            touched = state.touched
            if self._swapped(state):
                return None  # (the state it drained is gone: nothing to track again)
            assert touched is not None
            for kind, keys in checked.items():
                again = getattr(touched, _TOUCHED_KINDS[kind])
                row_kind = ROW_KIND[kind]
                for key in keys:
                    row = rows[kind].get(key)
                    if key in again or not working.is_held(kind, key):
                        continue
                    if row is None or decoded(row[1]) != row_value(state, row_kind, key):
                        again.add(key)
        return head
