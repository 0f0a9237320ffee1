"""`partbuild changes A [B]` against a database (`--db`) and a real HTTP server (`--server`): the same
changes in both modes, paged or whole; bad seqs exit 2 with one line."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from partbuild.examples.clicks.simulate import SimulationPlan
from partbuild.state.database import Database

from clikit import run_cli, simulated_database
from serverkit import graphless_api_server

# Three simulated weeks (65 events) with failures, retries and taints.
PLAN = SimulationPlan(weeks=3, sites=1, fail_every=2, taint_every=2)
HEAD = 65


@pytest.fixture(scope="module")
def seeded(tmp_path_factory: pytest.TempPathFactory) -> str:
    return simulated_database(tmp_path_factory, "changes", PLAN)


@pytest.fixture(scope="module")
def server(seeded: str) -> Iterator[str]:
    with graphless_api_server(seeded) as api:
        yield api.url


def _json(capsys: pytest.CaptureFixture[str], *args: str) -> Any:
    code, out, err = run_cli(capsys, *args, "--json")
    assert code == 0, err
    return json.loads(out)


def test_changes_are_the_same_over_a_database_and_a_server(
    capsys: pytest.CaptureFixture[str], seeded: str, server: str
) -> None:
    whole = _json(capsys, "changes", "0", "--db", seeded, "--limit", "1000")
    assert (whole["as_of_seq"], whole["next_cursor"]) == (HEAD, None)
    items = whole["items"]
    assert [i["seq"] for i in items] == sorted(i["seq"] for i in items) and items[-1]["seq"] <= HEAD
    tainted = [i for i in items if i["kind"] == "instance_state" and i["to_state"] == "tainted"]
    assert tainted and all(i["from_state"] == "live" for i in tainted)
    # Each taint moved its ref's canonical pointer away from the tainted instance, at the same seq.
    moves = {(i["seq"], i["from_uuid"]) for i in items if i["kind"] == "canonical_moved"}
    assert all((i["seq"], i["id"]) in moves for i in tainted)
    paged = _json(capsys, "changes", "0", str(HEAD), "--server", server, "--limit", "7", "--all")
    assert paged == whole
    span = _json(capsys, "changes", "20", "40", "--server", server, "--limit", "1000")
    assert span == {"items": [i for i in items if 20 < i["seq"] <= 40], "next_cursor": None, "as_of_seq": 40}


def test_human_output_and_bad_seqs(capsys: pytest.CaptureFixture[str], seeded: str) -> None:
    code, out, err = run_cli(capsys, "changes", "20", "40", "--db", seeded, "--limit", "3")
    assert code == 0 and err == ""
    assert "SEQ" in out and "KIND" in out and "(more: --cursor 22:instance_created:" in out
    code, out, _ = run_cli(capsys, "changes", "0", "--db", seeded, "--limit", "1000")
    assert code == 0 and "canonical_moved" in out and "tainted" in out
    for args, words in (
        (["6", "5"], "from_seq (6) must not be after to_seq (5)"),
        (["0", str(HEAD + 1)], f"to_seq {HEAD + 1} is after the log head {HEAD}"),
        (["-1"], "No such option"),  # click reads it as an option: still one line, exit 2
        (["1.5"], "is not a seq"),
        (["x"], "is not a seq"),
    ):
        code, out, err = run_cli(capsys, "changes", *args, "--db", seeded)
        assert (code, out, err.count("\n")) == (2, "", 1), (args, err)
        assert words in err
    with Database.open(seeded) as db:
        assert db.log.head() == HEAD
