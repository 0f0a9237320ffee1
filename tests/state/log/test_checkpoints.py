"""Automatic snapshots: long-running processes snapshot on start and stop, so restarts replay a short tail.

`partbuild run` on the shared SparkSession: tests/e2e/test_checkpoints_spark.py.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import sqlalchemy as sa

from partbuild.api.service import Service
from partbuild.examples.clicks.simulate import SimulationPlan, simulate
from partbuild.orchestrator.graph import Graph, Job
from partbuild.orchestrator.loop import Orchestrator
from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.database import Database
from partbuild.state.log.digest import state_digest
from partbuild.state.log.events import envelope, manual
from partbuild.state.log.replay import SNAPSHOTS_KEPT, checkpoint, load_state
from partbuild.state.log.snapshot import snapshot_format
from partbuild.state.log.store import EventLog, SnapshotStore
from partbuild.state.schema import snapshots as snapshots_table

GRAPH = Graph([Job("noop", ["noop/{n}"], lambda ctx: None)])


def _fill(log: EventLog, weeks: int = 4) -> int:
    """A simulated W1 history (about 20 events per week); returns the new head."""
    events = list(simulate(SimulationPlan(weeks=weeks), start_seq=log.head()))
    log.append(events, expected_head=log.head())
    return log.head()


def _want(log: EventLog, want_id: str, *refs: str) -> None:
    log.append([envelope(pb.WantCreate(want_id=want_id, partition_refs=list(refs)), source=manual("test"))])


def _snapshot_seqs(log: EventLog) -> list[int]:
    with log._engine.connect() as conn:
        return sorted(conn.execute(sa.select(snapshots_table.c.seq)).scalars())


def test_checkpoint_saves_only_when_far_enough_past_the_newest_snapshot(event_log: EventLog) -> None:
    store = event_log.snapshots
    head = _fill(event_log)
    state, _ = load_state(event_log)
    assert checkpoint(state, store, every_events=head + 1) is None
    assert checkpoint(state, store, every_events=0) is None  # 0 turns checkpoints off
    assert _snapshot_seqs(event_log) == []

    assert checkpoint(state, store, every_events=head) == head
    assert checkpoint(state, store, every_events=1) is None  # already snapshotted at this head
    assert _snapshot_seqs(event_log) == [head]

    loaded, report = load_state(event_log, store)
    assert (report.snapshot_seq, report.replayed) == (head, 0)
    assert state_digest(loaded) == state_digest(state)


def test_checkpoint_keeps_only_the_newest_snapshots(event_log: EventLog) -> None:
    store = event_log.snapshots
    saved = []
    for _ in range(SNAPSHOTS_KEPT + 2):
        _fill(event_log, weeks=1)
        state, _ = load_state(event_log, store)
        saved.append(checkpoint(state, store, every_events=5))
    assert None not in saved
    assert _snapshot_seqs(event_log) == saved[-SNAPSHOTS_KEPT:]


def test_checkpoint_failure_is_logged_not_raised(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A snapshot is a cache: a store that cannot be written (here: no schema) must not stop the process."""
    with Database.open(f"sqlite:///{tmp_path / 'log.db'}") as db:
        log = db.log
        _fill(log, weeks=1)
        state, _ = load_state(log)
    broken = SnapshotStore(sa.create_engine(f"sqlite:///{tmp_path / 'no-schema.db'}"))
    with caplog.at_level(logging.ERROR, logger="partbuild.snapshots"):
        assert checkpoint(state, broken, every_events=1) is None
    assert f"could not save a snapshot at seq {state.head_seq}" in caplog.text


def test_orchestrator_snapshots_on_start_and_on_close(event_log: EventLog, database: Database, tmp_path: Path) -> None:
    store = event_log.snapshots
    head = _fill(event_log)
    first = Orchestrator(database, GRAPH, warehouse=str(tmp_path), snapshots=store, snapshot_every=10)
    first.close()
    assert _snapshot_seqs(event_log) == [head]  # the start replayed `head` events; close had nothing new

    second = Orchestrator(database, GRAPH, warehouse=str(tmp_path), snapshots=store, snapshot_every=10)
    assert (second.loaded.snapshot_seq, second.loaded.replayed) == (head, 0)
    _want(event_log, "w", *(f"noop/{n}" for n in range(5)))
    assert second.run_until_idle(timeout_s=20)
    second.close()
    later = event_log.head()
    assert later - head >= 10  # the want, 5 runs with their heartbeats and successes
    assert _snapshot_seqs(event_log) == [head, later]

    third = Orchestrator(database, GRAPH, warehouse=str(tmp_path), snapshots=store, snapshot_every=10)
    assert (third.loaded.snapshot_seq, third.loaded.replayed) == (later, 0)
    assert state_digest(third.state) == state_digest(second.state)
    third.close()


def test_orchestrator_without_a_store_or_with_zero_writes_no_snapshot(
    event_log: EventLog, database: Database, tmp_path: Path
) -> None:
    _fill(event_log)
    Orchestrator(database, GRAPH, warehouse=str(tmp_path), snapshot_every=1).close()
    store = event_log.snapshots
    Orchestrator(database, GRAPH, warehouse=str(tmp_path), snapshots=store, snapshot_every=0).close()
    assert _snapshot_seqs(event_log) == []


def test_service_snapshots_on_start_and_on_stop(event_log: EventLog, database: Database) -> None:
    head = _fill(event_log)
    service = Service(database, snapshot_every=10)
    assert _snapshot_seqs(event_log) == [head]
    for n in range(12):
        _want(event_log, f"w{n}", f"noop/{n}")
    service.refresh()
    service.stop()
    assert _snapshot_seqs(event_log) == [head, head + 12]
    assert event_log.snapshots.latest_seq(snapshot_format()) == head + 12


def test_service_as_a_local_cli_client_writes_no_snapshot(event_log: EventLog, database: Database) -> None:
    """One-shot CLI reads (`--db`) use a Service too; they must not write (their access may be read-only)."""
    _fill(event_log)
    service = Service(database)
    service.stop()
    assert _snapshot_seqs(event_log) == []
