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
from typing import Any

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


# A graph of one job writing a small file per ref, four refs a run: what process tests build without Spark.
REPORT_GRAPH = """
from pathlib import Path

from partbuild.orchestrator.context import JobContext
from partbuild.orchestrator.graph import Graph, Job


def write_report(ctx: JobContext) -> None:
    for target in ctx.outputs:
        Path(target.location).mkdir(parents=True, exist_ok=True)
        (Path(target.location) / "report.txt").write_text(target.ref)


graph = Graph([Job("report", ["report/{n:int}"], write_report, batch_size=4)])
"""


class ApiProcess:
    """What a test asks of a `partbuild` process serving the API at `url`: write a want, read a path."""

    url: str

    def want(self, refs: list[str], want_id: str) -> int:
        """Write a want of `refs` here; the seq it was written at."""
        written = httpx.post(f"{self.url}/api/v1/wants", json={"refs": refs, "want_id": want_id}, timeout=30)
        assert written.status_code in (200, 201), written.text
        return int(written.json()["seq"])

    def get(self, path: str, **params: Any) -> Any:
        answer = httpx.get(f"{self.url}/api/v1{path}", params=params, timeout=30)
        assert answer.status_code == 200, (self, path, answer.text)
        return answer.json()
