"""`replay --verify --bounded` (state/store/cold_verify.py): the state store rebuilt from the log in a scratch
database by a replay in bounded memory agrees, table by table, with a store projected while the log grew
(every golden log, random histories with retention, a store behind the head); a row lost, changed or added
in any of its tables is named."""

from __future__ import annotations

import pickle
import tempfile
from collections.abc import Callable

import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings
from sqlalchemy.engine import Connection

from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.database import Database
from partbuild.state.fold.build_state import BuildState
from partbuild.state.log.digest import state_digest
from partbuild.state.log.live import LiveState
from partbuild.state.schema import state_cells, state_changes, state_counts, state_heartbeats, state_records
from partbuild.state.store import row_stream
from partbuild.state.store.cold_verify import bounded_verify
from partbuild.state.store.projector import Projector
from partbuild.state.store.records import INSTANCE, body_of, decoded

from golden_log import GOLDEN_LOGS, read_events
from stepkit import Step, appendable_histories, materialize
from storekit import projected_while_growing


def _digest(events: list[pb.Event]) -> str:
    state = BuildState()
    for seq, event in enumerate(events, start=1):
        state.apply(seq, event)
    return state_digest(state)


@pytest.mark.parametrize("name", [log.name for log in GOLDEN_LOGS])
def test_the_rebuilt_store_agrees_with_one_projected_as_the_log_grew(database: Database, name: str) -> None:
    events = read_events(name)
    projected_while_growing(database, events)
    report = bounded_verify(database.log, database.changes, every=5)
    assert report.problems == [] and report.verified
    assert report.digest == _digest(events) and report.state_seq == len(events)


