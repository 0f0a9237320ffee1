"""The audit by replay (`partbuild replay --verify`, `POST /audit`): it folds the log once when that already was
a replay from seq 0, twice (one state at a time) when a snapshot started it, and names a gap or a snapshot
whose state is not the log's."""

from __future__ import annotations

import sqlalchemy as sa

from partbuild.state.database import Database
from partbuild.state.fold.build_state import BuildState
from partbuild.state.fold.records import InstanceState
from partbuild.state.log.audit import audit
from partbuild.state.log.digest import state_digest
from partbuild.state.log.replay import load_state, save_snapshot
from partbuild.state.schema import events as event_rows

from golden_log import read_events


def _audit_counting_folds(database: Database) -> tuple[bool | None, list[str], int]:
    """(verified, problems, how many times a fold reached the log's head) of a verifying audit."""
    head = database.log.head()
    reached: list[int] = []
    report = audit(database.log, database.log.snapshots, verify=True, progress=reached.append)
    return report.verified, report.problems, reached.count(head)


def test_an_audit_without_a_snapshot_folds_the_log_once(database: Database) -> None:
    """The state it loads is a replay from seq 0 already: a second one would fold the same events again."""
    database.log.append(read_events("outcomes"))
    assert _audit_counting_folds(database) == (True, [], 1)


def test_an_audit_from_a_snapshot_replays_from_seq_0_and_compares(database: Database) -> None:
    events = read_events("outcomes")
    database.log.append(events[:20])
    state, _ = load_state(database.log)
    save_snapshot(state, database.log.snapshots)
    database.log.append(events[20:])
    assert _audit_counting_folds(database) == (True, [], 2)


def test_a_snapshot_whose_state_is_not_the_log_s_is_named(database: Database) -> None:
    """A snapshot written from a state that differs from the log's (a bug, a hand-made row): the digests differ."""
    events = read_events("outcomes")
    database.log.append(events)
    state, _ = load_state(database.log)
    instance = next(iter(state.instances.values()))
    instance.state = InstanceState.FAILED if instance.state != InstanceState.FAILED else InstanceState.LIVE
    save_snapshot(state, database.log.snapshots)
    verified, problems, _ = _audit_counting_folds(database)
    honest = BuildState()
    for seq, event in enumerate(events, start=1):
        honest.apply(seq, event)
    assert verified is False
    assert problems == [f"digest differs: full replay {state_digest(honest)}, snapshot + tail {state_digest(state)}"]


def test_a_missing_seq_is_named_with_or_without_a_snapshot(database: Database) -> None:
    events = read_events("outcomes")
    database.log.append(events)
    with database.changes.records.engine.begin() as conn:  # what no writer can do: a seq gone from the middle
        conn.execute(sa.delete(event_rows).where(event_rows.c.seq == 7))
    head = database.log.head()
    report = audit(database.log, database.log.snapshots, verify=True)
    assert report.problems[:1] == [f"log has gaps: {head - 1} events up to seq {head}"]
    state, _ = load_state(database.log, upto_seq=5)
    save_snapshot(state, database.log.snapshots)
    report = audit(database.log, database.log.snapshots, verify=True)
    assert report.problems[:1] == [f"log has gaps: {head - 1} events up to seq {head}"]
