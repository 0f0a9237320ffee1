"""`partbuild tokens add|list|revoke`, the token store on both backends, the CLI's --token, and the loopback rule.

The loopback rule runs real `partbuild serve` / `partbuild up` processes: on a non-loopback
address with no token in the database they exit 2 with one line naming --insecure.
"""

from __future__ import annotations

import json
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
import sqlalchemy as sa

from partbuild.api.cli import main
from partbuild.state.database import Database
from partbuild.state.ops.tokens import TOKEN_PREFIX, Role, TokenExists, UnknownToken, token_hash

from serverkit import graphless_api_server

ROOT = Path(__file__).resolve().parent.parent


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


# ----------------------------------------------------------------- real processes: the loopback rule


def partbuild_exe() -> str:
    exe = shutil.which("partbuild", path=str(Path(sys.executable).parent))
    assert exe is not None
    return exe


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


REFUSED = (
    "partbuild: error: refusing open access on non-loopback address 0.0.0.0: the database has no API token "
    "(create one with 'partbuild tokens add NAME --role admin', or pass --insecure to serve without)\n"
)


def _start(args: list[str], log_file: Path, *, stderr: int | None = subprocess.STDOUT) -> subprocess.Popen[bytes]:
    """`args` as a process writing to `log_file` (its stderr too, unless `stderr=PIPE` to read the one line)."""
    with log_file.open("wb") as output:
        return subprocess.Popen(args, stdout=output, stderr=stderr, stdin=subprocess.DEVNULL)


def _healthy(process: subprocess.Popen[bytes], url: str, log_file: Path) -> None:
    deadline = time.monotonic() + 60
    while True:
        assert process.poll() is None, log_file.read_text()
        try:
            if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                return
        except httpx.TransportError:
            pass
        assert time.monotonic() < deadline, log_file.read_text()
        time.sleep(0.1)


def _stop(process: subprocess.Popen[bytes]) -> int:
    process.send_signal(signal.SIGTERM)
    try:
        return process.wait(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def test_the_loopback_rule_with_real_processes(tmp_path: Path) -> None:
    """Started together (each start costs seconds of imports): refusals of serve and up, --insecure, a token."""
    open_db, closed_db = f"sqlite:///{tmp_path / 'open.db'}", f"sqlite:///{tmp_path / 'closed.db'}"
    with Database.open(closed_db) as db:
        token = db.tokens.add("ops", Role.ADMIN, now_ms=1)
    exe, anywhere = partbuild_exe(), ["--host", "0.0.0.0"]
    graph = ["--graph", str(ROOT / "examples" / "clicks" / "pipeline.py")]
    refused = [
        _start([exe, "serve", "--db", open_db, *anywhere, "--port", "0"], tmp_path / "s.log", stderr=subprocess.PIPE),
        _start(
            [exe, "up", "--db", open_db, *anywhere, "--port", "0", *graph], tmp_path / "u.log", stderr=subprocess.PIPE
        ),
    ]
    ports = free_port(), free_port()
    servers = [
        _start([exe, "serve", "--db", open_db, *anywhere, "--port", str(ports[0]), "--insecure"], tmp_path / "a.log"),
        _start([exe, "serve", "--db", closed_db, *anywhere, "--port", str(ports[1])], tmp_path / "b.log"),
    ]
    try:
        for process in refused:
            _, err = process.communicate(timeout=60)
            assert process.returncode == 2 and err.decode().endswith(REFUSED), err.decode()
        (insecure, secured), (open_url, closed_url) = servers, [f"http://127.0.0.1:{port}" for port in ports]
        _healthy(insecure, open_url, tmp_path / "a.log")
        _healthy(secured, closed_url, tmp_path / "b.log")
        assert httpx.get(f"{open_url}/api/v1/wants").status_code == 200  # open access, as asked
        assert httpx.get(f"{closed_url}/api/v1/wants").status_code == 401
        assert httpx.get(f"{closed_url}/api/v1/wants", headers={"Authorization": f"Bearer {token}"}).status_code == 200
    finally:
        codes = [_stop(process) for process in servers]
    assert codes == [0, 0]
