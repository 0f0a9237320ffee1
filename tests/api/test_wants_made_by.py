"""Wants say who made them and are filtered by it: `GET /wants?made_by=`, `partbuild wants list --made-by`.

Issue 35, item 4: 362 of 378 wants of a trial were made by reactions, and a person's could not be told
from them. A want's maker is read from the log: a schedule's tick or a reaction's firing (the want's
cause and the id the fold checked), a derivative want's parent, else its event's source (a person's
user, or the token's name). Each kind is made here as it is in production: wants over HTTP, the
orchestrator's events appended to the real log. The filter holds as of a seq, and a malformed one is
a 422 (exit 2 for the CLI) in one line.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx
import pytest

from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.database import Database
from partbuild.state.fold.reactions import reaction_want_id
from partbuild.state.fold.schedules import tick_want_id
from partbuild.state.log.events import envelope, manual, system
from partbuild.state.ops.roles import Role

from clikit import run_cli
from httpkit import WANTS, canonical, head_seq, listed, observe, ok, problem, walk, want
from serverkit import ApiServer, graphless_api_server

TICK_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z
SCHEDULED = tick_want_id("nightly", TICK_MS, pb.TICK_KIND_SCHEDULED)
BY_HAND = tick_want_id("nightly", TICK_MS + 5_000, pb.TICK_KIND_MANUAL)
LOOKALIKE = tick_want_id("nightly", TICK_MS + 9_000, pb.TICK_KIND_SCHEDULED)  # a person's want, named like a tick
ORCHESTRATOR = system("orchestrator")


def as_user(user: str) -> dict[str, str]:
    return {"X-Partbuild-User": user}


def append(api: ApiServer, payload: object, source: pb.EventSource) -> int:
    return api.log.append([envelope(payload, source=source)]).last_seq  # type: ignore[arg-type]


def tick(api: ApiServer, tick_ms: int, kind: int, ref: str, source: pb.EventSource) -> int:
    want_id = tick_want_id("nightly", tick_ms, kind)
    created = pb.WantCreate(want_id=want_id, partition_refs=[ref])
    return append(api, pb.ScheduleTick(schedule="nightly", tick_ms=tick_ms, kind=kind, want=created), source)


def fire(api: ApiServer) -> str:
    """A source arrives and the reaction on job daily fires: its want's id."""
    observe(api.client, "src/r", "/data/r")
    cause = canonical(api.client, "src/r")["uuid"]
    want_id = reaction_want_id("daily", pb.REACTION_KIND_SOURCE_ARRIVAL, cause, "d/r")
    fired = pb.ReactionFired(
        job="daily",
        kind=pb.REACTION_KIND_SOURCE_ARRIVAL,
        cause_ref="src/r",
        cause_instance_uuid=cause,
        want=pb.WantCreate(want_id=want_id, partition_refs=["d/r"]),
    )
    append(api, fired, ORCHESTRATOR)
    return want_id


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ApiServer, dict[str, str], dict[str, int]]]:
    """A server with a want of every maker: (server, want id -> its maker, where some of them landed)."""
    url = f"sqlite:///{tmp_path_factory.mktemp('made_by') / 'partbuild.db'}"
    with graphless_api_server(url) as api:
        client = api.client
        seqs = {"first": want(client, ["p/1"], want_id="anon-1")["seq"]}
        ok(client.post(WANTS, json={"refs": ["p/2"], "want_id": "bob-1"}, headers=as_user("bob")), 201)
        seqs["schedule"] = tick(api, TICK_MS, pb.TICK_KIND_SCHEDULED, "n/1", ORCHESTRATOR)
        tick(api, TICK_MS + 5_000, pb.TICK_KIND_MANUAL, "n/2", manual("ann"))  # ann ticked it by hand
        reaction = fire(api)
        seqs["reaction"] = api.log.head()
        append(
            api, pb.WantCreate(want_id="anon-1-inputs", partition_refs=["p/0"], parent_want_id="anon-1"), ORCHESTRATOR
        )
        append(api, pb.WantCreate(want_id="imported", partition_refs=["s/1"]), system("importer"))
        body = {"refs": ["n/3"], "want_id": LOOKALIKE}
        ok(client.post(WANTS, json=body, headers=as_user("carol")), 201)
        makers = {
            "anon-1": "user:anonymous",  # the open server's default user
            "bob-1": "user:bob",
            SCHEDULED: "schedule:nightly",
            BY_HAND: "schedule:nightly",
            reaction: "reaction:daily",
            "anon-1-inputs": "derived:anon-1",
            "imported": "system:importer",
            LOOKALIKE: "user:carol",  # no tick made it: its id is only a name
        }
        yield api, makers, seqs


