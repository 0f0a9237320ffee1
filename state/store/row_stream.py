"""The rows of a SELECT a chunk at a time, as the driver gives them (plain tuples), on its own cursor.

The audits of the state store (state/store/verify.py, cold_verify.py, cold_digest.py) walk every row of its
tables, millions of them. Read through SQLAlchemy, each row costs a `Row` and a Python-level fetch; the
driver's `fetchmany` hands over a chunk of tuples at once, which the audits compare a chunk at a time (a
C-level list comparison) and look into row by row only where two chunks differ. The statement is still
written with SQLAlchemy and compiled for the connection's dialect (as state/store/driver.py does); on
PostgreSQL it runs on a server-side (named) cursor, so no more than a chunk is ever held on this side.
"""

from __future__ import annotations

import itertools
from collections.abc import Generator
from typing import Any, Final

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

Row = tuple[Any, ...]
# Rows a fetch: past a few thousand, bigger chunks save nothing measurable. Read at each walk's start (the tests
# set it small, so that the walks of a small store cross chunks).
CHUNK = 5000
_NAMES: Final = itertools.count()  # a server-side cursor's name is unique per session: one per statement


def row_chunks(conn: Connection, query: sa.Select[Any], size: int | None = None) -> Generator[list[Row]]:
    """`query`'s rows in its order, in `conn`'s transaction, in lists of `size` rows (default `CHUNK`) but the
    last (shorter, never empty). Every chunk but the last is full: two walks of rows that agree give equal chunks."""
    size = size or CHUNK
    compiled = query.compile(dialect=conn.dialect)
    params = compiled.params
    args: Any = tuple(params[name] for name in compiled.positiontup or ()) if compiled.positional else params
    if not conn.in_transaction():
        conn.begin()  # as an execute would: the statements of one connection read one snapshot on SQLite too
    raw = conn.connection
    # psycopg's named cursor is a server-side one (DECLARE, then FETCH `size` rows at a time); SQLite's own
    # cursor steps through the statement as rows are fetched.
    cursor = raw.cursor(f"partbuild_rows_{next(_NAMES)}") if conn.dialect.name == "postgresql" else raw.cursor()
    try:
        cursor.execute(compiled.string, args)
        while True:
            chunk: list[Row] = list(cursor.fetchmany(size))
            while chunk and len(chunk) < size:  # a driver may give fewer before the end: fill it
                more = cursor.fetchmany(size - len(chunk))
                if not more:
                    break
                chunk += more
            if not chunk:
                return
            yield chunk
            if len(chunk) < size:
                return
    finally:
        cursor.close()


def engine_chunks(engine: Engine, query: sa.Select[Any], size: int | None = None) -> Generator[list[Row]]:
    """`row_chunks` on a connection of its own, closed with the walk (at its end, or when it is closed)."""
    with engine.connect() as conn:
        yield from row_chunks(conn, query, size)
