"""The `partbuild` query and write commands, against a database (`--db`) and a real HTTP server (`--server`).

Every command runs in-process through `partbuild.api.cli.main`; the server is a
real uvicorn on a free port in a thread. Reads of one seeded history must give
the same JSON in both modes; writes and bad input are checked in each mode.
`partbuild serve` and `partbuild up` as real processes: tests/e2e/test_cli_commands_processes.py.
"""

from __future__ import annotations

import json
import socket
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn

from partbuild.api.app import create_app
from partbuild.api.cli import main
from partbuild.api.client import Client, HttpClient, ServerError, Unreachable
from partbuild.api.errors import InvalidInput, NotFound
from partbuild.api.models.groups import GroupOut
from partbuild.api.models.partitions import LineageOut
from partbuild.api.models.runs import JobRunOut
from partbuild.api.models.wants import WantBatchCreatedOut, WantBatchRequest, WantDetailOut, WantOut
from partbuild.api.service import Service
from partbuild.examples.clicks.simulate import SimulationPlan, simulate
from partbuild.orchestrator.graph import Graph, Job, load_graph
from partbuild.state.database import Database
from partbuild.state.log.store import EventLog

from groupapikit import GROUP, append_group_history

REPO_ROOT = Path(__file__).resolve().parents[3]
PIPELINE = REPO_ROOT / "examples/clicks/pipeline.py"
# Three simulated weeks; week 1 has a failed daily run and a tainted daily that was rebuilt.
PLAN = SimulationPlan(weeks=3, sites=1, fail_every=2, taint_every=2)
WEEKLY_W02 = "agg/weekly_clicks/site=0/week=2026-W02"
TAINTED_DAILY = "agg/daily_clicks/site=0/date=2026-01-12"
MODES = ["db", "server"]


def run_cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """Run the CLI in-process; returns (exit code, stdout, stderr)."""
    with pytest.raises(SystemExit) as exited:
        main(list(args))
    out, err = capsys.readouterr()
    return int(exited.value.code or 0), out, err


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def head_of(db_url: str) -> int:
    with Database.open(db_url) as db:
        log = db.log
        return log.head()


