"""Statements run on the driver's own cursor: a read replica's point reads, a few rows by key each.

SQLAlchemy spends about 200 µs of Python on each execution of a built statement (its execution context, its
result object), where the driver itself finds a row by key in about 10 µs on SQLite; a want's page reads
a dozen rows or more. So the hot reads are compiled by SQLAlchemy, once per dialect (the SQL is still
written once, for both backends), and run on the DBAPI cursor of the caller's connection: in its
transaction, so in its snapshot.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

import sqlalchemy as sa
from sqlalchemy.engine import Connection
from sqlalchemy.engine.interfaces import Dialect


class _Compiled(NamedTuple):
    """A statement's SQL for one dialect."""

    sql: str
    order: tuple[str, ...] | None  # the parameters' names in order, when the driver takes them by position
    own: dict[str, Any]  # the values of the parameters the statement holds itself (a LIMIT's)
    needed: frozenset[str]  # the names of those the caller gives


class DriverQuery:
    """One SELECT with named parameters, compiled once per dialect and run on the driver's cursor."""

    def __init__(self, statement: sa.Select[Any]) -> None:
        self._statement = statement
        self._compiled: dict[str, _Compiled] = {}

    def _sql(self, dialect: Dialect) -> _Compiled:
        found = self._compiled.get(dialect.name)
        if found is None:
            compiled = self._statement.compile(dialect=dialect)
            own = {name: value for name, value in compiled.params.items() if value is not None}
            needed = frozenset(compiled.params) - own.keys()
            order = tuple(compiled.positiontup or ()) if compiled.positional else None
            found = self._compiled[dialect.name] = _Compiled(compiled.string, order, own, needed)
        return found

    def all(self, conn: Connection, params: Mapping[str, object]) -> Sequence[Sequence[Any]]:
        """Every row the statement gives with these parameters (each one it names), in `conn`'s transaction."""
        sql, order, own, needed = self._sql(conn.dialect)
        if params.keys() != needed:
            # A TypeError, not a KeyError: a Mapping's `get` above us would take that for a missing record.
            raise TypeError(f"{sql!r} takes the parameters {sorted(needed)}, not {sorted(params)}")
        values = {**own, **params}
        args: Any = values if order is None else tuple(values[name] for name in order)
        cursor = conn.connection.cursor()
        try:
            cursor.execute(sql, args)
            return cursor.fetchall()
        finally:
            cursor.close()


class KeyedQueries:
    """`DriverQuery`s of one statement over a list of keys (`key IN (...)`), one for each length asked for."""

    def __init__(self, build: Callable[[tuple[str, ...]], sa.Select[Any]]) -> None:
        """`build(names)`: the statement for bound parameters of these names, one per key (each typed as its
        column is, so PostgreSQL compares them as SQLAlchemy's own IN lists do: cast to its type and collation)."""
        self._build = build
        self._by_length: dict[int, tuple[tuple[str, ...], DriverQuery]] = {}

    def query(self, length: int) -> DriverQuery:
        """The statement for `length` keys, their parameters named `key_0`, `key_1`, ..."""
        return self._of_length(length)[1]

    def _of_length(self, length: int) -> tuple[tuple[str, ...], DriverQuery]:
        found = self._by_length.get(length)
        if found is None:
            names = tuple(f"key_{index}" for index in range(length))
            found = self._by_length[length] = (names, DriverQuery(self._build(names)))
        return found

    def all(self, conn: Connection, keys: Sequence[object], **params: object) -> Sequence[Sequence[Any]]:
        """Every row for these `keys` (and the other named `params`), in `conn`'s transaction."""
        names, query = self._of_length(len(keys))
        return query.all(conn, {**params, **dict(zip(names, keys, strict=True))})