def ids(client: httpx.Client, **params: object) -> list[str]:
    return listed(client, WANTS, "want_id", **params)


def test_each_want_says_who_made_it(made: tuple[ApiServer, dict[str, str], dict[str, int]]) -> None:
    """The list and the want itself: user, schedule (a tick by hand too), reaction, derived, system."""
    api, makers, _ = made
    items = [item for page in walk(api.client, WANTS, 100, min_seq=api.log.head()) for item in page]
    assert {item["want_id"]: item["made_by"] for item in items} == makers
    for want_id, maker in makers.items():
        assert ok(api.client.get(f"{WANTS}/{want_id}"))["made_by"] == maker


FILTERS = [
    ("user", ["anon-1", "bob-1", LOOKALIKE]),
    ("user:bob", ["bob-1"]),
    ("user:ann", []),  # ann's tick by hand is the schedule's want
    ("schedule", [SCHEDULED, BY_HAND]),
    ("schedule:nightly", [SCHEDULED, BY_HAND]),
    ("schedule:night", []),  # a name is matched whole
    ("reaction", ["reaction"]),
    ("reaction:daily", ["reaction"]),
    ("reaction:weekly", []),
    ("derived", ["anon-1-inputs"]),
    ("derived:anon-1", ["anon-1-inputs"]),
    ("system", ["imported"]),
    ("system:importer", ["imported"]),
]


@pytest.mark.parametrize(("made_by", "expected"), FILTERS, ids=[f for f, _ in FILTERS])
def test_wants_are_filtered_by_who_made_them(
    made: tuple[ApiServer, dict[str, str], dict[str, int]], made_by: str, expected: list[str]
) -> None:
    """A kind alone lists every want of it; KIND:NAME only that one's, oldest first, page by page alike."""
    api, makers, _ = made
    wanted = [next(w for w, m in makers.items() if m == "reaction:daily") if e == "reaction" else e for e in expected]
    assert ids(api.client, made_by=made_by) == wanted
    assert ids(api.client, made_by=made_by, limit=1) == wanted  # cursors page the filtered list


def test_the_filter_combines_with_the_others(made: tuple[ApiServer, dict[str, str], dict[str, int]]) -> None:
    api, _, _ = made
    assert ids(api.client, made_by="user", ref="p/2") == ["bob-1"]
    assert ids(api.client, made_by="derived", root="anon-1") == ["anon-1-inputs"]
    assert ids(api.client, made_by="schedule", state="canceled") == []


def test_the_filter_holds_as_of_a_seq(made: tuple[ApiServer, dict[str, str], dict[str, int]]) -> None:
    """As of a seq, only the wants made by then, by whom they were made: the filter is never ignored."""
    api, _, seqs = made
    assert ids(api.client, made_by="user", as_of_seq=seqs["first"]) == ["anon-1"]
    assert ids(api.client, made_by="schedule", as_of_seq=seqs["schedule"]) == [SCHEDULED]
    assert ids(api.client, made_by="reaction", as_of_seq=seqs["reaction"] - 1) == []
    assert len(ids(api.client, made_by="reaction", as_of_seq=seqs["reaction"])) == 1
    page = ok(api.client.get(WANTS, params={"made_by": "user", "as_of_seq": seqs["first"]}))
    assert page["as_of_seq"] == seqs["first"] and [w["made_by"] for w in page["items"]] == ["user:anonymous"]


