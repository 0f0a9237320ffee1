"""`partbuild replay --verify --bounded`: the state store rebuilt from the log in a scratch database, in bounded
memory, then compared with the real one table by table in key order.

The replay is `replay_in_working_set`'s (state/store/cold_replay.py); every 20,000 events it projects what
the fold touched as a live process's projector does: the changes and the counts they make into a scratch
store, up to the real store's watermark (a write falls on it), and the records' rows into another. The
writer of the spans (`partbuild replay --bounded --verify`'s: a child process, while the fold goes on) writes
both; a span that holds a retention is written in line, with the deletions it makes (`ChangeStore.write`).
The two stores are then read side by side in key order, a chunk of rows at a time from each
(state/store/row_stream.py): the changes and the counts up to that watermark, and, when the real store's records
are whole at the log's head, the records (their values, not the bytes they were pickled to, nor the seq they
were written at), the heartbeats, the wants by ref and the grid cells (the seq each was written at aside). Two
chunks that are equal are passed over at once (equal rows hold equal values); only where they are not are their
rows compared one by one, and a record's row decoded. Nothing is held but the working set and a chunk of each
side: memory does not grow with the store.
"""

from __future__ import annotations

import itertools
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import closing
from pathlib import Path
from typing import Any, NamedTuple

import sqlalchemy as sa

from partbuild.state.fold.cold import INSTANCE, WorkingSet
from partbuild.state.fold.history import dropped_deltas_between
from partbuild.state.log.audit import AuditReport, audit_target
from partbuild.state.log.store import EventLog
from partbuild.state.migrate import open_migrated_engine
from partbuild.state.queries.changes import changes_of
from partbuild.state.schema import state_cells, state_changes, state_counts, state_heartbeats, state_want_refs
from partbuild.state.schema import state_records as records_table
from partbuild.state.store.changes import ChangeStore, change_row
from partbuild.state.store.cold_digest import working_set_digest
from partbuild.state.store.cold_replay import DEFAULT_EVERY, Write, dump_rows, replay_in_working_set
from partbuild.state.store.counts import Counts, count_rows
from partbuild.state.store.records import KIND_NAMES, RecordStore, decoded
from partbuild.state.store.row_stream import Row, engine_chunks
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
            digest = working_set_digest(working, rows)
            problems = _gaps(working, target)
            if target == head and not problems:
                problems = store_differences(store, scratch, rows, mark, whole=store.records.watermark() == head)
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


def store_differences(
    real: ChangeStore, scratch: ChangeStore, rows: RecordStore, upto: int, *, whole: bool
) -> list[str]:
    """Where `real` differs from the store rebuilt from the log (its changes and counts in `scratch`, its records'
    rows in `rows`): the changes and counts up to seq `upto`, and the records and what goes with them when
    `whole` (the real ones are whole at the log's head); [] if none."""
    real_engine = real.records.engine
    for table in _tables(upto, whole):
        replayed_engine = rows.engine if table.of_records else scratch.records.engine
        with (
            closing(engine_chunks(real_engine, table.query)) as stored,
            closing(engine_chunks(replayed_engine, table.query)) as replayed,
        ):
            found = _first_difference(stored, replayed, table)
        if found is not None:
            return [f"the state store's {table.name} differ from the replay's: {found}"]
    return []


class _Table(NamedTuple):
    """A table as the two stores are compared: its rows in key order (the key's columns come first, so a
    row's first `keyed` values are its key), what of two rows must agree, and how a row is said."""

    name: str
    query: sa.Select[Any]
    keyed: int
    values: Callable[[Row], Row] = lambda row: row
    said: Callable[[Row], str] = repr
    view: Callable[[Row], Row] | None = None  # what of each row two chunks are first compared by (None: all)
    of_records: bool = False  # one of the records' tables (the rows a bounded replay writes apart)


# A record's row without the seq it was written at: the two stores wrote theirs at other seqs.
_RECORD_COLUMNS = tuple(column for column in records_table.columns if column.name != "seq")


def _tables(upto: int, whole: bool) -> list[_Table]:
    """The tables compared: the changes and counts up to seq `upto`; the records' ones too when `whole`."""
    tables = [
        _in_key_order("changes", state_changes, state_changes.c.seq <= upto),
        _in_key_order("counts", state_counts, state_counts.c.seq <= upto),
    ]
    if whole:
        tables += [
            _in_key_order(
                "records", records_table, columns=_RECORD_COLUMNS, values=_record_values, said=_record, of_records=True
            ),
            _in_key_order("heartbeats", state_heartbeats, of_records=True),
            _in_key_order("wants by ref", state_want_refs, of_records=True),
            _in_key_order("grid cells", state_cells, values=_cell_values, view=_cell_values, of_records=True),
        ]
    return tables


def _in_key_order(
    name: str, table: sa.Table, where: Any = None, columns: tuple[sa.Column[Any], ...] = (), **how: Any
) -> _Table:
    """`table`'s rows (of these `columns`, else all) where `where` holds, by key; `how`: `_Table`'s others."""
    query = sa.select(*(columns or table.columns)).order_by(*table.primary_key.columns)
    return _Table(name, query if where is None else query.where(where), len(table.primary_key.columns), **how)


def _first_difference(real: Iterator[list[Row]], replayed: Iterator[list[Row]], table: _Table) -> str | None:
    """The first row the two sides (chunks of rows in key order, all full but the last) disagree on, said as
    what is wrong with the real one. Two chunks that are equal (as `table.view`s) are passed over at once;
    the rows of two that are not are compared one by one, and where none of them differs (bytes, not
    values, did), the two sides are again at the same row."""
    view = table.view
    none: list[Row] = []
    for stored, expected in itertools.zip_longest(real, replayed, fillvalue=none):
        if stored == expected or (view is not None and list(map(view, stored)) == list(map(view, expected))):
            continue
        found = _first_in(stored, expected, table)
        if found is not None:
            return found
    return None


def _first_in(stored_rows: list[Row], expected_rows: list[Row], table: _Table) -> str | None:
    """`_first_difference` in one chunk of each side (a shorter one is its side's last)."""
    keyed, values, said = table.keyed, table.values, table.said
    for stored, expected in itertools.zip_longest(stored_rows, expected_rows):
        if expected is None or (stored is not None and stored[:keyed] < expected[:keyed]):
            return f"stored {said(stored)}, which the replay does not have"
        if stored is None or expected[:keyed] < stored[:keyed]:
            return f"no row of {said(expected)}, which the replay has"
        if stored != expected and values(stored) != values(expected):  # equal rows hold equal values
            return f"stored {said(stored)}, replayed {said(expected)}"
    return None


def _record_values(row: Row) -> Row:
    """A record's row (`_RECORD_COLUMNS`) as what it holds: its key, values (decoded: two picklings of equal
    values may differ), created and ended seqs."""
    kind, key, body, created, closed = row
    return (kind, key, decoded(body), created, closed)


def _cell_values(row: Row) -> Row:
    """A grid cell's row without the seq it was written at."""
    return (row[0], *row[2:])


def _record(row: Row) -> str:
    kind, key, _, created, closed = row
    return f"the row of {KIND_NAMES[kind]} {key!r} (created at {created}, ended at {closed})"
