"""Real `partbuild` processes for end-to-end tests: the console script, a free port, started and stopped, healthy."""

from __future__ import annotations

import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def partbuild_exe() -> str:
    exe = shutil.which("partbuild", path=str(Path(sys.executable).parent))
    assert exe is not None
    return exe


def wait_healthy(url: str, process: subprocess.Popen[bytes], timeout_s: float, log_file: Path) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert process.poll() is None, f"exited early:\n{log_file.read_text()[-3000:]}"
        try:
            if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    raise AssertionError(f"{url} not healthy within {timeout_s} s:\n{log_file.read_text()[-3000:]}")


def stop_with_sigterm(process: subprocess.Popen[bytes], timeout_s: float, log_file: Path) -> int:
    process.send_signal(signal.SIGTERM)
    try:
        return process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        process.kill()
        raise AssertionError(f"did not stop in {timeout_s} s:\n{log_file.read_text()[-3000:]}") from None


@contextmanager
def started(command: list[str], log_file: Path, env: dict[str, str] | None = None) -> Iterator[subprocess.Popen[bytes]]:
    with log_file.open("wb") as output:
        process = subprocess.Popen(command, env=env, stdout=output, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        yield process
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
