"""Statements on the driver's cursor (state/store/driver.py): the same rows as SQLAlchemy's execution, in the
caller's transaction, on both backends; a call naming the wrong parameters fails loudly."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from partbuild.state.database import Database
from partbuild.state.db import begin_snapshot
from partbuild.state.schema import state_heartbeats as beats
from partbuild.state.store import cells, records
from partbuild.state.store.driver import DriverQuery, KeyedQueries

NEWEST = DriverQuery(
    sa.select(beats.c.seq, beats.c.ms)
    .where(beats.c.run_id == sa.bindparam("run_id"), beats.c.seq <= sa.bindparam("seq"))
    .order_by(beats.c.seq.desc())
    .limit(2)
)
OF_RUNS = KeyedQueries(
    lambda names: (
        sa.select(beats.c.run_id, beats.c.seq)
        .where(beats.c.run_id.in_([sa.bindparam(name) for name in names]), beats.c.seq >= sa.bindparam("low"))
        .order_by(beats.c.run_id, beats.c.seq)
    )
)


def _write(database: Database) -> None:
    rows = [{"run_id": f"run-{run}", "seq": seq, "ms": seq * 1000} for run in range(3) for seq in range(1, 6)]
    with database.changes.records.engine.begin() as conn:
        conn.execute(sa.insert(beats), rows)


def test_a_driver_query_answers_what_sqlalchemy_does(database: Database) -> None:
    _write(database)
    with begin_snapshot(database.changes.records.engine) as conn:
        # The statement's own LIMIT holds; the caller's parameters bind by name on either paramstyle.
        assert [tuple(row) for row in NEWEST.all(conn, {"run_id": "run-1", "seq": 4})] == [(4, 4000), (3, 3000)]
        assert NEWEST.all(conn, {"run_id": "run-9", "seq": 4}) == []
        found = [tuple(row) for row in OF_RUNS.all(conn, ["run-2", "run-0", "run-7"], low=5)]
        assert found == [("run-0", 5), ("run-2", 5)]
        assert len(OF_RUNS.all(conn, ["run-1"], low=1)) == 5  # another length: its own statement


def test_a_driver_query_reads_in_the_callers_transaction(database: Database) -> None:
    engine = database.changes.records.engine
    with begin_snapshot(engine) as conn:
        assert NEWEST.all(conn, {"run_id": "run-0", "seq": 9}) == []
        _write(database)  # committed by another connection after the snapshot began: not seen in it
        assert NEWEST.all(conn, {"run_id": "run-0", "seq": 9}) == []
    with engine.begin() as conn:
        conn.execute(sa.insert(beats).values(run_id="run-0", seq=7, ms=1))  # not committed yet: seen in it
        assert [tuple(row) for row in NEWEST.all(conn, {"run_id": "run-0", "seq": 9})] == [(7, 1), (5, 5000)]


@pytest.mark.parametrize("params", [{"run_id": "run-0"}, {"run_id": "run-0", "seq": 1, "other": 2}])
def test_a_driver_query_refuses_parameters_it_does_not_name(database: Database, params: dict[str, object]) -> None:
    with begin_snapshot(database.changes.records.engine) as conn, pytest.raises(TypeError, match="parameters"):
        NEWEST.all(conn, params)


def _read_statements() -> dict[str, tuple[DriverQuery, dict[str, object]]]:
    """The store's statements on the driver's cursor, each with parameters of the right types."""
    keys = {"key_0": "k", "key_1": "l"}
    return {
        "one row": (records._ONE_ROW, {"kind": 0, "id": "k"}),
        "two kinds": (records._TWO_KINDS, {"kind_a": 0, "kind_b": 3, "id": "k"}),
        "rows": (records._ROWS.query(2), {"kind": 0, **keys}),
        "beats": (records._BEATS.query(2), keys),
        "newest beat": (records._NEWEST_BEAT, {"run_id": "k", "seq": 5}),
        "wants of a ref": (records._WANTS_OF_REF, {"ref": "k", "upto": 5}),
        "cells of a key range": (cells._BETWEEN, {"first": "a", "last": "k"}),
        "cells by ref": (cells._BY_REFS.query(2), keys),
    }


@pytest.mark.parametrize("name", list(_read_statements()))
def test_the_stores_driver_statements_search_an_index(database: Database, name: str) -> None:
    """Each statement finds its rows through an index on both backends (their plans are asked for): one that
    scanned its table would answer right, and cost the table's size."""
    query, params = _read_statements()[name]
    with begin_snapshot(database.changes.records.engine) as conn:
        sql, order, own, _ = query._sql(conn.dialect)
        values = {**own, **params}
        args = values if order is None else tuple(values[key] for key in order)
        cursor = conn.connection.cursor()
        if conn.dialect.name == "postgresql":
            cursor.execute("SET LOCAL enable_seqscan = off")  # a tiny table: the planner would scan it anyway
            cursor.execute("EXPLAIN " + sql, args)
            plan = " ".join(str(row[0]) for row in cursor.fetchall())
            assert "Index" in plan and "Seq Scan" not in plan, plan
        else:
            cursor.execute("EXPLAIN QUERY PLAN " + sql, args)
            plan = " ".join(str(row[-1]) for row in cursor.fetchall())
            assert "SEARCH" in plan and "USING" in plan and "SCAN" not in plan.replace("SEARCH", ""), plan