@contextmanager
def http_api(db_url: str, graph: Graph | None = None) -> Iterator[str]:
    """A real uvicorn serving `create_app(Service(...))` over `db_url` on a free port; yields its URL."""
    db = Database.open(db_url, auto_upgrade=True)
    sock = socket.create_server(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(create_app(Service(db, graph=graph)), log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        assert time.monotonic() < deadline and thread.is_alive(), "test server did not start"
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()
        db.close()


@pytest.fixture
def seeded(sqlite_url: str) -> str:
    """A database holding a simulated W1 history (wants, dep misses, a retry, a taint and rebuild)."""
    with Database.open(sqlite_url) as db:
        log = db.log
        log.append(list(simulate(PLAN)), expected_head=0)
    return sqlite_url


@pytest.fixture
def seeded_server(seeded: str) -> Iterator[str]:
    with http_api(seeded) as url:
        yield url


@pytest.fixture(params=MODES)
def mode(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def where(mode: str, sqlite_url: str) -> Iterator[list[str]]:
    """The CLI arguments that select a fresh database, directly or through a server over it."""
    if mode == "db":
        yield ["--db", sqlite_url]
    else:
        with http_api(sqlite_url) as url:
            yield ["--server", url]


# ----------------------------------------------------------------- reads: the same JSON in both modes


def test_every_read_gives_the_same_json_in_both_modes(
    capsys: pytest.CaptureFixture[str], seeded: str, seeded_server: str
) -> None:
    def both(*args: str) -> Any:
        code, direct, err = run_cli(capsys, *args, "--db", seeded, "--json")
        assert code == 0, err
        code, served, err = run_cli(capsys, *args, "--server", seeded_server, "--json")
        assert code == 0, err
        assert json.loads(direct) == json.loads(served), args
        return json.loads(direct)

    every_want = both("wants", "--all", "--limit", "3")
    assert len(every_want["items"]) == 8 and every_want["next_cursor"] is None
    assert set(every_want["items"][0]) == set(WantOut.model_fields)
    first_page = both("wants", "--limit", "3")
    assert [w["want_id"] for w in first_page["items"]] == ["want-s0w0", "want-s0w0-daily", "want-s0w1"]
    second_page = both("wants", "list", "--limit", "3", "--cursor", first_page["next_cursor"])
    assert second_page["items"][0]["want_id"] == "want-s0w1-daily"
    assert {w["want_id"] for w in both("wants", "--root", "want-s0w1")["items"]} == {"want-s0w1", "want-s0w1-daily"}
    assert [w["want_id"] for w in both("wants", "--ref", WEEKLY_W02)["items"]] == ["want-s0w0"]
    assert all(w["state"] == "successful" for w in both("wants", "--state", "successful")["items"])

    detail = both("wants", "show", "want-s0w0")
    assert set(detail) == set(WantDetailOut.model_fields)
    assert detail["refs_status"][0] == {
        "ref": WEEKLY_W02,
        "instance_uuid": detail["satisfied_by"][0],
        "state": "live",
        "waiting_on": [],
    }
    assert detail["tree"]["children"][0]["want_id"] == "want-s0w0-daily"

    partitions = both("partitions", "--all", "--limit", "7")
    refs = [p["ref"] for p in partitions["items"]]
    assert refs == sorted(refs) and len(refs) == 3 * (7 + 7 + 1)
    weeklies = both("partitions", "--prefix", "agg/weekly_clicks/")["items"]
    assert [p["ref"] for p in weeklies] == [WEEKLY_W02, *(f"agg/weekly_clicks/site=0/week=2026-W0{n}" for n in (3, 4))]
    assert both("partitions", "--state", "tainted")["items"] == []  # tainted instances are never canonical
    assert both("partitions", "--unwanted")["items"] == []  # every want was fulfilled: nothing waits

    live = both("partitions", "show", WEEKLY_W02)
    assert live["state"] == "live" and live["canonical"] and len(live["inputs"]) == 7
    history = both("partitions", "history", TAINTED_DAILY)
    assert [i["state"] for i in history] == ["live", "tainted"] and history[0]["previous_uuid"] == history[1]["uuid"]
    old = both("partitions", "instance", history[1]["uuid"])
    assert old["canonical"] is False and old["superseded_seq"] == history[0]["created_seq"]
    before_taint = both("partitions", "show", TAINTED_DAILY, "--as-of", str(history[0]["created_seq"] - 1))
    assert before_taint["uuid"] == history[1]["uuid"] and before_taint["state"] == "live"
    assert both("partitions", "history", TAINTED_DAILY, "--as-of", "30")[0]["uuid"] == history[1]["uuid"]

    upstream = both("lineage", WEEKLY_W02, "--direction", "upstream", "--depth", "2")
    assert upstream["root"] == live["uuid"] and set(upstream) == set(LineageOut.model_fields)
    assert len(upstream["nodes"]) == 1 + 7 + 7 and len(upstream["edges"]) == 7 + 7
    assert {n["depth"] for n in upstream["nodes"]} == {0, 1, 2}
    assert both("lineage", live["inputs"][0], "--direction", "downstream")["nodes"][1]["uuid"] == live["uuid"]
    assert both("lineage", live["uuid"], "--depth", "0")["edges"] == []

    runs = both("runs", "--all", "--limit", "4")["items"]
    assert len(runs) == 3 * 3 + 1 + 2 and set(runs[0]) == set(JobRunOut.model_fields)
    failed = both("runs", "--state", "failed")["items"]
    assert [r["job_run_id"] for r in failed] == ["run-s0w1-daily-1"] and failed[0]["error_message"] == "executor lost"
    assert {r["job_label"] for r in both("runs", "--job", "weekly")["items"]} == {"weekly"}
    retried = both("runs", "show", "run-s0w1-daily-2")
    assert retried["attempt"] == 2 and retried["state"] == "succeeded"


def test_replay_over_the_server_reports_what_the_database_replay_does(
    capsys: pytest.CaptureFixture[str], seeded: str, seeded_server: str
) -> None:
    code, direct, _ = run_cli(capsys, "replay", "--db", seeded, "--json")
    assert code == 0
    code, served, _ = run_cli(capsys, "replay", "--server", seeded_server, "--json")
    assert code == 0
    direct_report, served_report = json.loads(direct), json.loads(served)
    timing = {"seconds", "events_per_second"}
    assert set(direct_report) == set(served_report)
    assert {k: v for k, v in direct_report.items() if k not in timing} == {
        k: v for k, v in served_report.items() if k not in timing
    }
    code, human, _ = run_cli(capsys, "replay", "--server", seeded_server)
    assert code == 0 and f"sha256:{direct_report['digest']}" in human and "rejected events" in human


@pytest.mark.parametrize("server_mode", [False, True], ids=MODES)
def test_human_output_shows_the_key_fields(
    capsys: pytest.CaptureFixture[str], seeded: str, seeded_server: str, server_mode: bool
) -> None:
    where = ["--server", seeded_server] if server_mode else ["--db", seeded]

    def human(*args: str) -> str:
        code, out, err = run_cli(capsys, *args, *where)
        assert code == 0 and err == ""
        return out

    listing = human("wants")
    assert "want-s0w1-rebuild-daily" in listing and "successful" in listing and "STATE" in listing
    shown = human("wants", "show", "want-s0w1")
    assert "derivative wants" in shown and "want-s0w1-daily" in shown and "weekly report" in shown
    assert "(more: --cursor 12, or --all)" in human("wants", "--limit", "2")
    assert "no wants" in human("wants", "--state", "canceled")
    assert WEEKLY_W02 in human("partitions", "--prefix", "agg/weekly")
    canonical = human("partitions", "show", WEEKLY_W02)
    assert "live" in canonical and "run-s0w0-weekly-2" in canonical and "/data/agg/weekly_clicks" in canonical
    history = human("partitions", "history", TAINTED_DAILY)
    assert "tainted" in history and "live" in history
    tree = human("lineage", WEEKLY_W02, "--depth", "2")
    assert "upstream (inputs)" in tree and "raw/clicks/site=0/date=2026-01-05" in tree
    runs = human("runs", "--state", "failed")
    assert "run-s0w1-daily-1" in runs and "executor lost" in runs
    assert "missing inputs" in human("runs", "show", "run-s0w0-weekly-1")


# ----------------------------------------------------------------- worker groups


@pytest.fixture
def group_db(sqlite_url: str) -> str:
    """A database with a worker group in its second epoch, a hand-off in flight and heartbeat rows."""
    with Database.open(sqlite_url, auto_upgrade=True) as db:
        append_group_history(db, int(time.time() * 1000))
    return sqlite_url


def _without_clock(group: dict[str, Any]) -> dict[str, Any]:
    """A GET /group answer without what depends on when it was read (the clock reading and heartbeat ages)."""
    rows = [member["heartbeat"] for member in group["members"]] + [r["heartbeat"] for r in group["other_heartbeats"]]
    for row in rows:
        row.pop("age_ms")
    return {key: value for key, value in group.items() if key != "now_ms"}


def test_group_list_and_show_give_the_same_json_in_both_modes(
    capsys: pytest.CaptureFixture[str], group_db: str
) -> None:
    """`group list` and `group show` through the service and through a server, now and as of an older seq."""
    with http_api(group_db) as url:

        def both(*args: str) -> Any:
            code, direct, err = run_cli(capsys, "group", *args, "--db", group_db, "--json")
            assert code == 0, err
            code, served, err = run_cli(capsys, "group", *args, "--server", url, "--json")
            assert code == 0, err
            return json.loads(direct), json.loads(served)

        listed, served_list = both("list")
        assert listed == served_list and [(g["name"], g["epoch"]["number"], g["members"]) for g in listed] == [
            (GROUP, 2, 3)
        ]
        assert both("list", "--as-of", "1")[0][0]["members"] == 2
        shown, served = both("show", GROUP)
        assert _without_clock(shown) == _without_clock(served)
        assert set(shown) == set(GroupOut.model_fields) and shown["epoch"]["epoch_id"] == "e2"
        assert [member["heartbeat"]["live"] for member in shown["members"]] == [True, True, False]
        past, served_past = both("show", GROUP, "--as-of", "1", "--member-timeout", "120")
        assert _without_clock(past) == _without_clock(served_past)
        assert [member["owned"] for member in past["members"]] == [[1, 2, 3, 4, 5, 6], []]
        assert past["member_timeout_s"] == 120


@pytest.mark.parametrize("server_mode", [False, True], ids=MODES)
def test_group_human_output_shows_epoch_members_and_hand_offs(
    capsys: pytest.CaptureFixture[str], group_db: str, server_mode: bool
) -> None:
    with http_api(group_db) as url:
        where = ["--server", url] if server_mode else ["--db", group_db]
        code, listing, err = run_cli(capsys, "group", "list", *where)
        assert code == 0 and err == ""
        assert "LEADER" in listing and "e2" in listing
        code, shown, err = run_cli(capsys, "group", "show", GROUP, *where)
    assert code == 0 and err == ""
    assert "#2 e2" in shown and "BUCKET WITHOUT OWNER" in shown and "NOT A MEMBER" in shown
    rows = {line.split()[0]: line.split() for line in shown.splitlines() if line.split()[:1] in (["a"], ["b"], ["c"])}
    assert rows["a"][1:3] == ["leader", "1-2"] and "3->c" in rows["a"] and rows["a"][-1] == "live"
    assert rows["b"][1:3] == ["member", "4-6"] and rows["c"][-1] == "dead"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["group", "show", "nope"], "no worker group 'nope'"),
        (["group", "show", GROUP, "--as-of", "999"], "as_of_seq 999 is after the log head"),
        (["group", "show", GROUP, "--member-timeout", "0"], "--member-timeout"),
        (["group", "list", "--as-of", "-1"], "--as-of"),
    ],
)
def test_group_bad_input_exits_2_with_one_line(
    capsys: pytest.CaptureFixture[str], group_db: str, mode: str, args: list[str], message: str
) -> None:
    with http_api(group_db) as url:
        where = ["--server", url] if mode == "server" else ["--db", group_db]
        code, _, err = run_cli(capsys, *args, *where)
    assert code == 2, err
    assert err.count("\n") == 1 and err.startswith("partbuild: error: ") and message in err


