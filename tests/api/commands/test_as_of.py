"""`--as-of SEQ` on every read command, against a database (`--db`) and a real HTTP server (`--server`):
the answer as of that seq, the same in both modes; a value that is no seq, or a seq after the head, exits 2
with one line."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from partbuild.examples.clicks.simulate import SimulationPlan
from partbuild.state.database import Database

from clikit import run_cli, simulated_database
from serverkit import graphless_api_server

# Three simulated weeks (65 events); week 1 has a failed daily run, retried.
PLAN = SimulationPlan(weeks=3, sites=1, fail_every=2, taint_every=2)
HEAD = 65
WEEKLY_W02 = "agg/weekly_clicks/site=0/week=2026-W02"
RAW = "raw/clicks/site=0/date=2026-01-05"
SUBSCRIPTION = "hooks"
# Every read command of the CLI: each takes --as-of.
READS = [
    ["wants"],
    ["wants", "list"],
    ["wants", "show", "want-s0w0"],
    ["runs"],
    ["runs", "list"],
    ["runs", "show", "run-s0w1-daily-1"],
    ["partitions"],
    ["partitions", "list"],
    ["partitions", "show", WEEKLY_W02],
    ["partitions", "history", WEEKLY_W02],
    ["partitions", "instance", "00000000-0000-0000-0000-000000000000"],
    ["lineage", WEEKLY_W02],
    ["group", "list"],
    ["group", "show", "g"],
    ["sources"],
    ["sources", "list"],
    ["buckets"],
    ["subscriptions"],
    ["subscriptions", "list"],
    ["subscriptions", "show", SUBSCRIPTION],
]


@pytest.fixture(scope="module")
def seeded(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A database holding a simulated W1 history; nothing in it changes (bad input changes nothing)."""
    return simulated_database(tmp_path_factory, "as_of", PLAN)


@pytest.fixture(scope="module")
def server(seeded: str) -> Iterator[str]:
    with graphless_api_server(seeded) as api:
        yield api.url


@pytest.fixture(params=["db", "server"])
def where(request: pytest.FixtureRequest, seeded: str, server: str) -> list[str]:
    return ["--db", seeded] if request.param == "db" else ["--server", server]


def _json(capsys: pytest.CaptureFixture[str], where: list[str], *args: str) -> Any:
    code, out, err = run_cli(capsys, *args, *where, "--json")
    assert code == 0, err
    return json.loads(out)


def test_reads_as_of_a_seq_answer_as_then(capsys: pytest.CaptureFixture[str], where: list[str]) -> None:
    def read(*args: str) -> Any:
        return _json(capsys, where, *args)

    wants = read("wants", "--as-of", "30", "--all", "--limit", "1")
    assert wants["as_of_seq"] == 30 and wants["next_cursor"] is None
    assert [(w["want_id"], w["state"]) for w in wants["items"]] == [
        ("want-s0w0", "successful"),
        ("want-s0w0-daily", "successful"),
        ("want-s0w1", "upstream_building"),
        ("want-s0w1-daily", "idle"),
    ]
    assert len(read("wants")["items"]) == 8 and read("wants")["as_of_seq"] == HEAD
    assert [w["want_id"] for w in read("wants", "list", "--as-of", "30", "--state", "idle")["items"]] == [
        "want-s0w1-daily"
    ]
    want = read("wants", "show", "want-s0w0", "--as-of", "12")
    assert (want["state"], want["as_of_seq"]) == ("upstream_building", 12)
    assert [(c["want_id"], c["state"]) for c in want["tree"]["children"]] == [("want-s0w0-daily", "idle")]
    assert want["refs_status"][0]["state"] == "upstream_building" and len(want["refs_status"][0]["waiting_on"]) == 7

    runs = read("runs", "--as-of", "31")
    assert [(r["job_run_id"], r["state"]) for r in runs["items"]][-2:] == [
        ("run-s0w1-weekly-1", "dep_miss"),
        ("run-s0w1-daily-1", "queued"),
    ]
    run = read("runs", "show", "run-s0w1-daily-1", "--as-of", "31")
    assert (run["state"], run["as_of_seq"], run["error_message"]) == ("queued", 31, None)
    assert read("runs", "show", "run-s0w1-daily-1")["state"] == "failed"

    partitions = read("partitions", "--as-of", "9", "--prefix", "agg/")
    assert [(p["ref"], p["state"]) for p in partitions["items"]] == [(WEEKLY_W02, "building")]
    assert (partitions["as_of_seq"], len(read("partitions", "--as-of", "9")["items"])) == (9, 8)
    assert read("partitions", "show", WEEKLY_W02)["state"] == "live"


