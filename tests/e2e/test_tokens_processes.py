"""The loopback rule with real `partbuild serve` / `partbuild up` processes: on a non-loopback address with no
token in the database they exit 2 with one line naming --insecure; with --insecure, or a token, they serve."""

from __future__ import annotations

import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from partbuild.state.database import Database
from partbuild.state.ops.tokens import Role

pytestmark = pytest.mark.process

ROOT = Path(__file__).resolve().parents[2]


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
