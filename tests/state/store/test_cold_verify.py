"""`replay --verify --bounded` (state/store/cold_verify.py): the state store rebuilt from the log in a scratch
database by a replay in bounded memory agrees, table by table, with a store projected while the log grew
(every golden log, random histories with retention, a store behind the head); a row lost, changed or added
in any of its tables is named."""

from __future__ import annotations

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
from partbuild.state.store.cold_verify import bounded_verify
from partbuild.state.store.projector import Projector

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