BAD = [
    ("robot", "must be one of user, schedule, reaction, derived, system"),
    ("users", "must be one of"),
    ("User:ann", "must be one of"),
    ("", "must be one of"),
    ("user:", "no name after it"),
    ("user:a\x01b", "no control characters"),
    ("user:" + "a" * 400, "at most 300 characters"),
]


@pytest.mark.parametrize(("made_by", "words"), BAD, ids=[repr(b[:12]) for b, _ in BAD])
def test_a_malformed_filter_is_a_422_in_one_line(
    made: tuple[ApiServer, dict[str, str], dict[str, int]], made_by: str, words: str
) -> None:
    api, _, _ = made
    before = head_seq(api.client)
    detail = problem(api.client.get(WANTS, params={"made_by": made_by}), 422, "query.made_by", words)
    assert "\n" not in detail and head_seq(api.client) == before


def test_a_token_makes_its_holder_the_maker(sqlite_url: str) -> None:
    """With tokens, the user recorded is the token's name whatever the header says: the filter finds it by that."""
    with Database.open(sqlite_url, auto_upgrade=True) as db:
        token = db.tokens.add("walt", Role.WRITER, now_ms=1)
    with graphless_api_server(sqlite_url) as api:
        headers = {"Authorization": f"Bearer {token}", **as_user("mallory")}
        ok(api.client.post(WANTS, json={"refs": ["t/1"], "want_id": "walts"}, headers=headers), 201)
        page = ok(api.client.get(WANTS, params={"made_by": "user:walt"}, headers=headers))
        assert [(w["want_id"], w["made_by"]) for w in page["items"]] == [("walts", "user:walt")]
        assert ok(api.client.get(WANTS, params={"made_by": "user:mallory"}, headers=headers))["items"] == []


def test_the_cli_filters_by_maker_on_the_server_and_the_database(
    made: tuple[ApiServer, dict[str, str], dict[str, int]], capsys: pytest.CaptureFixture[str]
) -> None:
    """`wants list --made-by`, over HTTP and as of a seq; a malformed value exits 2 with one line."""
    api, _, seqs = made
    code, out, err = run_cli(capsys, "wants", "list", "--made-by", "user", "--json", "--server", api.url)
    assert code == 0, err
    assert [w["want_id"] for w in json.loads(out)["items"]] == ["anon-1", "bob-1", LOOKALIKE]
    as_of = ["--as-of", str(seqs["schedule"]), "--json", "--server", api.url]
    code, out, err = run_cli(capsys, "wants", "list", "--made-by", "schedule:nightly", *as_of)
    assert code == 0 and [w["want_id"] for w in json.loads(out)["items"]] == [SCHEDULED], err
    code, out, err = run_cli(capsys, "wants", "--made-by", "reaction", "--server", api.url)
    assert code == 0 and "reaction:daily" in out and "user:bob" not in out and "MADE BY" in out, err
    for bad in ("robot", "user:"):
        code, out, err = run_cli(capsys, "wants", "list", "--made-by", bad, "--server", api.url)
        assert code == 2 and out == "" and err.count("\n") == 1 and "--made-by" in err and "made_by" in err, err


def test_the_cli_filters_on_the_database_too(sqlite_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    """`--db`: the same filter, in-process."""
    with graphless_api_server(sqlite_url) as api:
        ok(api.client.post(WANTS, json={"refs": ["c/1"], "want_id": "cli-ann"}, headers=as_user("ann")), 201)
        ok(api.client.post(WANTS, json={"refs": ["c/2"], "want_id": "cli-bob"}, headers=as_user("bob")), 201)
    code, out, err = run_cli(capsys, "wants", "list", "--made-by", "user:bob", "--json", "--db", sqlite_url)
    assert code == 0 and [w["want_id"] for w in json.loads(out)["items"]] == ["cli-bob"], err
    code, _, err = run_cli(capsys, "wants", "list", "--made-by", "reactions", "--db", sqlite_url)
    assert code == 2 and err.count("\n") == 1 and "must be one of" in err
