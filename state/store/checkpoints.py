"""A working set kept bounded while its process runs, and saved so that a start, after a clean stop or a crash,
folds only the tail of the log (state/store/cold_start.py loads it).

After each pass of the state store's projector, what the rows now hold (and decisions do not need) is evicted
(`keep_working_set`). Every `CHECKPOINT_EVERY` events it is also saved as a checkpoint: the working set at the
state's head in a snapshot of its own format, and that seq set as the floor of the rows kept as they were
(state/store/rows_before.py), so the records the checkpoint left in the rows can be read back as of it however
far the rows move on before the next start. A clean stop saves one at the head, after a last pass
(`save_working_set`), so the next start folds nothing but what was appended after it.
"""

from __future__ import annotations

import logging
import time
from typing import Final

from partbuild.state.db import begin_write
from partbuild.state.fold.cold import WorkingSet
from partbuild.state.log.live import LiveState
from partbuild.state.log.replay import SNAPSHOTS_KEPT
from partbuild.state.log.snapshot import WorkingSetSnapshot, working_set_format
from partbuild.state.store.projector import Projector
from partbuild.state.store.rows_before import set_floor

logger = logging.getLogger("partbuild.state.store")

CHECKPOINT_EVERY: Final = 50_000  # events folded between two checkpoints of a running working set


def checkpoint(live: LiveState, projector: Projector, projected: int) -> int | None:
    """Evict what the rows hold as of `projected` (their watermark), save the working set at the state's head,
    and keep the rows as they are now for it (called between two passes of `projector`: nothing writes rows
    meanwhile); the seq saved, or None."""
    working = live.working
    assert working is not None
    with live.hold() as state:
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


def keep_working_set(
    live: LiveState, projector: Projector, working: WorkingSet, *, checkpoint_every: int = CHECKPOINT_EVERY
) -> None:
    """After each pass of `projector`, evict from `live` what its rows now hold (and decisions do not need), and
    save a checkpoint every `checkpoint_every` events (0: never)."""
    records = projector.store.records
    warned = False
    evicted_since = -1  # the `touched.since` of the last eviction: a pass that drained nothing evicts nothing new
    saved = live.state.head_seq  # (the load's head: it starts from a checkpoint, or replays no more than a span)

    def evict(_mark: int) -> None:
        nonlocal warned, evicted_since, saved
        if projector.spans_lost and not warned:
            warned = True
            logger.error(
                "another process folds and projects this database: a working set must be the only one (a row it "
                "writes ahead of this fold cannot be read back); run the others as read replicas (`serve --replica`)"
            )
        touched = live.state.touched  # (a hint, read again under the lock)
        if touched is None or touched.since == evicted_since:
            return  # every held record is looked at each time: not on passes that wrote nothing
        written = records.watermark()  # the rows are whole up to it: the evicted are read back from them
        if checkpoint_every and written - saved >= checkpoint_every:
            try:
                saved = checkpoint(live, projector, written) or saved
            except Exception:  # a checkpoint is only a cache: a start after a crash replays more instead
                logger.exception("could not save a checkpoint of the working set")
            evicted_since = touched.since
            return
        with live.hold() as state:
            touched = state.touched
            if touched is None or touched.since > written:
                return
            working.evict(working.evictable(projected=written, for_decisions=True))
            evicted_since = touched.since

    projector.after_pass.append(evict)