def test_group_list_without_groups(capsys: pytest.CaptureFixture[str], where: list[str], sqlite_url: str) -> None:
    EventLog.open(sqlite_url, auto_upgrade=True).close()  # a database without any group
    code, out, err = run_cli(capsys, "group", "list", *where)
    assert code == 0 and out == "no worker group\n", err
    code, out, err = run_cli(capsys, "group", "list", *where, "--json")
    assert code == 0 and json.loads(out) == [], err


# ----------------------------------------------------------------- writes, in each mode


def test_want_observe_taint_cancel(capsys: pytest.CaptureFixture[str], where: list[str], sqlite_url: str) -> None:
    code, out, err = run_cli(capsys, "want", "src/a", "out/b", "--want-id", "w-1", "--comment", "c", *where, "--json")
    assert code == 0, err
    assert json.loads(out) == {"seq": 1, "want_id": "w-1", "state": "idle"}
    code, out, _ = run_cli(capsys, "want", "out/c", "--ttl", "60", "--data-timestamp", "2026-01-02", *where)
    assert code == 0 and "for 1 ref(s) recorded at seq 2" in out

    code, out, _ = run_cli(capsys, "wants", "show", "w-1", *where, "--json")
    detail = json.loads(out)
    assert detail["comment"] == "c" and [s["state"] for s in detail["refs_status"]] == ["missing", "missing"]

    code, out, _ = run_cli(capsys, "observe", "src/a", "--location", "/x/a", "--rows", "5", *where, "--json")
    assert code == 0 and json.loads(out) == {"seq": 3}
    code, out, _ = run_cli(capsys, "partitions", "show", "src/a", *where, "--json")
    assert json.loads(out)["state"] == "live" and json.loads(out)["row_count"] == 5

    code, out, _ = run_cli(capsys, "taint", "src/a", "--reason", "bad", "--only-this-ref", *where)
    assert code == 0 and "src/a tainted at seq 4" in out
    code, out, _ = run_cli(capsys, "partitions", "history", "src/a", *where, "--json")
    assert [i["state"] for i in json.loads(out)] == ["missing", "tainted"]

    code, out, _ = run_cli(capsys, "wants", "cancel", "w-1", "--reason", "not needed", "--user", "ann", *where)
    assert code == 0 and "want w-1 canceled at seq 5" in out
    code, out, _ = run_cli(capsys, "wants", "--state", "canceled", *where, "--json")
    [canceled] = json.loads(out)["items"]
    assert canceled["want_id"] == "w-1" and canceled["cancel_reason"] == "not needed"
    assert head_of(sqlite_url) == 5


