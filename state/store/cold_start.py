"""A live state that holds its working set (state/fold/cold.py): loaded from the log in bounded memory, then
kept bounded by evicting after each pass of the state store's projector.

Loading replays the log from seq 0, as a whole state's first start does, but evicts as it goes: the store's
rows are whole up to its watermark W, and a record's row (written at or after its last change up to W) holds
it exactly from its last change up to W. So once the replay has folded a record's last change, the record
may go cold: its row is what the fold would hold. Which change is the last is not in the row (a row is
written at a pass's head, or a first projection's), so the replay reads the rows of what each span touched
and evicts those it has brought to what the row holds (a record's parts only grow, so it is never as its row
before its last change). From W on,
nothing goes cold (the rows do not say what follows) and the fold records what it touches, so the
projector's first pass writes those rows (`changes_of`, not a scan) and then eviction goes on after each
pass (`keep_working_set`). A store whose rows are not whole (never projected, or by another format) loads
the whole state: the projector's first pass writes every row, and eviction starts after it (a new
database's rows are whole from its first pass).

What it leaves: the working set's rule holds while this process is the only one folding and projecting its
database (read replicas read it; another folding server may write rows ahead of this fold, which a read
back refuses: `RowAhead`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from partbuild.state.fold.build_state import BuildState
from partbuild.state.fold.cold import INSTANCE, REF, RUN, WANT, WorkingSet
from partbuild.state.fold.touched import Touched
from partbuild.state.log.live import LiveState
from partbuild.state.log.replay import SNAPSHOTS_KEPT, fold_page
from partbuild.state.log.snapshot import SnapshotError, decode_working_set, encode_working_set, working_set_format
from partbuild.state.log.store import EventLog
from partbuild.state.store.changes import ChangeStore
from partbuild.state.store.cold_rows import StoreRows
from partbuild.state.store.projector import Projector
from partbuild.state.store.records import INSTANCE as ROW_INSTANCE
from partbuild.state.store.records import REF as ROW_REF
from partbuild.state.store.records import RUN as ROW_RUN
from partbuild.state.store.records import WANT as ROW_WANT
from partbuild.state.store.records import RecordStore, decoded, row_value

logger = logging.getLogger("partbuild.state.store")

SETTLE_EVERY = 20_000  # events folded between two looks at the rows of what they touched
_ROW_KIND = {INSTANCE: ROW_INSTANCE, WANT: ROW_WANT, RUN: ROW_RUN, REF: ROW_REF}


def rows_whole_at(store: ChangeStore) -> int:
    """The seq the store's rows are whole at (their watermark and the changes' are one), or 0."""
    records = store.records
    mark = store.watermark()
    return mark if mark > 0 and records.watermark() == mark and not records.newer_format() else 0


def load_working_set(
    log: EventLog, store: ChangeStore, *, progress: Callable[[int], None] | None = None
) -> tuple[BuildState, WorkingSet]:
    """The state at the log's head, holding its working set only where the store's rows allow (module doc)."""
    restored = _from_snapshot(log, store)
    if restored is not None:
        state, working = restored
        since = state.head_seq
        state.touched = Touched(since, len(state.dropped_changes))  # the projector's first pass: the tail's rows
        _fold(state, log, since, None, progress, None)
        _say_held(working, f" (from its snapshot at seq {since})")
        return state, working
    state = BuildState()
    whole_at = rows_whole_at(store)
    working = WorkingSet(state, StoreRows(store.records, lambda: state.head_seq, settled_by=whole_at))
    if whole_at:
        settler = _Settler(working, store.records)
        state.touched = Touched(0)
        _fold(state, log, None, whole_at, progress, settler.settle)
        settler.settle()
        state.touched = Touched(state.head_seq, len(state.dropped_changes))  # the projector's first pass
    elif store.watermark() == 0 and store.records.watermark() == 0 and log.head() == 0:
        state.touched = Touched(0)  # a new database: its rows are whole from the first pass on
    _fold(state, log, whole_at if whole_at else None, None, progress, None)
    _say_held(working, "")
    return state, working


def _say_held(working: WorkingSet, how: str) -> None:
    state = working.state
    cold = sum(len(keys) for keys in working.keys.values())
    held = sum(len(dict.keys(getattr(state, names[0]))) for names in WorkingSet.TABLES.values())
    logger.info(
        "holding a working set at seq %d%s: %d records in memory, %d in the store's rows",
        state.head_seq,
        how,
        held,
        cold,
    )


def _from_snapshot(log: EventLog, store: ChangeStore) -> tuple[BuildState, WorkingSet] | None:
    """The working set a clean stop saved, if the store's rows are still as of its seq (nobody projected past
    it: a row written since may be ahead of the fold that reads it back), else None."""
    found = log.snapshots.latest(working_set_format())
    if found is None:
        return None
    seq, payload = found
    records = store.records
    if store.watermark() != seq or records.watermark() != seq or records.newer_format():
        logger.info("not starting from the working set saved at seq %d: the state store has moved since", seq)
        return None
    try:
        state, parts = decode_working_set(payload)
        return state, WorkingSet.restored(state, StoreRows(records, lambda: state.head_seq), parts)
    except (SnapshotError, LookupError, TypeError, ValueError):  # (its parts are not this code's)
        logger.warning("the working set saved at seq %d cannot be read: replaying the log", seq, exc_info=True)
        return None


def save_working_set(live: LiveState, projector: Projector) -> int | None:
    """At a clean stop (nothing folding): project to the head, evict, and save the working set, so the next start
    loads it and folds only the tail (while nobody projects past it meanwhile); the seq saved, or None."""
    working = live.working
    assert working is not None
    try:
        mark = projector.project()
        with live.hold() as state:
            touched = state.touched
            if mark != state.head_seq or projector.store.records.watermark() != mark or touched is None:
                return None
            working.evict(working.evictable(projected=mark, for_decisions=True))
            payload = encode_working_set(working)
        snapshots = live.log.snapshots
        snapshots.save(mark, working_set_format(), payload)
        snapshots.prune(keep=SNAPSHOTS_KEPT)
    except Exception:  # a snapshot is only a cache: the next start replays instead
        logger.exception("could not save the working set")
        return None
    logger.info("saved the working set at seq %d (%d bytes): the next start folds from there", mark, len(payload))
    return mark


def _fold(
    state: BuildState,
    log: EventLog,
    after: int | None,
    upto: int | None,
    progress: Callable[[int], None] | None,
    settle: Callable[[], None] | None,
) -> None:
    for page in log.iter_payload_pages(after_seq=after or 0, upto_seq=upto, page_size=SETTLE_EVERY):
        fold_page(state, page)
        if settle is not None:
            settle()
        if progress is not None:
            progress(state.head_seq)


class _Settler:
    """Evicts, as a replay goes, each record the replay has brought to what its row holds (module doc)."""

    def __init__(self, working: WorkingSet, records: RecordStore) -> None:
        self.working = working
        self.records = records

    def settle(self) -> None:
        working = self.working
        state = working.state
        touched = state.touched
        assert touched is not None
        state.touched = Touched(state.head_seq, len(state.dropped_changes))
        touched_by_kind = {INSTANCE: touched.instances, WANT: touched.wants, RUN: touched.runs, REF: touched.refs}
        ready: dict[str, list[str]] = {}
        with self.records.engine.connect() as conn:
            for kind, keys in touched_by_kind.items():
                held = working.may_go(kind, [key for key in keys if _held(working, kind, key)], for_decisions=True)
                rows = self.records.rows(conn, [(_ROW_KIND[kind], key) for key in held])
                ready[kind] = [
                    key for key in held if self._reached(_ROW_KIND[kind], key, rows.get((_ROW_KIND[kind], key)))
                ]
        working.evict(ready)

    def _reached(self, kind: int, key: str, row: tuple[int, bytes] | None) -> bool:
        """Whether the record is as its row holds it: the row was written by the replay's head (at or after the
        record's last change), or holds what the record is now (its last change is behind: a record's parts
        only grow, each change with a seq, so it never comes back to what it was; a record is touched again
        whenever it changes, so one that is not yet as its row is looked at again)."""
        if row is None:
            return False  # dropped later (retention), or named by no row: held until the fold drops it
        seq, body = row
        return seq <= self.working.state.head_seq or decoded(body) == row_value(self.working.state, kind, key)


def _held(working: WorkingSet, kind: str, key: str) -> bool:
    state = working.state
    if kind != REF:
        return dict.__contains__(getattr(state, WorkingSet.TABLES[kind][0]), key)
    return any(dict.__contains__(getattr(state, name), key) for name in WorkingSet.TABLES[REF])


def keep_working_set(live: LiveState, projector: Projector, working: WorkingSet) -> None:
    """After each pass of `projector`, evict from `live` what its rows now hold (and decisions do not need)."""
    records = projector.store.records
    warned = False
    evicted_since = -1  # the `touched.since` of the last eviction: a pass that drained nothing evicts nothing new

    def evict(_mark: int) -> None:
        nonlocal warned, evicted_since
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
        with live.hold() as state:
            touched = state.touched
            if touched is None or touched.since > written:
                return
            working.evict(working.evictable(projected=written, for_decisions=True))
            evicted_since = touched.since

    projector.after_pass.append(evict)
