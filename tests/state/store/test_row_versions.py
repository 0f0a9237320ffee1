"""The rows' versions (state/store/row_versions.py), on both backends: a write keeps the row it replaces or deletes
while a live working set's registered head or the newest checkpoint may still read as of a seq before it, a read
as of a seq finds the version that held then, and pruning drops what no reader can ask for, keeping the bound so
a read past it that finds nothing refuses."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Connection

from partbuild.state.database import Database
from partbuild.state.db import begin_write
from partbuild.state.schema import PROJECTOR_STALE_MS, state_projectors, state_record_versions, state_records
from partbuild.state.store.records import INSTANCE, VERSION
from partbuild.state.store.row_versions import (
    VersionsPruned,
    check_not_pruned,
    floor,
    keep_versions,
    least_head,
    prune_versions,
    pruned_bound,
    set_floor,
    versions_at,
)

NOW = 1_900_000_000_000


@pytest.fixture
def conn(database: Database) -> Iterator[Connection]:
    with database.changes.records.engine.begin() as connection:
        yield connection


def _write(conn: Connection, key: str, seq: int, kind: int = INSTANCE) -> None:
    """What a pass does: keep what it replaces, then write the row (a newer one)."""
    keep_versions(conn, [(kind, key, seq)], [], seq, now_ms=NOW)
    conn.execute(sa.delete(state_records).where(state_records.c.kind == kind, state_records.c.id == key))
    body = f"{key}@{seq}".encode()
    conn.execute(sa.insert(state_records).values(kind=kind, id=key, seq=seq, body=body, created=1, closed=None))


def _kept(conn: Connection) -> list[tuple[str, int, int]]:
    v = state_record_versions.c
    return [tuple(row) for row in conn.execute(sa.select(v.id, v.seq, v.until).order_by(v.id, v.until))]


def _register(conn: Connection, holder: str, head: int, beat_ms: int = NOW, working_set: bool = True) -> None:
    """A process's row in `state_projectors` (state/ops/projectors.py), in the test's transaction."""
    conn.execute(sa.delete(state_projectors).where(state_projectors.c.holder == holder))
    row = {"holder": holder, "working_set": working_set, "beat_ms": beat_ms, "head": head}
    conn.execute(sa.insert(state_projectors).values(**row))


def test_nothing_is_kept_while_no_working_set_may_read_as_of_an_earlier_seq(conn: Connection) -> None:
    _write(conn, "a", 5)
    _write(conn, "a", 9)
    assert _kept(conn) == [] and least_head(conn, NOW) is None


def test_the_rows_as_of_the_floor_are_kept_once_by_the_first_write_past_it(conn: Connection) -> None:
    _write(conn, "a", 5)
    _write(conn, "b", 9)
    set_floor(conn, 7)
    _write(conn, "a", 8)  # as of the floor: kept, until the write that replaced it
    _write(conn, "a", 12)  # the row it replaces is after the floor: nobody reads as of it
    _write(conn, "b", 13)  # written after the floor before: not the checkpoint's
    assert _kept(conn) == [("a", 5, 8)]
    assert versions_at(conn, INSTANCE, ["a", "b"], 7) == {"a": (5, b"a@5")}
    set_floor(conn, 6)  # a checkpoint behind the floor does not move it
    assert floor(conn) == 7


def test_a_live_working_set_s_head_keeps_every_row_replaced_after_it_and_a_stale_one_keeps_none(
    conn: Connection,
) -> None:
    _register(conn, "h:1:behind", 10)
    _register(conn, "h:2:ahead", 40)
    _register(conn, "h:3:gone", 2, beat_ms=NOW - PROJECTOR_STALE_MS - 1)  # not heard from: ignored
    _register(conn, "h:4:whole", 1, working_set=False)  # (not a working set: it reads nothing back)
    assert least_head(conn, NOW) == 10
    _write(conn, "a", 4)
    _write(conn, "a", 9)  # at or before the least head: no reader asks for the row it replaces
    _write(conn, "a", 11)
    _write(conn, "a", 15)
    _write(conn, "r", 12, kind=VERSION)  # a kind no working set reads back
    _write(conn, "r", 16, kind=VERSION)
    keep_versions(conn, [], [(INSTANCE, "a")], 20, now_ms=NOW)  # deleted (retention) at 20
    conn.execute(sa.delete(state_records).where(state_records.c.id == "a"))
    assert _kept(conn) == [("a", 9, 11), ("a", 11, 15), ("a", 15, 20)]
    reads = {at: versions_at(conn, INSTANCE, ["a"], at).get("a") for at in (8, 10, 11, 14, 19, 20)}
    assert reads == {8: None, 10: (9, b"a@9"), 11: (11, b"a@11"), 14: (11, b"a@11"), 19: (15, b"a@15"), 20: None}


def test_a_working_set_s_own_writes_keep_no_versions_for_itself_only_for_the_others(conn: Connection) -> None:
    _register(conn, "h:1:me", 10)
    _write(conn, "a", 4)
    keep_versions(conn, [(INSTANCE, "a", 12)], [], 12, now_ms=NOW, writer="h:1:me")  # alone: it reads at >= 12
    assert _kept(conn) == []
    _register(conn, "h:2:behind", 8)
    keep_versions(conn, [(INSTANCE, "a", 12)], [], 12, now_ms=NOW, writer="h:1:me")
    assert _kept(conn) == [("a", 4, 12)]


def test_pruning_drops_what_no_reader_asks_for_and_a_read_before_its_bound_that_finds_nothing_refuses(
    conn: Connection,
) -> None:
    _register(conn, "h:1:behind", 10)
    set_floor(conn, 3)
    for seq in (2, 11, 14, 18):
        _write(conn, "a", seq)
    assert _kept(conn) == [("a", 2, 11), ("a", 11, 14), ("a", 14, 18)]
    _register(conn, "h:1:behind", 15)  # its fold moved on
    prune_versions(conn, written_to=18, now_ms=NOW)
    assert _kept(conn) == [("a", 2, 11), ("a", 14, 18)] and pruned_bound(conn) == 15  # the floor's stays
    check_not_pruned(conn, 15)
    with pytest.raises(VersionsPruned, match="pruned up to seq 15, after this fold's seq 12"):
        check_not_pruned(conn, 12)
    check_not_pruned(conn, 3, checkpoint=True)  # as of the floor: its versions are kept while it is the floor
    conn.execute(sa.delete(state_projectors))  # it left
    prune_versions(conn, written_to=18, now_ms=NOW)  # nobody live: all but the floor's, up to what is written
    assert _kept(conn) == [("a", 2, 11)] and pruned_bound(conn) == 18
    set_floor(conn, 16)  # the next checkpoint: the one before's versions go
    assert _kept(conn) == []
    with pytest.raises(VersionsPruned):
        check_not_pruned(conn, 3, checkpoint=True)


def test_two_working_sets_saving_their_first_checkpoints_at_once_both_succeed_the_floor_the_newest(
    database: Database,
) -> None:
    """The second waits for the first's transaction (one upsert, not an update then an insert that fails)."""
    engine = database.changes.records.engine
    failed: list[BaseException] = []

    def second() -> None:
        try:
            with begin_write(engine) as conn:
                set_floor(conn, 20)
        except BaseException as exc:  # (said to the test below)
            failed.append(exc)

    with begin_write(engine) as conn:
        set_floor(conn, 10)
        racing = threading.Thread(target=second)
        racing.start()
        time.sleep(0.3)  # the second is waiting on this transaction now
    racing.join(timeout=60)
    assert not racing.is_alive() and failed == []
    with engine.connect() as conn:
        assert floor(conn) == 20
    with begin_write(engine) as conn:
        set_floor(conn, 15)  # behind it: the floor stays
        assert floor(conn) == 20