def test_want_file_batch_of_25000_refs_takes_three_requests(
    capsys: pytest.CaptureFixture[str], where: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sizes: list[int] = []
    create_wants = Service.create_wants

    def counting(self: Service, request: WantBatchRequest, user: str) -> WantBatchCreatedOut:
        sizes.append(sum(len(want.refs) for want in request.wants))
        return create_wants(self, request, user)

    monkeypatch.setattr(Service, "create_wants", counting)  # the in-process server's service too
    refs = tmp_path / "refs.txt"
    refs.write_text("".join(f"backfill/day={n:05d}\n" for n in range(25_000)))
    code, out, err = run_cli(
        capsys, "want", "--file", str(refs), "--want-per-ref", "--comment", "backfill", *where, "--json"
    )
    assert code == 0, err
    assert sizes == [10_000, 10_000, 5_000]
    batch = json.loads(out)
    assert (batch["first_seq"], batch["last_seq"], len(batch["wants"])) == (1, 25_000, 25_000)
    assert batch["wants"][-1]["seq"] == 25_000

    code, out, _ = run_cli(capsys, "wants", "--all", "--limit", "1000", *where, "--json")
    listed = json.loads(out)["items"]
    assert len(listed) == 25_000 and listed[-1]["refs"] == ["backfill/day=24999"]
    assert {w["comment"] for w in listed} == {"backfill"}


def test_want_file_from_stdin_is_one_want_by_default(
    capsys: pytest.CaptureFixture[str], where: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import io

    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"x/1\n\n  x/2  \nx/3\n")))
    code, out, err = run_cli(capsys, "want", "--file", "-", "--want-id", "all-3", *where, "--json")
    assert code == 0, err
    assert [w["want_id"] for w in json.loads(out)["wants"]] == ["all-3"]
    code, out, _ = run_cli(capsys, "wants", "show", "all-3", *where, "--json")
    assert json.loads(out)["refs"] == ["x/1", "x/2", "x/3"]
    code, out, _ = run_cli(capsys, "wants", *where, "--json")
    assert len(json.loads(out)["items"]) == 1  # a backfill is one row in the wants list


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--want-per-ref", "--want-id", "w"], "--want-per-ref makes many with generated ids"),
        (["--want-per-ref", "--one-want"], "--want-per-ref goes with --file, and not with --one-want"),
    ],
)
def test_want_per_ref_conflicts_exit_2(
    capsys: pytest.CaptureFixture[str], sqlite_url: str, tmp_path: Path, extra: list[str], message: str
) -> None:
    refs = tmp_path / "refs.txt"
    refs.write_text("x/1\nx/2\n")
    code, _, err = run_cli(capsys, "want", "--file", str(refs), *extra, "--db", sqlite_url)
    assert code == 2 and err.count("\n") == 1 and message in err
    code, _, err = run_cli(capsys, "want", "x/1", "--want-per-ref", "--db", sqlite_url)
    assert code == 2 and "--want-per-ref goes with --file" in err


