"""`partbuild automation` over a real SQLite log with the graph of tests/data/graphs/ticking.py: list, pause,
resume, trigger; JSON; reads as of a seq; bad input is exit code 2 and one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from partbuild.state.database import Database

from clikit import run_cli

GRAPH = str(Path(__file__).resolve().parents[2] / "data/graphs/ticking.py")


@pytest.fixture
def db(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'automation.db'}"
    Database.open(url, auto_upgrade=True).close()
    return url


def test_list_pause_resume_and_trigger(capsys: pytest.CaptureFixture[str], db: str) -> None:
    code, out, _ = run_cli(capsys, "automation", "--db", db, "--graph", GRAPH)
    assert code == 0 and "often" in out and "every 0:00:02" in out and "running" in out

    code, out, _ = run_cli(capsys, "automation", "trigger", "often", "--db", db, "--graph", GRAPH, "--user", "ann")
    assert code == 0 and out.startswith("schedule often: ticked by hand, want schedule:often:manual:")
    code, out, _ = run_cli(
        capsys, "automation", "pause", "often", "--reason", "disk full", "--db", db, "--graph", GRAPH
    )
    assert (code, out.strip()) == (0, "schedule often: paused at seq 2")

    code, out, _ = run_cli(capsys, "automation", "list", "--db", db, "--graph", GRAPH, "--json")
    (schedule,) = json.loads(out)["schedules"]
    assert (schedule["paused"], schedule["pause_reason"], schedule["ticks"]) == (True, "disk full", 1)
    assert schedule["last_want_id"].startswith("schedule:often:manual:")
    code, out, _ = run_cli(capsys, "automation", "list", "--db", db, "--graph", GRAPH, "--json", "--as-of", "1")
    assert json.loads(out)["schedules"][0]["paused"] is False

    code, out, _ = run_cli(capsys, "wants", "show", schedule["last_want_id"], "--db", db)
    assert code == 0 and "schedule often ticked at" in out and "(by hand)" in out

    code, out, _ = run_cli(capsys, "automation", "resume", "often", "--db", db, "--graph", GRAPH)
    assert (code, out.strip()) == (0, "schedule often: resumed at seq 3")


def test_bad_input_is_exit_code_2_and_one_line(capsys: pytest.CaptureFixture[str], db: str) -> None:
    code, _, err = run_cli(capsys, "automation", "resume", "often", "--db", db, "--graph", GRAPH)
    assert code == 2 and err.strip() == "partbuild: error: schedule 'often' is already running"
    code, _, err = run_cli(capsys, "automation", "pause", "nope", "--db", db, "--graph", GRAPH)
    assert code == 2 and len(err.strip().splitlines()) == 1 and "no schedule 'nope'" in err
    code, _, err = run_cli(capsys, "automation", "trigger", "often", "--db", db)
    assert code == 2 and "no graph" in err
    code, _, err = run_cli(capsys, "automation", "--json", "pause", "often", "--db", db)
    assert code == 2 and "before a subcommand" in err
