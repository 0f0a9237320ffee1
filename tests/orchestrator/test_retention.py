"""Retention applied by the orchestrator (`--retain-days`) and by hand (`partbuild retention`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from partbuild.orchestrator.graph import Graph, Job
from partbuild.orchestrator.loop import Orchestrator
from partbuild.orchestrator.retention import DAY_MS, RetentionPolicy
from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.database import Database
from partbuild.state.log.events import envelope, manual, wall_clock_ms
from partbuild.state.log.replay import load_state
from partbuild.state.log.store import EventLog

from clikit import run_cli

GRAPH = Graph([Job("noop", ["noop/{n:int}"], lambda ctx: None)])


def _observe(log: EventLog, ref: str, location: str) -> None:
    log.append([envelope(pb.PartitionObserved(partition_ref=ref, location=location), source=manual("t"))])


def _two_versions(log: EventLog) -> tuple[str, str]:
    """A source ref observed twice: the first instance is superseded by the second."""
    _observe(log, "src/a", "/v1")
    old = load_state(log)[0].canonical["src/a"]
    _observe(log, "src/a", "/v2")
    return old, load_state(log)[0].canonical["src/a"]


def test_orchestrator_drops_old_superseded_instances_once(
    event_log: EventLog, database: Database, tmp_path: Path
) -> None:
    old, new = _two_versions(event_log)
    policy = RetentionPolicy(retain_days=0, check_interval_ms=DAY_MS)
    orchestrator = Orchestrator(database, GRAPH, warehouse=str(tmp_path), retention=policy)
    try:
        assert orchestrator.step()  # appends the InstanceRetention
        orchestrator.catch_up()
        state = orchestrator.state
        assert old not in state.instances and state.canonical["src/a"] == new
        assert state.dropped_instances == 1 and not state.rejections
        head = event_log.head()
        assert not orchestrator.step()  # the next check is a day away: nothing more is appended
        assert event_log.head() == head
    finally:
        orchestrator.close()
    kinds = [row.event_type for row in event_log.read(0, 100)]
    assert kinds.count("instance_retention") == 1


def test_orchestrator_keeps_instances_younger_than_the_retention(
    event_log: EventLog, database: Database, tmp_path: Path
) -> None:
    old, _ = _two_versions(event_log)
    orchestrator = Orchestrator(database, GRAPH, warehouse=str(tmp_path), retention=RetentionPolicy(retain_days=7))
    try:
        assert not orchestrator.step()
        assert old in orchestrator.state.instances
    finally:
        orchestrator.close()
    # Seven days later (on the writer's clock) the same policy drops it.
    later = Orchestrator(
        database,
        GRAPH,
        warehouse=str(tmp_path),
        retention=RetentionPolicy(retain_days=7),
        clock=lambda: wall_clock_ms() + 8 * DAY_MS,
    )
    try:
        assert later.step()
        later.catch_up()
        assert old not in later.state.instances
    finally:
        later.close()


def test_cli_retention_dry_run_then_drop(capsys: pytest.CaptureFixture[str], sqlite_url: str) -> None:
    with Database.open(sqlite_url) as db:
        log = db.log
        old, new = _two_versions(log)
        head = log.head()
    code, out, err = run_cli(capsys, "retention", "--db", sqlite_url, "--retain-days", "0", "--dry-run")
    assert code == 0, err
    assert "would drop: 1 instance(s) superseded before seq" in out and old in out and new not in out
    code, out, _ = run_cli(capsys, "retention", "--db", sqlite_url, "--retain-days", "0", "--json")
    report = json.loads(out)
    assert code == 0 and (report["dropped"], report["instances"], report["seq"]) == (1, [old], head + 1)
    code, out, _ = run_cli(capsys, "retention", "--db", sqlite_url, "--retain-days", "0")
    assert code == 0 and "no instance was superseded long enough ago" in out
    code, _, err = run_cli(capsys, "retention", "--db", sqlite_url, "--retain-days", "-1")
    assert code == 2 and err.count("\n") == 1


def test_cli_runs_cancel(capsys: pytest.CaptureFixture[str], sqlite_url: str) -> None:
    with Database.open(sqlite_url) as db:
        log = db.log
        log.append([envelope(pb.WantCreate(want_id="w", partition_refs=["noop/1"]))])
        uuid = load_state(log)[0].canonical["noop/1"]
        log.append([envelope(pb.JobRunBuffer(job_run_id="r-1", job_label="noop", instance_uuids=[uuid]))])
    code, out, err = run_cli(capsys, "runs", "cancel", "r-1", "--reason", "stop", "--db", sqlite_url)
    assert code == 0 and "job run r-1 canceled at seq 3" in out, err
    code, _, err = run_cli(capsys, "runs", "cancel", "r-1", "--db", sqlite_url)
    assert code == 2 and "already canceled" in err and err.count("\n") == 1
    code, out, _ = run_cli(capsys, "runs", "show", "r-1", "--db", sqlite_url, "--json")
    assert json.loads(out)["cancel_reason"] == "stop"
