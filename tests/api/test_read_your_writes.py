"""Two API servers over one database: read-your-writes with `min_seq`, `as_of_seq` from the log, and writes
through a server that has not tailed the log yet."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from partbuild.api.service import Service
from partbuild.state.database import Database

from httpkit import PARTITIONS, WANTS, canonical, head_seq, listed, observe, ok, problem, want
from serverkit import ApiServer, serve_service


@contextmanager
def lagging_server(url: str) -> Iterator[ApiServer]:
    """Server B on the database at `url`, tailing the log only every 60 s, like a second process."""
    with Database.open(url) as db, serve_service(Service(db), tail_interval_s=60) as b:
        yield b


@pytest.fixture
def lagging(db_api_server: ApiServer, db_url: str) -> Iterator[ApiServer]:
    """A lagging server B on the database of `db_api_server` (A), on each backend."""
    with lagging_server(db_url) as b:
        yield b


@pytest.fixture
def lagging_on_sqlite(api_server: ApiServer, sqlite_url: str) -> Iterator[ApiServer]:
    """A lagging server B on the database of `api_server` (A); for the bugs, which are not storage bugs."""
    with lagging_server(sqlite_url) as b:
        yield b


def test_read_your_writes_across_servers_with_min_seq(db_api_server: ApiServer, lagging: ApiServer) -> None:
    """A write through A is visible through B at once when read with `min_seq` = the seq A returned."""
    a, b = db_api_server.client, lagging.client
    created = want(a, ["ryw/x"], want_id="ryw-1")
    # B has not tailed the log since it started, so without min_seq it does not know the want yet...
    problem(b.get(f"{WANTS}/ryw-1"), 404, "ryw-1")
    # ...and with it, B catches up before answering, long before its next tail.
    started = time.monotonic()
    got = ok(b.get(f"{WANTS}/ryw-1", params={"min_seq": created["seq"]}))
    assert time.monotonic() - started < 10
    assert (got["want_id"], got["created_seq"], got["refs"]) == ("ryw-1", created["seq"], ["ryw/x"])

    seq = observe(a, "ryw/src", "/data/ryw")
    assert canonical(b, "ryw/src", min_seq=seq)["created_seq"] == seq
    assert ok(b.get("/healthz")) == {"status": "ok", "head_seq": seq, "state_seq": seq, "orchestrator": None}
    batch = ok(a.post(f"{WANTS}/batch", json={"wants": [{"refs": ["ryw/y"], "want_id": "ryw-2"}]}), 201)
    assert listed(b, WANTS, "want_id", min_seq=batch["last_seq"]) == ["ryw-1", "ryw-2"]
    assert listed(b, PARTITIONS, "ref", min_seq=batch["last_seq"]) == ["ryw/src", "ryw/x", "ryw/y"]


def test_as_of_seq_on_a_lagging_server_answers_from_the_log(
    api_server: ApiServer, lagging_on_sqlite: ApiServer
) -> None:
    """The state as of seq N is the same whichever server is asked."""
    seq = observe(api_server.client, "lag/src", "/data/lag")
    assert canonical(lagging_on_sqlite.client, "lag/src", as_of_seq=seq)["created_seq"] == seq


def test_a_batch_refused_on_a_lagging_server_records_none_of_its_wants(
    api_server: ApiServer, lagging_on_sqlite: ApiServer
) -> None:
    """A batch is all or none, also when a server only finds a conflict after appending."""
    a, b = api_server.client, lagging_on_sqlite.client
    want(a, ["lag/x"], want_id="lag-dup")
    batch = {"wants": [{"refs": ["lag/y"], "want_id": "lag-fresh"}, {"refs": ["lag/z"], "want_id": "lag-dup"}]}
    problem(b.post(f"{WANTS}/batch", json=batch), 409, "lag-dup")
    problem(a.get(f"{WANTS}/lag-fresh", params={"min_seq": head_seq(a)}), 404, "lag-fresh")


def test_taint_on_a_lagging_server_sees_the_log(api_server: ApiServer, lagging_on_sqlite: ApiServer) -> None:
    """Tainting a partition that is Live in the log works through any server."""
    observe(api_server.client, "lag/src", "/data/lag")
    ok(lagging_on_sqlite.client.post(f"{PARTITIONS}/taint", json={"ref": "lag/src"}), 201)


def test_cancel_on_a_lagging_server_sees_the_log(api_server: ApiServer, lagging_on_sqlite: ApiServer) -> None:
    """Cancelling a want that is active in the log works through any server."""
    want(api_server.client, ["lag/w"], want_id="lag-cancel")
    ok(lagging_on_sqlite.client.post(f"{WANTS}/lag-cancel/cancel"))
