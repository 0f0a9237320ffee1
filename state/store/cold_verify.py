"""`partbuild replay --verify --bounded`: the state store rebuilt from the log in a scratch database, in bounded
memory, then compared with the real one table by table in key order.

The replay is `replay_in_working_set`'s (state/store/cold_replay.py); every 20,000 events it projects what
the fold touched into the scratch store as a live process's projector does (the changes, the counts they
make, the records' rows, and the deletions of a retention: `ChangeStore.write`), up to the real store's
watermark (a write falls on it), and the rows alone after it. The two stores are then read side by side in
key order, a row at a time from each: the changes and the counts up to that watermark, and, when the real
store's records are whole at the log's head, the records (their values, not the bytes they were pickled
to, nor the seq they were written at), the heartbeats, the wants by ref and the grid cells (the seq each was
written at aside). Nothing is held but the working set and a row of each side: memory does not grow with
the store.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from partbuild.state.fold.cold import INSTANCE, WorkingSet
from partbuild.state.fold.history import dropped_deltas_between
from partbuild.state.log.audit import AuditReport, audit_target
from partbuild.state.log.store import EventLog
from partbuild.state.migrate import open_migrated_engine
from partbuild.state.queries.changes import changes_of
from partbuild.state.schema import state_cells, state_changes, state_counts, state_heartbeats, state_want_refs
from partbuild.state.schema import state_records as records_table
from partbuild.state.store.changes import ChangeStore
from partbuild.state.store.cold_digest import working_set_digest
from partbuild.state.store.cold_replay import DEFAULT_EVERY, Write, dump_rows, replay_in_working_set
from partbuild.state.store.records import KIND_NAMES, RecordPass, decoded, rows_of, touched_keys

Row = tuple[Any, ...]


def project_into(scratch: ChangeStore, real: ChangeStore, upto: int) -> Write:
    """A `Write` projecting the fold's changes, counts and rows into `scratch` up to seq `upto` (the rows alone
    after it); whether a span holds a retention is read from the real log (`real`'s database)."""

    dump = dump_rows(scratch.records)

    def write(working: WorkingSet, first: int, last: int) -> None:
        if last > upto:
            dump(working, first, last)
            return
        state = working.state
        touched = state.touched
        assert touched is not None
        rows = rows_of(state, touched_keys(state, touched), first)
        changes = changes_of(state, first, last, touched)
        deltas = dropped_deltas_between(state, first, last, touched.dropped_from)

        def dropped(ids: Any) -> set[str]:  # not held nor cold: the fold dropped them (nothing read back)
            return {uuid for uuid in ids if not working.holds(INSTANCE, uuid)}

        retention = real.retention_between(first, last)
        written = scratch.write(
            first, last, changes, dropped, deltas, RecordPass(rows, whole=True), retention=retention
        )
        assert written, f"the scratch store's watermark is not at {first}"

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
) -> AuditReport:
    """`bounded_audit` with the store checked (at the head: `as_of` None), the report's `problems` saying where
    the real store differs from the one the replay rebuilt. `every`: events between two writes of the scratch
    store."""
    head = log.head()
    target = audit_target(head, as_of)
    mark = store.watermark() if target == head else 0
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="partbuild-verify-", dir=scratch_dir) as folder:
        engine = open_migrated_engine(f"sqlite:///{Path(folder) / 'scratch.db'}", True)
        try:
            scratch = ChangeStore(engine)
            write = project_into(scratch, store, min(mark, target))
            working = replay_in_working_set(
                log, scratch.records, upto_seq=target, every=every, write=write, stop_at=mark or None, progress=progress
            )
            digest = working_set_digest(working, scratch.records)
            problems = _gaps(working, target)
            if target == head and not problems:
                problems = store_differences(store, scratch, mark, whole=store.records.watermark() == head)
        finally:
            engine.dispose()
    state = working.state
    report = AuditReport.of_state(state, head, digest, rejected_limit, 0, state.head_seq, time.perf_counter() - started)
    report.problems, report.verified = problems, not problems
    return report


def _gaps(working: WorkingSet, target: int) -> list[str]:
    state = working.state
    return [] if state.head_seq == target else [f"the replay ended at seq {state.head_seq}, not {target}"]


def store_differences(real: ChangeStore, scratch: ChangeStore, upto: int, *, whole: bool) -> list[str]:
    """Where `real` differs from `scratch` (rebuilt from the log): the changes and counts up to seq `upto`, and
    the records and what goes with them when `whole` (the real ones are whole at the log's head); [] if none."""
    real_engine, scratch_engine = real.records.engine, scratch.records.engine
    tables: list[tuple[str, sa.Table, Any, Callable[[Row], Row]]] = [
        ("changes", state_changes, state_changes.c.seq <= upto, _same),
        ("counts", state_counts, state_counts.c.seq <= upto, _same),
    ]
    if whole:
        tables += [
            ("records", records_table, sa.true(), _record_values),
            ("heartbeats", state_heartbeats, sa.true(), _same),
            ("wants by ref", state_want_refs, sa.true(), _same),
            ("grid cells", state_cells, sa.true(), _cell_values),
        ]
    for name, table, where, values in tables:
        # The key's columns come first in each of these tables, so a row's first values are its key.
        query = sa.select(table).where(where).order_by(*table.primary_key.columns)
        keyed = len(table.primary_key.columns)
        found = _first_difference(_rows(real_engine, query), _rows(scratch_engine, query), keyed, values)
        if found is not None:
            return [f"the state store's {name} differ from the replay's: {found}"]
    return []


def _rows(engine: Engine, query: sa.Select[Any]) -> Iterator[Row]:
    with engine.connect() as conn:
        for row in conn.execution_options(yield_per=5000).execute(query):
            yield tuple(row)


def _first_difference(
    real: Iterator[Row], replayed: Iterator[Row], keyed: int, values: Callable[[Row], Row]
) -> str | None:
    """The first row the two sides (both in key order: their first `keyed` values) disagree on, said as what
    is wrong with the real one."""
    stored, expected = next(real, None), next(replayed, None)
    while stored is not None or expected is not None:
        if expected is None or (stored is not None and stored[:keyed] < expected[:keyed]):
            return f"stored {_said(stored)}, which the replay does not have"
        if stored is None or expected[:keyed] < stored[:keyed]:
            return f"no row of {_said(expected)}, which the replay has"
        if values(stored) != values(expected):
            return f"stored {_said(stored)}, replayed {_said(expected)}"
        stored, expected = next(real, None), next(replayed, None)
    return None


def _same(row: Row) -> Row:
    return row


def _record_values(row: Row) -> Row:
    """A record's row as what it holds: its key, values (decoded), created and ended seqs; not its write seq."""
    kind, key, _seq, body, created, closed = row
    return (kind, key, decoded(body), created, closed)


def _cell_values(row: Row) -> Row:
    """A grid cell's row without the seq it was written at."""
    return (row[0], *row[2:])


def _said(row: Row | None) -> str:
    if row is None:
        return "none"
    if len(row) == 6 and isinstance(row[3], bytes):  # a record's row
        return f"the row of {KIND_NAMES[row[0]]} {row[1]!r} (created at {row[4]}, ended at {row[5]})"
    return repr(row)
