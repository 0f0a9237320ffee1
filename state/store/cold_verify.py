"""`partbuild replay --verify --bounded`: the state store rebuilt from the log in a scratch database, in bounded
memory, then compared with the real one table by table in key order.

The replay is `replay_in_working_set`'s (state/store/cold_replay.py); every 20,000 events it projects what
the fold touched as a live process's projector does: the changes and the counts they make into a scratch
store, up to the real store's watermark (a write falls on it), and the records' rows into another. The
writer of the spans (`partbuild replay --bounded --verify`'s: a child process, while the fold goes on) writes
both; a span that holds a retention is written in line, with the deletions it makes (`ChangeStore.write`).
The two stores are then compared table by table in key order, a chunk of rows at a time from each
(state/store/store_compare.py); with the writer in a child, the child compares them while this process makes the
replay's digest. Nothing is held but the working set and a chunk of each side: memory does not grow with the
store.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from partbuild.state.fold.cold import INSTANCE, WorkingSet
from partbuild.state.fold.history import dropped_deltas_between
from partbuild.state.log.audit import AuditReport, audit_target
from partbuild.state.log.store import EventLog
from partbuild.state.migrate import open_migrated_engine
from partbuild.state.queries.changes import changes_of
from partbuild.state.store.changes import ChangeStore, change_row
from partbuild.state.store.cold_digest import working_set_digest
from partbuild.state.store.cold_replay import DEFAULT_EVERY, Write, dump_rows, replay_in_working_set
from partbuild.state.store.counts import Counts, count_rows
from partbuild.state.store.records import RecordStore
from partbuild.state.store.scratch_writer import ChangeRows, RowWriter, Span


def project_into(scratch: ChangeStore, real: ChangeStore, upto: int, settle: Callable[[], None]) -> Write:
    """A `Write` projecting the fold's changes and the counts they make into `scratch` up to seq `upto`, and the
    rows (the grid cells with them) into the scratch rows; the rows alone after `upto`. The change and count rows
    go to the writer with the rows (the counts kept here from span to span); a span that holds a retention
    (read from the real log, `real`'s database) is written in line once the writer has written every span
    before (`settle`), its dropped instances the fold's to say."""

    dump = dump_rows()
    counts: Counts = {}  # the scratch store's counts at the span's first seq

    def write(working: WorkingSet, first: int, last: int) -> Span:
        span = dump(working, first, last)
        if last > upto:
            return span
        state = working.state
        touched = state.touched
        assert touched is not None
        changes = changes_of(state, first, last, touched)
        deltas = dropped_deltas_between(state, first, last, touched.dropped_from)
        rows = count_rows(counts, changes, deltas)
        counts.update(((kind, state_code), total) for kind, state_code, _, total in rows)
        if not real.retention_between(first, last):
            return Span(span.rows, ChangeRows(first, last, [change_row(change) for change in changes], rows))

        def dropped(ids: Any) -> set[str]:  # not held nor cold: the fold dropped them (nothing read back)
            return {uuid for uuid in ids if not working.holds(INSTANCE, uuid)}

        settle()
        if not scratch.write(first, last, changes, dropped, deltas, retention=True):
            raise RuntimeError(f"the scratch store's watermark is not at {first}")
        return span

    return write


def bounded_verify(
    log: EventLog,
    store: ChangeStore,
    scratch_dir: str | None = None,
    *,
    as_of: int | None = None,
    rejected_limit: int = 20,
    progress: Callable[[int], None] | None = None,
    every: int = DEFAULT_EVERY,
    in_child: bool = False,
) -> AuditReport:
    """`bounded_audit` with the store checked (at the head: `as_of` None), the report's `problems` saying where
    the real store differs from the one the replay rebuilt. `every`: events between two writes of the scratch
    store; `in_child`: what each span writes (the records' rows into one scratch database, the changes and
    counts into another) written from a process of its own (`RowWriter`) while the fold goes on."""
    head = log.head()
    target = audit_target(head, as_of)
    mark = store.watermark() if target == head else 0
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="partbuild-verify-", dir=scratch_dir) as folder:
        engines = [open_migrated_engine(f"sqlite:///{Path(folder) / name}", True) for name in ("changes.db", "rows.db")]
        try:
            scratch, rows = ChangeStore(engines[0]), RecordStore(engines[1])
            with RowWriter(rows, scratch, in_child=in_child) as writer:
                write = project_into(scratch, store, min(mark, target), writer.wait)
                working = replay_in_working_set(
                    log,
                    rows,
                    upto_seq=target,
                    every=every,
                    write=write,
                    stop_at=mark or None,
                    progress=progress,
                    writer=writer,
                )
                problems = _gaps(working, target)
                compared = target == head and not problems
                if compared:  # (in a child: compared there while the digest is made here)
                    writer.compare(store, mark, whole=store.records.watermark() == head)
                digest = working_set_digest(working, rows)
                if compared:
                    problems = writer.differences()
        finally:
            for engine in engines:
                engine.dispose()
    state = working.state
    report = AuditReport.of_state(state, head, digest, rejected_limit, 0, state.head_seq, time.perf_counter() - started)
    report.problems, report.verified = problems, not problems
    return report


def _gaps(working: WorkingSet, target: int) -> list[str]:
    state = working.state
    return [] if state.head_seq == target else [f"the replay ended at seq {state.head_seq}, not {target}"]
