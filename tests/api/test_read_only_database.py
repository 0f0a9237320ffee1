"""A server and the CLI on a database that only reads: a PostgreSQL hot standby, here a session read-only by
default (the same refusal, SQLSTATE 25006). Reads answer, from the state store the primary projected too;
writes are refused with a 503 (the CLI: one line, exit 1) that says where to send them; nothing is written."""

from __future__ import annotations

import pytest

from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.database import Database
from partbuild.state.db import DatabaseReadOnly
from partbuild.state.log.events import envelope
from partbuild.state.log.live import LiveState
from partbuild.state.store.projector import Projector

from clikit import run_cli
from pgkit import PgServer, postgres_url, read_only_url
from serverkit import graphless_api_server

REFUSAL = str(DatabaseReadOnly())


def _want(want_id: str, ref: str) -> pb.Event:
    return envelope(pb.WantCreate(want_id=want_id, partition_refs=[ref]))


def test_sqlite_and_a_writable_postgres_database_are_not_read_only(database: Database) -> None:
    assert not database.read_only()


def test_reads_answer_and_writes_are_refused_with_nothing_written(
    pg_server: PgServer, capsys: pytest.CaptureFixture[str]
) -> None:
    for url in postgres_url(pg_server):
        with Database.open(url, auto_upgrade=True) as primary:
            primary.log.append([_want("w", "x/1"), _want("v", "x/2")])
            Projector(LiveState(primary.log), primary.changes).project()  # a server of the primary did
        standby = read_only_url(url)
        with Database.open(standby) as db:
            assert db.read_only()
            with pytest.raises(DatabaseReadOnly):
                db.log.append([_want("refused", "x/3")])
        with graphless_api_server(standby) as api:
            assert api.client.get("/api/v1/wants/w").json()["state"] == "idle"
            assert api.client.get("/api/v1/counts", params={"as_of_seq": 1}).json()["wants"]["idle"] == 1
            answer = api.client.post("/api/v1/wants", json={"refs": ["x/3"]})
            assert answer.status_code == 503 and answer.json()["detail"] == REFUSAL
            assert "Retry-After" not in answer.headers  # it will not work here later either
        code, _out, err = run_cli(capsys, "want", "x/3", "--db", standby)
        assert (code, err) == (1, f"partbuild: error: {REFUSAL}\n")
        code, _out, err = run_cli(capsys, "tokens", "add", "ci", "--role", "reader", "--db", standby)
        assert (code, err) == (1, f"partbuild: error: {REFUSAL}\n")  # an operational store's write too
        with Database.open(url) as primary:
            assert primary.log.head() == 2 and primary.tokens.all() == []
