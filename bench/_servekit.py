"""A real `partbuild serve` process of any checkout for the benchmarks, and a plain client for it.

`Server` starts `<checkout>/.venv/bin/partbuild serve` on a SQLite file (loopback, port 0, no tokens),
learns its port from the line it prints, waits until /healthz reports the state at the log head, and
stops it on exit (SIGTERM, then SIGKILL of its pid). It dies with the benchmark (PR_SET_PDEATHSIG) and a
guard kills it when the machine's MemAvailable drops under a floor: the machine is shared. `Client` is
one keep-alive HTTP/1.1 connection (http.client): a GET's round trip on loopback is the server's time
plus a few tenths of a millisecond.
"""

from __future__ import annotations

import contextlib
import ctypes
import http.client
import json
import re
import signal
import subprocess
import threading
import time
from pathlib import Path
from types import TracebackType
from typing import Self

from _common import process_cpu_seconds
from up_memory import child_env

READY_LINE = re.compile(r"partbuild API on (http://127\.0\.0\.1:\d+)")
PR_SET_PDEATHSIG = 1  # linux/prctl.h
MIB = 2**20


class Client:
    """One keep-alive HTTP/1.1 connection to the server; GETs timed one at a time."""

    def __init__(self, base_url: str, timeout_s: float) -> None:
        host, port = base_url.removeprefix("http://").split(":")
        self.connection = http.client.HTTPConnection(host, int(port), timeout=timeout_s)

    def get(self, path: str) -> tuple[int, bytes, float]:
        """(status, body, round trip in ms)."""
        started = time.perf_counter()
        self.connection.request("GET", path)
        response = self.connection.getresponse()
        body = response.read()
        return response.status, body, 1e3 * (time.perf_counter() - started)

    def close(self) -> None:
        self.connection.close()


def proc_memory(pid: int) -> tuple[int, int]:
    """(VmRSS, VmHWM) of a process in bytes."""
    fields = {}
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith(("VmRSS:", "VmHWM:")):
                name, value = line.split(":")
                fields[name] = int(value.split()[0]) * 1024
    return fields["VmRSS"], fields["VmHWM"]


def mem_available() -> int:
    """MemAvailable of the machine in bytes."""
    with open("/proc/meminfo") as info:
        return next(int(line.split()[1]) * 1024 for line in info if line.startswith("MemAvailable:"))


def die_with_parent() -> None:
    """In the child before exec: SIGTERM when the benchmark dies, however it dies (Linux)."""
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


class Server:
    """`partbuild serve` of a checkout on a copy of the log; healthy on enter, stopped on exit, memory guarded."""

    def __init__(
        self,
        executable: Path,
        db_file: Path | str,
        workdir: Path,
        startup_timeout_s: float,
        min_available_gib: float,
        extra: tuple[str, ...] = (),
    ) -> None:
        """`db_file`: a SQLite file, or a database URL; `extra`: more options of `serve` (`--replica`)."""
        self.executable, self.db_file, self.workdir, self.extra = executable, db_file, workdir, extra
        self.startup_timeout_s = startup_timeout_s
        self.min_available = int(min_available_gib * 2**30)
        self.output = workdir / "serve.log"
        self.process: subprocess.Popen[bytes] | None = None
        self.base_url = ""
        self.startup_s = 0.0
        self.head_seq = 0
        self.guard_tripped = ""
        self._guard_stop = threading.Event()

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def __enter__(self) -> Self:
        url = self.db_file if isinstance(self.db_file, str) else f"sqlite:///{self.db_file}"
        command = [str(self.executable), "serve", "--db", url, "--host", "127.0.0.1"]
        started = time.perf_counter()
        with open(self.output, "wb") as output:
            self.process = subprocess.Popen(
                [*command, "--port", "0", *self.extra],
                cwd=self.workdir,
                env=child_env(self.workdir),
                stdin=subprocess.DEVNULL,
                stdout=output,
                stderr=subprocess.STDOUT,
                preexec_fn=die_with_parent,
            )
        threading.Thread(target=self._guard, name="memory-guard", daemon=True).start()
        try:
            self.base_url = self._wait_ready(started)
            self.head_seq = self._wait_healthy(started)
        except BaseException:
            self.stop()
            raise
        self.startup_s = time.perf_counter() - started
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def _wait_ready(self, started: float) -> str:
        while time.perf_counter() - started < self.startup_timeout_s:
            found = READY_LINE.search(self.output.read_text(errors="replace"))
            if found:
                return found.group(1)
            self._check_alive()
            time.sleep(0.1)
        raise TimeoutError(f"`serve` did not print that it serves within {self.startup_timeout_s:.0f} s")

    def _wait_healthy(self, started: float) -> int:
        client = Client(self.base_url, 30)
        try:
            while time.perf_counter() - started < self.startup_timeout_s:
                self._check_alive()
                status, body, _ = client.get("/healthz")
                health = json.loads(body) if status == 200 else {}
                if health and health["state_seq"] == health["head_seq"]:
                    return int(health["head_seq"])
                time.sleep(0.1)
        finally:
            client.close()
        raise TimeoutError(f"/healthz did not report state_seq == head_seq within {self.startup_timeout_s:.0f} s")

    def _check_alive(self) -> None:
        assert self.process is not None
        if self.process.poll() is not None:
            tail = " | ".join(self.output.read_text(errors="replace").splitlines()[-5:])
            raise RuntimeError(f"`serve` exited (code {self.process.returncode}){self.guard_tripped}: {tail}")

    def _guard(self) -> None:
        """SIGKILL the server when the machine runs short of memory (shared with other work)."""
        while not self._guard_stop.wait(0.5):
            available = mem_available()
            if available < self.min_available and self.process is not None and self.process.poll() is None:
                rss = 0
                with contextlib.suppress(OSError):
                    rss, _ = proc_memory(self.pid)
                self.guard_tripped = (
                    f" (memory guard: MemAvailable {available / MIB:,.0f} MiB with the server at "
                    f"{rss / MIB:,.0f} MiB: killed)"
                )
                print(f"  {self.guard_tripped.strip(' ()')}", flush=True)
                self.process.kill()
                return

    def cpu_seconds(self) -> float:
        """User + system CPU time the server process has used so far."""
        return process_cpu_seconds(self.pid)

    def memory(self) -> tuple[int, int]:
        """(VmRSS, VmHWM) of the server process."""
        return proc_memory(self.pid)

    def instances(self) -> int:
        """The partition instances the server holds (its `partbuild_instances` metric, summed over states)."""
        client = Client(self.base_url, 60)
        try:
            _, body, _ = client.get("/metrics")
        finally:
            client.close()
        samples = [line for line in body.decode().splitlines() if re.match(r"partbuild_instances[{ ]", line)]
        return int(sum(float(line.rsplit(" ", 1)[1]) for line in samples))

    def operations_taking(self, parameter: str) -> set[str]:
        """The paths of the GET operations that take `parameter`, from the server's OpenAPI document."""
        client = Client(self.base_url, 60)
        try:
            status, body, _ = client.get("/openapi.json")
        finally:
            client.close()
        if status != 200:
            raise RuntimeError(f"no OpenAPI document (HTTP {status}): cannot tell which reads take {parameter}")
        return {
            path
            for path, item in json.loads(body)["paths"].items()
            if any(p["name"] == parameter for p in item.get("get", {}).get("parameters", []))
        }

    def stop(self) -> None:
        """SIGTERM, 120 s to stop, then SIGKILL (the server's pid only: it starts no children)."""
        self._guard_stop.set()
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(120)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(10)
