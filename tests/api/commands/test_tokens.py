"""`partbuild tokens add|list|revoke`, the token store on both backends, the CLI's --token, and the loopback rule.

The loopback rule with real `partbuild serve` / `partbuild up` processes: tests/e2e/test_tokens_processes.py.
"""

from __future__ import annotations

import json

import pytest
import sqlalchemy as sa

from partbuild.api.cli import main
from partbuild.state.database import Database
from partbuild.state.ops.tokens import TOKEN_PREFIX, Role, TokenExists, UnknownToken, token_hash

from serverkit import graphless_api_server


def run_cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """Run the CLI in-process; returns (exit code, stdout, stderr)."""
    with pytest.raises(SystemExit) as exited:
        main(list(args))
    out, err = capsys.readouterr()
    return int(exited.value.code or 0), out, err


def test_tokens_add_list_revoke(capsys: pytest.CaptureFixture[str], sqlite_url: str) -> None:
    code, out, err = run_cli(capsys, "tokens", "add", "ci-bot", "--role", "writer", "--db", sqlite_url)
    assert code == 0, err
    token = out.strip()
    assert out.count("\n") == 1 and token.startswith(TOKEN_PREFIX) and len(token) == len(TOKEN_PREFIX) + 43
    assert "shown only once" in err and token not in err

    code, out, err = run_cli(capsys, "tokens", "list", "--db", sqlite_url)
    assert code == 0 and "ci-bot" in out and "writer" in out
    assert token not in out and token_hash(token) not in out

    assert run_cli(capsys, "tokens", "revoke", "ci-bot", "--db", sqlite_url)[:2] == (0, "token 'ci-bot' revoked\n")
    assert (
        run_cli(capsys, "tokens", "revoke", "ci-bot", "--db", sqlite_url)[1] == "token 'ci-bot' was revoked already\n"
    )
    code, out, _ = run_cli(capsys, "tokens", "list", "--db", sqlite_url, "--json")
    (row,) = json.loads(out)
    assert row["name"] == "ci-bot" and row["role"] == "writer" and row["revoked_ms"] >= row["created_ms"] > 0
    assert set(row) == {"name", "role", "created_ms", "revoked_ms"}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("add", "x", "--role", "owner"), "unknown role 'owner': one of reader, writer, admin"),
        (("add", "a b", "--role", "reader"), "invalid token name 'a b'"),
        (("add", "dup", "--role", "reader"), "a token named 'dup' exists already (names are never reused)"),
        (("revoke", "nobody"), "no token named 'nobody'"),
    ],
)
def test_tokens_bad_input_exits_2_with_one_line(
    capsys: pytest.CaptureFixture[str], sqlite_url: str, args: tuple[str, ...], message: str
) -> None:
    assert run_cli(capsys, "tokens", "add", "dup", "--role", "admin", "--db", sqlite_url)[0] == 0
    code, out, err = run_cli(capsys, "tokens", *args, "--db", sqlite_url)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and message in err


def test_token_store_on_each_backend(db_url: str) -> None:
    with Database.open(db_url, auto_upgrade=True) as db:
        log = db.log
        store = db.tokens
        assert store.all() == [] and store.by_hash() == {}
        token = store.add("ann", Role.READER, now_ms=10)
        other = store.add("bob", Role.ADMIN, now_ms=20)
        assert token != other
        with pytest.raises(TokenExists):
            store.add("ann", Role.ADMIN, now_ms=30)
        with pytest.raises(ValueError, match="invalid token name"):
            store.add("", Role.ADMIN, now_ms=30)
        info = store.find(token)
        assert info is not None and (info.name, info.role, info.created_ms, info.active) == (
            "ann",
            Role.READER,
            10,
            True,
        )
        assert store.find(TOKEN_PREFIX + "nope") is None
        assert store.revoke("ann", now_ms=40) is True
        assert store.revoke("ann", now_ms=50) is False
        with pytest.raises(UnknownToken):
            store.revoke("carl", now_ms=50)
        assert [(t.name, t.revoked_ms) for t in store.all()] == [("ann", 40), ("bob", None)]
        assert set(store.by_hash()) == {token_hash(token), token_hash(other)}
        key = store.session_key(now_ms=60)
        assert len(key) == 32 and store.session_key(now_ms=70) == key
        # Only hashes are stored: no column of any row holds a token.
        with log._engine.connect() as conn:
            cells = [str(cell) for row in conn.execute(sa.text("SELECT * FROM api_tokens")) for cell in row]
        assert not any(token in cell or other in cell for cell in cells)


def test_the_cli_sends_its_token_from_the_option_or_the_environment(
    capsys: pytest.CaptureFixture[str], sqlite_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with Database.open(sqlite_url) as db:
        reader = db.tokens.add("rita", Role.READER, now_ms=1)
        writer = db.tokens.add("walt", Role.WRITER, now_ms=1)
    with graphless_api_server(sqlite_url) as api:
        code, _, err = run_cli(capsys, "wants", "list", "--server", api.url)
        assert code == 2 and err.count("\n") == 1 and "needs a token" in err and "--token" in err
        code, _, err = run_cli(capsys, "want", "a/b", "--server", api.url, "--token", reader)
        assert code == 2 and "token 'rita' has role reader" in err and "needs writer" in err and reader not in err
        code, out, err = run_cli(capsys, "want", "a/b", "--server", api.url, "--token", writer, "--user", "x", "--json")
        assert code == 0, err
        monkeypatch.setenv("PARTBUILD_TOKEN", reader)
        code, out, err = run_cli(capsys, "wants", "list", "--server", api.url, "--json")
        assert code == 0, err
        assert [want["source"] for want in json.loads(out)["items"]] == ["manual:walt"]
        monkeypatch.setenv("PARTBUILD_TOKEN", "pbt_wrong")
        code, _, err = run_cli(capsys, "wants", "list", "--server", api.url)
        assert code == 2 and "unknown or revoked token" in err and "pbt_wrong" not in err
