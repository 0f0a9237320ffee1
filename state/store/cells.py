"""Each ref's grid cell in the `state_cells` table: a read replica's status grid is a range scan of small rows.

A row holds a ref's cell (`ref_cell`: its number in GRID_STATES) and the latest checks of the instance its
readers get (JSON (name, result) pairs: what a grid's check filter reads) as the live state had them at the
row's `seq`, the seq `since` which they have held, and the ref's `created` column (its first instance's
created seq, a lower bound). These depend on the ref's canonical instance, its checks and its predecessor,
and on what the ref serves, so they are written with the rows of the ref and of its instances
(state/store/records.py, `rows_of`): whenever any of them changes. Then, at the records' watermark W, a row
says its ref's cell and checks as of every seq from `since` to W; as of an earlier seq, a ref created after it
had none, and the others are looked up in their records' rows (state/store/stored.py, `grid_cells`,
`stored_checks`; a replica keeps a job's cells and checks per watermark: `held_cells`, `held_checks`).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any, Final

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from partbuild.state.db import write_newer_rows
from partbuild.state.queries.cells import CheckPairs, ref_cell
from partbuild.state.schema import state_cells as table
from partbuild.state.store.driver import DriverQuery, KeyedQueries

if TYPE_CHECKING:
    from partbuild.state.fold.build_state import BuildState

CellRow = tuple[str, int, int, int, int, str | None]  # ref, seq, cell, since, created, checks (JSON pairs)


def cell_row(state: BuildState, ref: str, created: int) -> CellRow | None:
    """The row of a ref's cell as `state` holds it at its head (None: it has no canonical instance, so no cell);
    `created`: the ref row's `created` column."""
    found = ref_cell(state, ref)
    if found is None:
        return None
    cell, since, checks = found
    return ref, state.head_seq, cell, since, created, None if checks is None else json.dumps(checks)


def checks_of(text: str | None) -> CheckPairs:
    """The (check name, result) pairs a row's `checks` holds (none: never checked)."""
    return () if text is None else tuple(map(tuple, json.loads(text)))


def write_cells(conn: Connection, rows: Sequence[CellRow], gone: Sequence[str]) -> None:
    """Write these cells (keeping a newer row already there) and delete those of `gone`, in the caller's
    transaction."""
    write_newer_rows(conn, table, rows, "seq")
    for start in range(0, len(gone), 500):
        conn.execute(sa.delete(table).where(table.c.ref.in_(gone[start : start + 500])))


# The cells of the refs in a key range, in key order, a page at a time, on the driver's cursor.
_PAGE: Final = 5000
_BETWEEN: Final = DriverQuery(
    sa.select(table.c.ref, table.c.cell, table.c.since, table.c.created, table.c.checks)
    .where(
        table.c.ref >= sa.bindparam("first", type_=table.c.ref.type),
        table.c.ref <= sa.bindparam("last", type_=table.c.ref.type),
    )
    .order_by(table.c.ref)
    .limit(_PAGE)
)


def cells_between(conn: Connection, first: str, last: str) -> Iterator[Sequence[Any]]:
    """(ref, cell, since, created, checks) of the refs from `first` to `last`, in key order, in `conn`'s
    transaction: one range scan, read a page at a time (a grid's range may hold hundreds of thousands)."""
    after: str | None = None
    while True:
        page = _BETWEEN.all(conn, {"first": first, "last": last})
        # Each page after the first starts at the last ref of the one before (no key is "just after" a text).
        yield from (row for row in page if row[0] != after)
        if len(page) < _PAGE:
            return
        first = after = page[-1][0]


_BY_REFS: Final = KeyedQueries(
    lambda names: sa.select(table.c.ref, table.c.cell, table.c.since, table.c.created, table.c.checks).where(
        table.c.ref.in_([sa.bindparam(name, type_=table.c.ref.type) for name in names])
    )
)


def cells_of(conn: Connection, refs: Sequence[str]) -> dict[str, Sequence[Any]]:
    """ref -> (ref, cell, since, created, checks) of those of `refs` with a row, 500 a statement, in `conn`'s
    transaction."""
    found: dict[str, Sequence[Any]] = {}
    for start in range(0, len(refs), 500):
        found.update((row[0], row) for row in _BY_REFS.all(conn, refs[start : start + 500]))
    return found


def all_cells(conn: Connection) -> Iterator[CellRow]:
    """Every row, in key order (the audit's walk)."""
    query = sa.select(table).order_by(table.c.ref)
    for row in conn.execution_options(yield_per=5000).execute(query):
        yield row.ref, row.seq, row.cell, row.since, row.created, row.checks
