"""A replay of the log in bounded memory: a working set (state/fold/cold.py) whose cold records go to a scratch
state store (a database of its own, `records`), written every `every` events, then evicted.

What it holds at the end is the state's working set; its digest (`working_set_digest`, state/store/
cold_digest.py) is the digest of the state a full replay holds. Memory is what the fold touched in the last
`every` events, the records it keeps whatever happens (active wants, what stale instances serve) and about 10
bytes per cold key (683 MiB at 10M instances); the scratch store grows with the records (about 1.2 GB per
million instances). `bounded_audit` is `partbuild replay --bounded`: the audit's report from such a replay.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from partbuild.state.fold.build_state import BuildState
from partbuild.state.fold.cold import WorkingSet
from partbuild.state.fold.touched import Touched
from partbuild.state.log.audit import AuditReport, audit_target
from partbuild.state.log.replay import fold_page
from partbuild.state.log.store import EventLog
from partbuild.state.migrate import open_migrated_engine
from partbuild.state.store.cold_digest import working_set_digest
from partbuild.state.store.cold_rows import StoreRows
from partbuild.state.store.records import RecordStore, rows_of, touched_keys

DEFAULT_EVERY = 20_000  # events folded between two writes of the scratch rows (and evictions)
PAGE = 20_000  # events read from the log at a time, at most


# Writes what the fold touched in (first, last] (the state's `touched`, tracked since `first`) to a scratch store.
Write = Callable[[WorkingSet, int, int], None]


def dump_rows(records: RecordStore) -> Write:
    """A `Write` of the rows alone (the records' table and what goes with it)."""

    def write(working: WorkingSet, first: int, _last: int) -> None:
        state = working.state
        assert state.touched is not None
        records.dump(rows_of(state, touched_keys(state, state.touched), first))

    return write


def replay_in_working_set(
    log: EventLog,
    records: RecordStore,
    *,
    upto_seq: int | None = None,
    every: int = DEFAULT_EVERY,
    progress: Callable[[int], None] | None = None,
    write: Write | None = None,
    stop_at: int | None = None,
) -> WorkingSet:
    """The state as of `upto_seq` (default: the head), folded from seq 0 in a working set over `records` (a
    scratch store: empty, of this database or another). `write`: what is written every `every` events (default:
    the rows, `dump_rows`); `stop_at`: a seq a write falls on (where another store's watermark is)."""
    state = BuildState()
    state.touched = Touched(0)
    working = WorkingSet(state, StoreRows(records, lambda: state.head_seq))
    write = write or dump_rows(records)
    target = log.head() if upto_seq is None else upto_seq
    written = 0
    for end in sorted({*([stop_at] if stop_at is not None and 0 < stop_at < target else []), target}):
        for page in log.iter_payload_pages(after_seq=state.head_seq, upto_seq=end, page_size=min(every, PAGE)):
            fold_page(state, page)
            if state.head_seq - written >= every:
                written = write_and_evict(working, write, written)
                if progress is not None:
                    progress(state.head_seq)
        written = write_and_evict(working, write, written)
    return working


def write_and_evict(working: WorkingSet, write: Write, written: int) -> int:
    """Write what the fold touched since seq `written` (`write`), then evict every record it may; returns the
    seq they are written to (the state's head)."""
    state = working.state
    if state.head_seq > written:
        write(working, written, state.head_seq)
    state.touched = Touched(state.head_seq, len(state.dropped_changes))  # no chain kept: no reader asks
    working.evict(working.evictable())
    return state.head_seq


def bounded_audit(
    log: EventLog,
    scratch_dir: str | None = None,
    *,
    as_of: int | None = None,
    rejected_limit: int = 20,
    progress: Callable[[int], None] | None = None,
) -> AuditReport:
    """`audit` (state/log/audit.py) from a replay in a working set: the same head, digest, counts and
    rejections, in bounded memory; the cold records go to a scratch SQLite database in a temporary directory
    (under `scratch_dir`, deleted after: about 1.2 GB per million instances while it runs)."""
    head = log.head()
    target = audit_target(head, as_of)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="partbuild-replay-", dir=scratch_dir) as folder:
        engine = open_migrated_engine(f"sqlite:///{Path(folder) / 'scratch.db'}", True)
        try:
            records = RecordStore(engine)
            working = replay_in_working_set(log, records, upto_seq=target, progress=progress)
            digest = working_set_digest(working, records)
        finally:
            engine.dispose()
    state = working.state
    seconds = time.perf_counter() - started
    return AuditReport.of_state(state, head, digest, rejected_limit, 0, state.head_seq, seconds)
