"""A replay of the log in bounded memory: a working set (state/fold/cold.py) whose cold records go to a scratch
state store (a database of its own, `records`), written every `every` events, then evicted.

The rows of a span are made in the folding process (they read the state) and written by a `RowWriter`
(state/store/scratch_writer.py): `partbuild replay --bounded`'s from a process of its own, while the fold goes
on. A record goes cold once the rows of the span before are known to be in, so a read back never waits.

What it holds at the end is the state's working set; its digest (`working_set_digest`, state/store/
cold_digest.py) is the digest of the state a full replay holds. Memory is what the fold touched in the last
two spans of `every` events, the records it keeps whatever happens (active wants, what stale instances
serve) and about 10 bytes per cold key (683 MiB at 10M instances); the scratch store grows with the records
(about 1.2 GB per million instances). `bounded_audit` is `partbuild replay --bounded`: the audit's report
from such a replay.
"""

from __future__ import annotations

import contextlib
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
from partbuild.state.store.scratch_writer import RowWriter, Span

DEFAULT_EVERY = 20_000  # events folded between two writes of the scratch rows (and evictions)
PAGE = 20_000  # events read from the log at a time, at most


# What the fold touched in (first, last] (the state's `touched`, tracked since `first`) made into what the
# scratch stores' `RowWriter` writes (None: nothing).
Write = Callable[[WorkingSet, int, int], Span | None]


def dump_rows(*, cells: bool = True) -> Callable[[WorkingSet, int, int], Span]:
    """A `Write` of the rows alone (the records' table and what goes with it; the grid cells unless `cells` is
    False: a store only the replay reads)."""

    def write(working: WorkingSet, first: int, _last: int) -> Span:
        state = working.state
        assert state.touched is not None
        return Span(rows_of(state, touched_keys(state, state.touched), first, cells=cells))

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
    writer: RowWriter | None = None,
) -> WorkingSet:
    """The state as of `upto_seq` (default: the head), folded from seq 0 in a working set over `records` (a
    scratch store: empty, of this database or another). `write`: what is written every `every` events (default:
    the rows, `dump_rows`); `stop_at`: a seq a write falls on (where another store's watermark is); `writer`:
    what writes the spans (default: in line into `records`; the caller's stays open). Every row is in when it
    returns."""
    state = BuildState()
    state.touched = Touched(0)
    ours = writer is None
    writer = writer or RowWriter(records)
    working = WorkingSet(state, StoreRows(records, lambda: state.head_seq, before_read=writer.wait))
    write = write or dump_rows()
    target = log.head() if upto_seq is None else upto_seq
    written = 0
    with writer if ours else contextlib.nullcontext(writer):
        for end in sorted({*([stop_at] if stop_at is not None and 0 < stop_at < target else []), target}):
            for page in log.iter_payload_pages(after_seq=state.head_seq, upto_seq=end, page_size=min(every, PAGE)):
                fold_page(state, page)
                if state.head_seq - written >= every:
                    written = write_and_evict(working, write, written, writer)
                    if progress is not None:
                        progress(state.head_seq)
            written = write_and_evict(working, write, written, writer)
        writer.wait()
    return working


def write_and_evict(working: WorkingSet, write: Write, written: int, writer: RowWriter) -> int:
    """Hand what the fold touched since seq `written` to `writer` (`write`), after evicting, once the span
    before is in, every record the spans before wrote (not touched since `written`; this span's records stay
    while its rows are written, so a read back never waits); returns the seq the rows go up to (the state's
    head)."""
    state = working.state
    span = write(working, written, state.head_seq) if state.head_seq > written else None
    writer.wait()
    working.evict(working.evictable(projected=written))
    state.touched = Touched(state.head_seq, len(state.dropped_changes))  # no chain kept: no reader asks
    if span is not None:
        writer.submit(*span)
    return state.head_seq


def bounded_audit(
    log: EventLog,
    scratch_dir: str | None = None,
    *,
    as_of: int | None = None,
    rejected_limit: int = 20,
    progress: Callable[[int], None] | None = None,
    in_child: bool = False,
) -> AuditReport:
    """`audit` (state/log/audit.py) from a replay in a working set: the same head, digest, counts and
    rejections, in bounded memory; the cold records go to a scratch SQLite database in a temporary directory
    (under `scratch_dir`, deleted after: about 1.2 GB per million instances while it runs), written from a
    process of their own with `in_child` (what `partbuild replay --bounded` does)."""
    head = log.head()
    target = audit_target(head, as_of)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="partbuild-replay-", dir=scratch_dir) as folder:
        engine = open_migrated_engine(f"sqlite:///{Path(folder) / 'scratch.db'}", True)
        try:
            records = RecordStore(engine)
            write = dump_rows(cells=False)  # no grid reads them
            with RowWriter(records, in_child=in_child) as writer:
                working = replay_in_working_set(
                    log, records, upto_seq=target, progress=progress, write=write, writer=writer
                )
            digest = working_set_digest(working, records)
        finally:
            engine.dispose()
    state = working.state
    seconds = time.perf_counter() - started
    return AuditReport.of_state(state, head, digest, rejected_limit, 0, state.head_seq, seconds)
