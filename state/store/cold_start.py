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

A start from a checkpoint (state/store/checkpoints.py) loads the working set saved at seq S and reads each
record it left in the rows back the first time as of S (its row, or the version kept when the row moved past
S: state/store/row_versions.py), folding from S to W while settling as above; then it goes on as from W.

Other processes may fold and project the same database meanwhile, writing rows past W: every read here is as
of W (or S), from the versions those writes keep, which the load asks for before its first read (`hold`: its
head registered, state/ops/projectors.py).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from partbuild.state.fold.build_state import BuildState
from partbuild.state.fold.cold import INSTANCE, REF, RUN, WANT, WorkingSet
from partbuild.state.fold.touched import Touched
from partbuild.state.log.replay import fold_page
from partbuild.state.log.snapshot import SnapshotError, decode_working_set, working_set_format
from partbuild.state.log.store import EventLog
from partbuild.state.store.changes import ChangeStore
from partbuild.state.store.cold_rows import ROW_KIND, AsOfCheckpoint, StoreRows, rows_as_of
from partbuild.state.store.records import RecordStore, decoded, records_watermark, row_value
from partbuild.state.store.row_versions import floor

logger = logging.getLogger("partbuild.state.store")

SETTLE_EVERY = 20_000  # events folded between two looks at the rows of what they touched


def rows_whole_at(store: ChangeStore) -> int:
    """The seq the store's rows are whole at (their watermark and the changes' are one), or 0."""
    records = store.records
    mark = store.watermark()
    return mark if mark > 0 and records.watermark() == mark and not records.newer_format() else 0


def load_working_set(
    log: EventLog,
    store: ChangeStore,
    *,
    progress: Callable[[int], None] | None = None,
    hold: Callable[[int], None] | None = None,
) -> tuple[BuildState, WorkingSet]:
    """The state at the log's head, holding its working set only where the store's rows allow (module doc).
    `hold(seq)`: keep the rows' versions from `seq` on for this process, before its first read (another
    process may write rows meanwhile); its reads are as of that seq or later."""
    if hold is not None:
        with store.records.engine.connect() as conn:
            kept_for, written = floor(conn), records_watermark(conn)
        hold(written if kept_for is None else min(kept_for, written))
    restored = _from_checkpoint(log, store)
    if restored is not None:
        state, working, whole_at = restored
        since = state.head_seq
        if since < whole_at:  # after a crash: the rows moved on since the checkpoint; the tail they hold, settled
            settler = _Settler(working, store.records, whole_at)
            state.touched = Touched(since, len(state.dropped_changes))
            _fold(state, log, since, whole_at, progress, settler.settle)
            settler.settle()
        _stop_reading_as_of_checkpoint(working)
        state.touched = Touched(state.head_seq, len(state.dropped_changes))  # the projector's first pass
        _fold(state, log, state.head_seq, None, progress, None)
        _say_held(working, f" (from its checkpoint at seq {since}, the rows' at {whole_at})")
        return state, working
    state = BuildState()
    whole_at = rows_whole_at(store)
    working = WorkingSet(state, StoreRows(store.records, lambda: state.head_seq, settled_by=whole_at))
    if whole_at:
        settler = _Settler(working, store.records, whole_at)
        state.touched = Touched(0)
        _fold(state, log, None, whole_at, progress, settler.settle)
        settler.settle()
        state.touched = Touched(state.head_seq, len(state.dropped_changes))  # the projector's first pass
    elif store.watermark() == 0 and store.records.watermark() == 0 and log.head() == 0:
        state.touched = Touched(0)  # a new database: its rows are whole from the first pass on
    _fold(state, log, whole_at if whole_at else None, None, progress, None)
    _say_held(working, "")
    return state, working


def _stop_reading_as_of_checkpoint(working: WorkingSet) -> None:
    """At the rows' watermark, a record not read back since the checkpoint has not changed since (the fold of
    the tail would have read it): its row holds it, whatever seq it was written at, up to the watermark."""
    source = working.source
    assert isinstance(source, StoreRows)
    source.checkpoint = None


def _say_held(working: WorkingSet, how: str) -> None:
    state = working.state
    held, cold = working.sizes()
    logger.info(
        "holding a working set at seq %d%s: %d records in memory, %d in the store's rows",
        state.head_seq,
        how,
        held,
        cold,
    )


def _from_checkpoint(log: EventLog, store: ChangeStore) -> tuple[BuildState, WorkingSet, int] | None:
    """The working set saved at the newest checkpoint (or clean stop), with the seq the rows are whole at, if the
    rows still hold its records as of its seq: nobody projected past it, or the versions of the rows it held
    were kept (state/store/row_versions.py). Else None."""
    records = store.records
    whole_at = rows_whole_at(store)
    with records.engine.connect() as conn:
        kept_for = floor(conn)
    found = log.snapshots.latest(working_set_format(), max_seq=kept_for)
    if found is None:
        return None
    seq, payload = found
    if not whole_at or seq > whole_at or (seq < whole_at and seq != kept_for):
        logger.info("not starting from the working set saved at seq %d: the state store has moved since", seq)
        return None
    checkpoint = AsOfCheckpoint(seq) if seq < whole_at else None
    try:
        state, parts = decode_working_set(payload)
        source = StoreRows(records, lambda: state.head_seq, settled_by=whole_at, checkpoint=checkpoint)
        return state, WorkingSet.restored(state, source, parts), whole_at
    except (SnapshotError, LookupError, TypeError, ValueError):  # (its parts are not this code's)
        logger.warning("the working set saved at seq %d cannot be read: replaying the log", seq, exc_info=True)
        return None


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
    """Evicts, as a replay goes, each record the replay has brought to what its row holds as of `whole_at`, the
    seq the rows are whole at (module doc)."""

    def __init__(self, working: WorkingSet, records: RecordStore, whole_at: int) -> None:
        self.working = working
        self.records = records
        self.whole_at = whole_at

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
                held = working.may_go(kind, [key for key in keys if working.is_held(kind, key)], for_decisions=True)
                row_kind = ROW_KIND[kind]
                rows, _ = rows_as_of(conn, self.records, row_kind, held, max(state.head_seq, self.whole_at))
                ready[kind] = [key for key in held if self._reached(row_kind, key, rows.get(key))]
        working.evict(ready)

    def _reached(self, kind: int, key: str, row: tuple[int, bytes] | None) -> bool:
        """Whether the record is as its row at `whole_at` holds it: that row was written by the replay's head
        (at or after the record's last change: the rows are whole there), or holds what the record is now (its
        last change is behind: a record's parts only grow, each change with a seq, so it never comes back to what
        it was; a record is touched again whenever it changes, so one that is not yet as its row is looked at
        again)."""
        if row is None:
            return False  # dropped later (retention), or named by no row: held until the fold drops it
        seq, body = row
        return seq <= self.working.state.head_seq or decoded(body) == row_value(self.working.state, kind, key)