# ----------------------------------------------------------------- bad input: exit 2, one line, nothing changed


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["wants", "show", "nope"], "no want 'nope'"),
        (["wants", "cancel", "nope"], "no want 'nope'"),
        (["wants", "cancel", "w-0"], "want 'w-0' is already canceled"),
        (["want", "a\x01b"], "partition ref contains control character"),
        (["want", "x/1", "x/1"], "listed more than once"),
        (["want", "x/1", "--want-id", "w-0"], "want 'w-0' already exists"),
        (["want", "x/1", "--want-id", "bad/id"], "want_id: String should match pattern"),
        (["want"], "give refs as arguments or --file FILE"),
        (["partitions", "show", "no/such"], "partition 'no/such' has no instance"),
        (["partitions", "history", "no/such"], "partition 'no/such' has no instance"),
        (["partitions", "instance", "00000000-0000-0000-0000-000000000000"], "no partition instance"),
        (["lineage", "00000000-0000-0000-0000-000000000000"], "no partition instance or ref '00000000-"),
        (["partitions", "show", "x/0", "--as-of", "99"], "as_of_seq 99 is after the log head"),
        (["lineage", "no/such"], "partition 'no/such' has no instance"),
        (["runs", "show", "nope"], "no job run 'nope'"),
        (["taint", "x/0"], "is missing; only a Live partition can be tainted"),
        (["observe", "x/0", "--location", ""], "location: String should have at least 1 character"),
        (["wants", "--state", "bogus"], "'bogus' is not one of"),
        (["wants", "--limit", "0"], "0 is not in the range 1<=x<=1000"),
        (["wants", "--limit", "5", "show", "w-0"], "--limit before a subcommand"),
    ],
)
def test_bad_input_exits_2_with_one_line_and_changes_nothing(
    capsys: pytest.CaptureFixture[str], where: list[str], sqlite_url: str, args: list[str], message: str
) -> None:
    for setup in (["want", "x/0", "--want-id", "w-0"], ["wants", "cancel", "w-0"]):
        code, _, err = run_cli(capsys, *setup, *where)
        assert code == 0, err
    head = head_of(sqlite_url)
    code, _, err = run_cli(capsys, *args, *where)
    assert code == 2, err
    assert err.count("\n") == 1 and err.startswith("partbuild: error: ")
    assert message in err
    assert head_of(sqlite_url) == head