@settings(max_examples=10, derandomize=True, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(steps=appendable_histories)
def test_random_histories_rebuild_the_store_they_projected(steps: list[Step]) -> None:
    """Histories from the fold's property tests (retention with any cutoff, cascades, rejected events)."""
    events = [entry.event for entry in materialize(steps) if entry.event is not None]
    if not events:
        return
    with tempfile.TemporaryDirectory() as folder, Database.open(f"sqlite:///{folder}/v.db", auto_upgrade=True) as db:
        projected_while_growing(db, events, step=3, span=4)
        report = bounded_verify(db.log, db.changes, folder, every=3)
        assert report.problems == [], report.problems


def test_a_store_behind_the_head_is_checked_up_to_its_watermark(database: Database) -> None:
    events = read_events("v1")
    retention = next(n for n, event in enumerate(events) if event.WhichOneof("payload") == "instance_retention")
    database.log.append(events[: retention + 1])  # up to the retention, projected
    assert Projector(LiveState(database.log), database.changes).project() == retention + 1
    database.log.append(events[retention + 1 :])
    report = bounded_verify(database.log, database.changes, every=5)
    assert report.problems == [] and report.state_seq == len(events)


# Each tampering of a projected store, and what the audit then says (the start of its first problem).
TAMPERED: dict[str, tuple[Callable[[Connection], object], str]] = {
    "a change lost": (
        lambda conn: conn.execute(sa.delete(state_changes).where(state_changes.c.seq == _last(conn, state_changes))),
        "the state store's changes differ from the replay's: no row of (",
    ),
    "a count changed": (
        lambda conn: conn.execute(sa.update(state_counts).values(total=state_counts.c.total + 1)),
        "the state store's counts differ from the replay's: stored (",
    ),
    "a record said created at no seq": (
        lambda conn: conn.execute(sa.update(state_records).where(state_records.c.kind == 0).values(created=None)),
        "the state store's records differ from the replay's: stored the row of instance '",
    ),
    "a record that is none": (
        lambda conn: conn.execute(sa.insert(state_records).values(kind=0, id="~none", seq=1, body=b"", created=1)),
        "the state store's records differ from the replay's: stored the row of instance '~none' (created at 1, "
        "ended at None), which the replay does not have",
    ),
    "a heartbeat added": (
        lambda conn: conn.execute(sa.insert(state_heartbeats).values(run_id="~run", seq=1, ms=1)),
        "the state store's heartbeats differ from the replay's: stored ('~run', 1, 1), which the replay does not have",
    ),
    "a cell changed": (
        lambda conn: conn.execute(sa.update(state_cells).values(cell=state_cells.c.cell + 1)),
        "the state store's grid cells differ from the replay's: stored (",
    ),
}


def _last(conn: Connection, table: sa.Table) -> int:
    return int(conn.execute(sa.select(sa.func.max(table.c.seq))).scalar_one())


@pytest.mark.parametrize("tampering", list(TAMPERED))
def test_a_row_lost_changed_or_added_in_any_table_is_named(database: Database, tampering: str) -> None:
    projected_while_growing(database, read_events("outcomes"))
    tamper, said = TAMPERED[tampering]
    with database.changes.records.engine.begin() as conn:
        tamper(conn)
    report = bounded_verify(database.log, database.changes, every=5)
    assert report.verified is False and len(report.problems) == 1
    assert report.problems[0].startswith(said), report.problems


# --- the walks a chunk at a time (state/store/row_stream.py): what they say is what a walk row by row says


@pytest.mark.parametrize("chunk", [1, 4])
@pytest.mark.parametrize("name", ["v1", "cancel_retention", "outcomes"])
def test_walks_in_chunks_of_any_size_agree_and_digest_alike(
    database: Database, monkeypatch: pytest.MonkeyPatch, name: str, chunk: int
) -> None:
    """Every table compared, and the digest's walk of the cold records, cross many chunks: a chunk of either
    side that ends elsewhere than the other's would be taken for a difference, a row left out of the digest
    would change it."""
    events = read_events(name)
    projected_while_growing(database, events)
    monkeypatch.setattr(row_stream, "CHUNK", chunk)
    report = bounded_verify(database.log, database.changes, every=5)
    assert report.problems == [] and report.digest == _digest(events)


def _change_rows(conn: Connection) -> list[tuple[object, ...]]:
    return [tuple(row) for row in conn.execute(sa.select(state_changes).order_by(*state_changes.primary_key))]


# The 97 change rows of "outcomes" in chunks of 5: the first and the last row of a chunk, the last of the last
# full chunk, and the last row (the second of a last chunk of two).
@pytest.mark.parametrize("at", [0, 4, 5, 94, 96])
def test_a_changed_row_is_named_wherever_it_falls_in_a_chunk(
    database: Database, monkeypatch: pytest.MonkeyPatch, at: int
) -> None:
    projected_while_growing(database, read_events("outcomes"))
    with database.changes.records.engine.begin() as conn:
        rows = _change_rows(conn)
        assert len(rows) == 97
        original = rows[at]
        key = [column == value for column, value in zip(state_changes.primary_key, original, strict=False)]
        conn.execute(sa.update(state_changes).where(*key).values(ref="~tampered"))
    tampered = (*original[:3], "~tampered", *original[4:])
    monkeypatch.setattr(row_stream, "CHUNK", 5)
    report = bounded_verify(database.log, database.changes, every=5)
    assert report.problems == [
        f"the state store's changes differ from the replay's: stored {tampered!r}, replayed {original!r}"
    ]


@pytest.mark.parametrize("change", ["one more", "one less"])
def test_a_row_more_or_less_at_the_end_is_named_where_the_other_side_s_chunks_end(
    database: Database, monkeypatch: pytest.MonkeyPatch, change: str
) -> None:
    """The side with fewer rows ends with a full chunk, the other has a chunk more: that one is compared too."""
    projected_while_growing(database, read_events("outcomes"))
    with database.changes.records.engine.begin() as conn:
        rows = _change_rows(conn)
        last = rows[-1]
        if change == "one more":  # at the watermark's seq, after every kind: the last row
            extra = (last[0], 99, "~extra", None, None, None, None, None)
            conn.execute(sa.insert(state_changes).values(dict(zip(state_changes.c.keys(), extra, strict=True))))
        else:
            key = [column == value for column, value in zip(state_changes.primary_key, last, strict=False)]
            conn.execute(sa.delete(state_changes).where(*key))
    # The fewer rows fill a whole number of chunks.
    monkeypatch.setattr(row_stream, "CHUNK", len(rows) if change == "one more" else len(rows) - 1)
    report = bounded_verify(database.log, database.changes, every=5)
    said = (
        f"stored {extra!r}, which the replay does not have"
        if change == "one more"
        else f"no row of {last!r}, which the replay has"
    )
    assert report.problems == [f"the state store's changes differ from the replay's: {said}"]


def test_record_rows_pickled_otherwise_agree_and_other_values_do_not(database: Database) -> None:
    """The records' rows are compared by their values: rows pickled with another protocol (other bytes, the
    same values) agree, the chunks they are in differing from the replay's; one with another record's values
    is named."""
    live = projected_while_growing(database, read_events("outcomes"))
    engine = database.changes.records.engine
    with engine.begin() as conn:
        for kind, key, body in conn.execute(sa.select(state_records.c.kind, state_records.c.id, state_records.c.body)):
            again = pickle.dumps(decoded(body), protocol=4)
            assert again != body and decoded(again) == decoded(body)
            row = (state_records.c.kind == kind) & (state_records.c.id == key)
            conn.execute(sa.update(state_records).where(row).values(body=again))
    report = bounded_verify(database.log, database.changes, every=5)
    assert report.problems == [] and report.verified
    uuid, other = sorted(live.state.instances)[:2]
    instance = live.state.instances[uuid]
    with engine.begin() as conn:
        row = (state_records.c.kind == INSTANCE) & (state_records.c.id == uuid)
        body = body_of(live.state, INSTANCE, other)
        assert body is not None
        conn.execute(sa.update(state_records).where(row).values(body=pickle.dumps(decoded(body), protocol=4)))
    said = f"the row of instance {uuid!r} (created at {instance.created_seq}, ended at None)"
    report = bounded_verify(database.log, database.changes, every=5)
    assert report.problems == [f"the state store's records differ from the replay's: stored {said}, replayed {said}"]


def test_rows_are_read_a_chunk_at_a_time_on_a_server_side_cursor(database: Database) -> None:
    """Full chunks but the last; on PostgreSQL from a cursor of the server's, so only a chunk is ever here."""
    projected_while_growing(database, read_events("outcomes"))
    engine = database.changes.records.engine
    query = sa.select(state_changes).order_by(*state_changes.primary_key)
    with engine.connect() as conn:
        chunks = row_stream.row_chunks(conn, query, 10)
        first = next(chunks)
        if engine.dialect.name == "postgresql":
            cursors = conn.exec_driver_sql("SELECT name FROM pg_cursors").scalars().all()
            assert [name for name in cursors if name.startswith("partbuild_rows_")], cursors
        found = [first, *chunks]
        assert [len(chunk) for chunk in found] == [10] * 9 + [7]
        assert [row for chunk in found for row in chunk] == _change_rows(conn)
