"""Two state stores compared table by table in key order, a chunk of rows at a time from each
(state/store/row_stream.py): the store a process projected, and the one a bounded replay rebuilt from the log
(state/store/cold_verify.py). The changes and the counts up to a seq, and, when the real store's records are
whole, the records (their values, not the bytes they were pickled to, nor the seq they were written at), the
heartbeats, the wants by ref and the grid cells (the seq each was written at aside). Two chunks that are equal
are passed over at once (equal rows hold equal values); only where they are not are their rows compared one by
one, and a record's row decoded. Run in line, or by the scratch rows' writer process while the replay's digest is
made (state/store/scratch_writer.py).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from contextlib import closing
from typing import Any, NamedTuple

import sqlalchemy as sa

from partbuild.state.schema import state_cells, state_changes, state_counts, state_heartbeats, state_want_refs
from partbuild.state.schema import state_records as records_table
from partbuild.state.store.changes import ChangeStore
from partbuild.state.store.records import KIND_NAMES, RecordStore, comparable, decoded
from partbuild.state.store.row_stream import Row, engine_chunks


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
    return (kind, key, comparable(kind, decoded(body)), created, closed)


def _cell_values(row: Row) -> Row:
    """A grid cell's row without the seq it was written at."""
    return (row[0], *row[2:])


def _record(row: Row) -> str:
    kind, key, _, created, closed = row
    return f"the row of {KIND_NAMES[kind]} {key!r} (created at {created}, ended at {closed})"