def test_subscription_settings_as_of_a_seq(capsys: pytest.CaptureFixture[str], sqlite_url: str) -> None:
    """Over a fresh database: a subscription active as of its creation, paused now, unknown before it."""
    where = ["--db", sqlite_url]
    run_cli(capsys, "want", "x/1", "--db", sqlite_url)  # creates the database; seq 1
    created = _json(capsys, where, "subscriptions", "create", SUBSCRIPTION, "http://127.0.0.1:9/hook")["seq"]
    paused = _json(capsys, where, "subscriptions", "pause", SUBSCRIPTION)["seq"]
    then = _json(capsys, where, "subscriptions", "show", SUBSCRIPTION, "--as-of", str(created))
    assert (then["status"], then["as_of_seq"]) == ("active", created)
    assert _json(capsys, where, "subscriptions", "show", SUBSCRIPTION)["status"] == "paused"
    listed = _json(capsys, where, "subscriptions", "list", "--as-of", str(paused))
    assert ([s["status"] for s in listed["subscriptions"]], listed["as_of_seq"]) == (["paused"], paused)
    assert _json(capsys, where, "subscriptions", "--as-of", "1") == {"subscriptions": [], "as_of_seq": 1}
    code, out, err = run_cli(capsys, "subscriptions", "--as-of", "1", *where)
    assert (code, out, err) == (0, "no subscription as of seq 1\n", "")
    code, out, err = run_cli(capsys, "subscriptions", "show", SUBSCRIPTION, "--as-of", str(created), *where)
    assert code == 0 and "active" in out and f"settings as of seq {created}" in out


def test_human_output_says_the_seq(capsys: pytest.CaptureFixture[str], where: list[str]) -> None:
    code, out, _ = run_cli(capsys, "wants", "--as-of", "30", "--limit", "2", *where)
    assert code == 0 and "(more: --cursor 12 --as-of 30, or --all)" in out and "(wants as of seq 30)" in out
    code, out, _ = run_cli(capsys, "runs", "show", "run-s0w1-daily-1", "--as-of", "31", *where)
    assert code == 0 and "queued" in out and "as of seq" in out and "31" in out
    code, out, _ = run_cli(capsys, "partitions", "--as-of", "0", *where)
    assert (code, out) == (0, "no partitions as of seq 0\n")


@pytest.mark.parametrize("args", READS, ids=" ".join)
def test_as_of_that_is_no_seq_or_after_the_head_exits_2_with_one_line(
    capsys: pytest.CaptureFixture[str], where: list[str], seeded: str, args: list[str]
) -> None:
    for value in ("-1", "1.5", "+3", " 3", "1_0", "3x", "9" * 40):
        code, out, err = run_cli(capsys, *args, "--as-of", value, *where)
        assert (code, out, err.count("\n")) == (2, "", 1), (value, err)
        assert err.startswith("partbuild: error: Invalid value for '--as-of': ") and "is not a seq" in err
    code, out, err = run_cli(capsys, *args, "--as-of", str(HEAD + 1), *where)
    assert (code, out, err) == (2, "", f"partbuild: error: as_of_seq {HEAD + 1} is after the log head {HEAD}\n")
    with Database.open(seeded) as db:
        assert db.log.head() == HEAD