def test_graph_checks_refs_before_anything_is_written(
    capsys: pytest.CaptureFixture[str], sqlite_url: str, tmp_path: Path
) -> None:
    bad = tmp_path / "refs.txt"
    bad.write_text("".join(f"raw/clicks/date=2026-01-{n:02d}\n" for n in range(1, 29)) + "no/producer\n")
    code, _, err = run_cli(capsys, "want", "--file", str(bad), "--db", sqlite_url, "--graph", str(PIPELINE))
    assert code == 2 and err.count("\n") == 1 and "no/producer" in err
    with http_api(sqlite_url, graph=load_graph(str(PIPELINE))) as url:
        code, _, err = run_cli(capsys, "want", "--file", str(bad), "--server", url)
        assert code == 2 and err.count("\n") == 1 and "no/producer" in err
        code, _, err = run_cli(
            capsys, "observe", "agg/daily_clicks/date=2026-01-01", "--location", "/x", "--server", url
        )
        assert code == 2 and "only source partitions are observed" in err
    assert head_of(sqlite_url) == 0


def test_file_errors_name_the_line(capsys: pytest.CaptureFixture[str], sqlite_url: str, tmp_path: Path) -> None:
    refs = tmp_path / "refs.txt"
    refs.write_text("a/1\na/2\na/1\n")
    code, _, err = run_cli(capsys, "want", "--file", str(refs), "--db", sqlite_url)
    assert code == 2 and "Invalid value for 'line 3': 'a/1' is listed more than once" in err
    code, _, err = run_cli(capsys, "want", "--file", str(tmp_path / "absent.txt"), "--db", sqlite_url)
    assert code == 2 and "No such file or directory" in err and err.count("\n") == 1
    refs.write_text("".join(f"a/{n}\n" for n in range(10_001)))
    code, _, err = run_cli(capsys, "want", "--file", str(refs), "--db", sqlite_url)
    assert code == 2 and "a single want names at most 10,000 refs (--want-per-ref makes one want per ref)" in err
    assert not Path(sqlite_url.removeprefix("sqlite:///")).exists()  # bad input did not even create the database


def test_replay_through_a_server_verifies_and_goes_back_in_time(
    capsys: pytest.CaptureFixture[str], seeded: str, seeded_server: str
) -> None:
    code, out, err = run_cli(capsys, "replay", "--verify", "--json", "--server", seeded_server)
    assert code == 0, err
    report = json.loads(out)
    assert report["verified"] is True and report["problems"] == []
    code, out, _ = run_cli(capsys, "replay", "--as-of", "5", "--json", "--server", seeded_server)
    assert code == 0 and json.loads(out)["state_seq"] == 5
    code, local, _ = run_cli(capsys, "replay", "--as-of", "5", "--json", "--db", seeded)
    assert json.loads(local)["digest"] == json.loads(out)["digest"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["want", "x/1", "--graph", str(PIPELINE)], "Invalid value for '--graph': applies only with --db"),
        (["replay", "--save-snapshot"], "--save-snapshot needs --db"),
        (["replay", "--as-of", "999999999"], "as_of_seq 999999999 is after the log head"),
    ],
)
def test_database_only_options_are_refused_with_a_server(
    capsys: pytest.CaptureFixture[str], seeded: str, seeded_server: str, args: list[str], message: str
) -> None:
    code, _, err = run_cli(capsys, *args, "--server", seeded_server)
    assert code == 2 and err.count("\n") == 1 and message in err
    assert head_of(seeded) == len(list(simulate(PLAN)))


