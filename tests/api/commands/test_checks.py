"""`partbuild checks run REF|UUID [--wait SECONDS]` (api/commands/checks.py) against a database, with a real
orchestrator (checks that need no Spark) answering in a thread; bad input exits 2 with one line."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from partbuild.orchestrator.loop import Orchestrator
from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.database import Database
from partbuild.state.log.events import envelope, manual

from clikit import run_cli
from recheckkit import DAILY, ROLLUP, at_most, graph, write


@pytest.fixture
def built(sqlite_url: str, tmp_path: Path) -> Iterator[Database]:
    """The daily and the rollup built from it, Live under a graph whose daily has no checks."""
    write(str(tmp_path / "raw"), 1)
    with Database.open(sqlite_url, auto_upgrade=True) as db:
        db.log.append([envelope(pb.WantCreate(want_id="w", partition_refs=[ROLLUP]), source=manual("ann"))])
        first = Orchestrator(db, graph(tmp_path), warehouse=str(tmp_path / "wh"), spark=None, poll_interval_s=0.01)
        try:
            assert first.run_until_idle(timeout_s=30)
        finally:
            first.close()
        yield db


def answering(db: Database, tmp_path: Path, limit: int) -> tuple[Orchestrator, threading.Event, threading.Thread]:
    """An orchestrator whose daily now checks `at_most(limit)`, running in a thread until the event is set."""
    orchestrator = Orchestrator(
        db, graph(tmp_path, at_most(limit)), warehouse=str(tmp_path / "wh"), spark=None, poll_interval_s=0.01
    )
    stop = threading.Event()
    thread = threading.Thread(target=orchestrator.run, args=(stop,), daemon=True)
    thread.start()
    return orchestrator, stop, thread


def test_checks_run_by_ref_waits_for_the_answer_and_shows_the_failed_check_and_the_taint(
    built: Database, sqlite_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, stop, thread = answering(built, tmp_path, 5)
    try:
        code, out, err = run_cli(capsys, "checks", "run", DAILY, "--db", sqlite_url, "--wait", "30", "--user", "ann")
    finally:
        stop.set()
        thread.join(30)
    assert code == 0, err
    assert f"checks of {DAILY}" in out and "the instance is tainted" in out
    assert "failed at_most_5 (blocking" in out and "value 10 (at most 5)" in out
    code, out, err = run_cli(capsys, "partitions", "show", ROLLUP, "--db", sqlite_url, "--json")
    assert code == 0 and json.loads(out)["state"] == "missing"  # its Live instance was tainted with the daily's


def test_checks_run_by_uuid_as_json_passes_and_taints_nothing(
    built: Database, sqlite_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run_cli(capsys, "partitions", "show", DAILY, "--db", sqlite_url, "--json")
    uuid = json.loads(out)["uuid"]
    _, stop, thread = answering(built, tmp_path, 10)
    try:
        code, out, err = run_cli(capsys, "checks", "run", uuid, "--db", sqlite_url, "--wait", "30", "--json")
    finally:
        stop.set()
        thread.join(30)
    assert code == 0, err
    answer = json.loads(out)
    assert (answer["uuid"], answer["state"]) == (uuid, "live")
    assert [(c["name"], c["passed"]) for c in answer["checks"]] == [("at_most_10", True)]
    assert answer["checks_requests"][0]["answered_seq"] == answer["checks"][0]["seq"]


def test_bad_input_exits_2_with_one_line_and_no_answer_in_time_exits_1(
    built: Database, sqlite_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run_cli(capsys, "checks", "run", "nope/x", "--db", sqlite_url)
    assert (code, out) == (2, "") and "nope/x" in err and len(err.strip().splitlines()) == 1
    code, _, err = run_cli(capsys, "checks", "run", DAILY, "--db", sqlite_url, "--wait", "-1")
    assert code == 2 and "--wait" in err
    code, out, err = run_cli(capsys, "checks", "run", DAILY, "--db", sqlite_url)
    assert code == 0 and "requested at seq" in out
    request_id = out.split("(request ")[1].split(")")[0]
    code, _, err = run_cli(capsys, "checks", "run", DAILY, "--db", sqlite_url)
    assert code == 2 and "already requested" in err and request_id in err and len(err.strip().splitlines()) == 1
    code, _, err = run_cli(capsys, "checks", "run", ROLLUP, "--db", sqlite_url, "--wait", "0.3")  # nobody answers
    assert code == 1 and "was not answered within 0.3 s" in err and len(err.strip().splitlines()) == 1
