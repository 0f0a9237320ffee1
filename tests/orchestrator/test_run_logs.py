"""Capturing each job run's log (`orchestrator/run_logs.py`) through a real `JobExecutor` into a real store:
per-run lines, a failure's traceback, the per-run cap, redaction, live flushing."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from partbuild.orchestrator.context import JobContext, OutputTarget
from partbuild.orchestrator.decide import RunPlan, instance_location
from partbuild.orchestrator.executor import JobExecutor
from partbuild.orchestrator.graph import Graph, Job
from partbuild.orchestrator.run_logs import RunLogWriter, redact_line
from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.database import Database

from waitkit import wait_for


@pytest.fixture
def gate() -> Iterator[threading.Event]:
    event = threading.Event()
    yield event
    event.set()


def _run(
    tmp_path: Path, database: Database, job: Callable[[JobContext], None], run_id: str, writer: RunLogWriter
) -> list[pb.Event]:
    appended: list[pb.Event] = []
    graph = Graph([Job("j", ["j/n={n:int}"], job)])
    target = OutputTarget(graph.resolve("j/n=1").partition, "uuid-1", instance_location(str(tmp_path), "j/n=1", "u"))
    executor = JobExecutor(None, appended.extend, heartbeat_interval_s=60, run_logs=writer)
    try:
        executor.submit(RunPlan(graph.jobs["j"], run_id, [target], {}, {"uuid-1": ()}, 0))
        wait_for("the run's outcome", lambda: any(e.WhichOneof("payload") != "job_run_heartbeat" for e in appended))
    finally:
        executor.shutdown(wait=True)
    return appended


def test_a_run_logs_its_own_lines_and_a_failure_its_traceback(
    tmp_path: Path, database: Database, caplog: pytest.LogCaptureFixture
) -> None:
    def job(ctx: JobContext) -> None:
        ctx.log.info("reading %s", "inputs")
        ctx.log.debug("details")
        raise ValueError("bad row 7")

    writer = RunLogWriter(database.run_logs)
    with caplog.at_level(logging.INFO):
        events = _run(tmp_path, database, job, "run-1", writer)
    # The process's own output keeps one line for the failure; the traceback is the run's log's.
    failed = [record for record in caplog.records if "failed (retryable)" in record.getMessage()]
    assert failed and not any(record.exc_info or record.exc_text for record in failed)
    assert "Traceback" not in caplog.text
    assert events[-1].WhichOneof("payload") == "job_run_failure"
    lines = database.run_logs.lines("run-1")
    assert [x.line_no for x in lines] == list(range(1, len(lines) + 1))
    assert [(x.level, x.text) for x in lines[:2]] == [("INFO", "reading inputs"), ("DEBUG", "details")]
    text = "\n".join(x.text for x in lines)
    assert "Traceback (most recent call last):" in text
    assert "ValueError: bad row 7" in text
    assert lines[2].level == "WARNING" and "failed (retryable)" in lines[2].text
    assert database.run_logs.lines("run-2") == []


def test_a_chatty_run_stays_under_its_cap_and_keeps_its_traceback(tmp_path: Path, database: Database) -> None:
    def job(ctx: JobContext) -> None:
        for n in range(500):
            ctx.log.info("line %d %s", n, "x" * 300)
        raise RuntimeError("the end")

    writer = RunLogWriter(database.run_logs, max_lines=50, reserve=40, max_line_chars=100)
    _run(tmp_path, database, job, "chatty", writer)
    lines = database.run_logs.lines("chatty", limit=10_000)
    count, chars = database.run_logs.size("chatty")
    assert count <= 50 + 1 + 40  # the first lines, the marker, the reserve
    assert chars <= count * 100
    assert lines[0].text.startswith("line 0 xxx") and lines[0].text.endswith("...")
    assert lines[50].text == "... 450 lines dropped (a run keeps its first 50 lines)"
    assert any("RuntimeError: the end" in x.text for x in lines[51:])


def test_lines_reach_the_store_while_the_run_goes_on(tmp_path: Path, database: Database, gate: threading.Event) -> None:
    def job(ctx: JobContext) -> None:
        ctx.log.info("started")
        gate.wait(timeout=30)

    writer = RunLogWriter(database.run_logs, flush_interval_s=0.05)
    done = threading.Thread(target=_run, args=(tmp_path, database, job, "live", writer))
    done.start()
    try:
        wait_for(
            "the line while the run waits", lambda: [x.text for x in database.run_logs.lines("live")] == ["started"]
        )
    finally:
        gate.set()
        done.join(timeout=30)


def test_secrets_never_reach_the_store(tmp_path: Path, database: Database, monkeypatch: pytest.MonkeyPatch) -> None:
    from partbuild.orchestrator.connectors.s3_config import Secret

    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wJalrXUtnFEMIK7MDENGbPxRfiCYEXAMPLEKEY")

    def job(ctx: JobContext) -> None:
        ctx.log.info("key %s secret %s", "AKIAIOSFODNN7EXAMPLE", Secret("hunter2-hunter2"))
        ctx.log.info("env wJalrXUtnFEMIK7MDENGbPxRfiCYEXAMPLEKEY and password=letmein token: pbt_abcdefghijkl")
        ctx.log.info("forged\x1b[31m\rline")

    writer = RunLogWriter(database.run_logs)
    _run(tmp_path, database, job, "secret", writer)
    texts = [x.text for x in database.run_logs.lines("secret")]
    # A carriage return starts a line of its own (numbered, so nothing passes for another line).
    assert texts[:4] == ["key *** secret Secret(***)", "env *** and password=*** token: ***", "forged [31m", "line"]


def test_redact_line_keeps_ordinary_text() -> None:
    assert redact_line("wrote 12 rows to /data/x (token count 3)") == "wrote 12 rows to /data/x (token count 3)"


def test_an_orchestrator_keeps_its_runs_lines_across_a_restart_and_prunes_old_ones(tmp_path: Path) -> None:
    """A real orchestrator run: its lines are in the store after it closes and after the database is opened
    again; a later orchestrator's step prunes lines older than the age cap and keeps newer ones."""
    from partbuild.orchestrator.loop import Orchestrator
    from partbuild.state.log.events import envelope, manual
    from partbuild.state.ops.run_logs import RunLogLine

    def job(ctx: JobContext) -> None:
        ctx.log.info("built %s", ctx.outputs[0].ref)

    graph = Graph([Job("j", ["j/{n:int}"], job)])
    url = f"sqlite:///{tmp_path / 'partbuild.db'}"
    with Database.open(url, auto_upgrade=True) as db:
        db.log.append([envelope(pb.WantCreate(want_id="w", partition_refs=["j/1"]), source=manual("t"))])
        first = Orchestrator(db, graph, warehouse=str(tmp_path), source_check_interval_s=0, poll_interval_s=0.01)
        try:
            assert first.run_until_idle(timeout_s=20)
        finally:
            first.close()
        (run_id,) = first.state.job_runs
    with Database.open(url) as db:
        assert [x.text for x in db.run_logs.lines(run_id)] == ["built j/1"]
        day = 24 * 3600 * 1000
        now = db.run_logs.lines(run_id)[0].time_ms
        db.run_logs.append([RunLogLine("old-run", 1, now - 20 * day, "INFO", "from long ago")])
        second = Orchestrator(db, graph, warehouse=str(tmp_path), source_check_interval_s=0, poll_interval_s=0.01)
        try:
            second.step()
        finally:
            second.close()
        assert db.run_logs.lines("old-run") == []
        assert [x.text for x in db.run_logs.lines(run_id)] == ["built j/1"]