def test_server_and_db_together_is_a_usage_error(capsys: pytest.CaptureFixture[str], sqlite_url: str) -> None:
    code, _, err = run_cli(capsys, "wants", "--server", "http://127.0.0.1:1", "--db", sqlite_url)
    assert code == 2 and "give either --server or --db" in err
    code, _, err = run_cli(capsys, "wants", "--server", "localhost:8000")
    assert code == 2 and "not an http:// or https:// URL" in err


def test_db_on_the_command_line_overrides_the_server_env(
    capsys: pytest.CaptureFixture[str], seeded: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PARTBUILD_SERVER", f"http://127.0.0.1:{free_port()}")
    code, _, err = run_cli(capsys, "wants")
    assert code == 1 and "cannot reach server" in err  # the env var selects the server...
    code, out, _ = run_cli(capsys, "wants", "--db", seeded, "--json")
    assert code == 0 and len(json.loads(out)["items"]) == 8  # ...unless --db is given


@pytest.mark.parametrize(
    "args",
    [["wants"], ["want", "x/1"], ["wants", "show", "w"], ["replay"], ["lineage", "x/1"], ["taint", "x/1"]],
)
def test_unreachable_server_exits_1_with_one_line(capsys: pytest.CaptureFixture[str], args: list[str]) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    code, out, err = run_cli(capsys, *args, "--server", url)
    assert code == 1 and out == ""
    assert err == f"partbuild: error: cannot reach server {url}: [Errno 111] Connection refused\n"


# ----------------------------------------------------------------- the client itself


def test_both_clients_answer_events_and_health_alike(seeded: str, seeded_server: str) -> None:
    with Database.open(seeded) as db, HttpClient(seeded_server) as http:
        local: Client = Service(db)  # the in-process client is the service itself
        assert local.events(after_seq=5, limit=3) == http.events(after_seq=5, limit=3)
        assert local.health() == http.health()
        for client in (local, http):
            with pytest.raises(InvalidInput, match="limit"):
                client.wants(limit=0)
            with pytest.raises(NotFound, match=r"no partition instance '\.\.'"):
                client.instance("..")  # a dot segment must reach the route, not be normalised away
        assert http.canonical(WEEKLY_W02) == local.canonical(WEEKLY_W02)
        with pytest.raises(InvalidInput, match="must be printable ASCII"):
            http.cancel_want("want-s0w0", None, "jos\u00e9")  # refused before any request


def test_http_client_failures_are_client_errors() -> None:
    def answer(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/wants"):
            return httpx.Response(500, json={"detail": "boom"})
        if request.url.path.endswith("/audit"):
            return httpx.Response(200, text="<html>")
        return httpx.Response(200, json={"unexpected": True})

    with HttpClient("http://test", transport=httpx.MockTransport(answer)) as client:
        with pytest.raises(ServerError, match="server error 500: boom"):
            client.wants()
        with pytest.raises(ServerError, match="non-JSON"):
            client.audit()
        with pytest.raises(ServerError, match="not a JobRun"):
            client.job_run("r")
    with HttpClient(f"http://127.0.0.1:{free_port()}") as client, pytest.raises(Unreachable):
        client.health()


def test_chunked_batch_over_a_server_records_nothing_when_a_later_chunk_is_bad(
    capsys: pytest.CaptureFixture[str], sqlite_url: str, tmp_path: Path
) -> None:
    """Requests are atomic one by one; the CLI validates every chunk on the server before the first write."""
    graph = Graph([Job("noop", ["ok/{n:int}"], lambda ctx: None)])
    refs = tmp_path / "refs.txt"
    refs.write_text("\n".join([*(f"ok/{n}" for n in range(15_000)), "nobody/makes/this"]) + "\n")
    with http_api(sqlite_url, graph) as url:
        code, _, err = run_cli(capsys, "want", "--file", str(refs), "--want-per-ref", "--server", url)
        assert code == 2 and err.count("\n") == 1 and "no job or source dataset produces 'nobody/makes/this'" in err
        assert head_of(sqlite_url) == 0
