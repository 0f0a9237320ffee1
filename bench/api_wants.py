"""Want creation over HTTP: one uvicorn worker on a fresh SQLite log, a load generator in this process.

Targets: single-ref POST /api/v1/wants at >= 500 requests/s with p99 <= 50 ms
(one worker, SQLite); POST /api/v1/wants/batch of 10,000 single-ref wants in
<= 1 s (median of 3 fresh batches of distinct refs).

The server runs in its own process (multiprocessing spawn). The load generator
is a minimal asyncio HTTP/1.1 keep-alive client (about 0.15 ms of CPU per
request) with a fixed number of requests in flight: it shares the 2-core machine
with the server, and `--client httpx` (httpx.AsyncClient, 1-2 ms per request, as
much as the server) measures mostly itself. The CPU time of the server, of the
load generator and of all other processes during the run is reported next to
the figures. The server-side split
(append, fold) comes from the service's own Prometheus histograms.

    .venv/bin/python bench/api_wants.py [--requests 5000] [--concurrency 16] [--batch 10000] [--client raw|httpx]
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import json
import math
import multiprocessing as mp
import os
import signal
import socket
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from types import TracebackType
from typing import Any, Self
from urllib.parse import urlencode

import httpx
from _common import exit_on_sigterm, machine, process_cpu_seconds, server_timing

TARGET_RATE = 500.0
TARGET_P99_S = 0.050
TARGET_BATCH_S = 1.0
WARM_UP = 200
PR_SET_PDEATHSIG = 1  # linux/prctl.h


# ----------------------------------------------------------------- the server process


def serve(url: str, port: int, report: Connection, parent_pid: int, timing: bool = False) -> None:
    """Child process: the API over the log at `url`, one uvicorn worker on 127.0.0.1:`port`.

    Sends the seconds the service took to load its state (replay) through `report`.
    Gets SIGTERM when the benchmark process dies, however it dies (Linux). With `timing`,
    every response carries a `Server-Timing: app;dur=<ms>` header (see `_common.server_timing`).
    """
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != parent_pid:  # the parent died before prctl
        return
    import uvicorn

    from partbuild.api.app import create_app
    from partbuild.api.service import Service
    from partbuild.state.database import Database

    started = time.perf_counter()
    service = Service(Database.open(url))
    report.send(time.perf_counter() - started)
    report.close()
    app = server_timing(create_app(service)) if timing else create_app(service)
    uvicorn.run(app, host="127.0.0.1", port=port, workers=1, log_level="warning", access_log=False)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class ApiServer:
    """The API server in a spawned process; waits for /healthz on enter, always stops it on exit."""

    def __init__(self, url: str, startup_timeout_s: float = 60.0, server_timing: bool = False) -> None:
        self.url = url
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.startup_timeout_s = startup_timeout_s
        self.startup_s = 0.0  # process start to the first healthy /healthz
        self.load_s = 0.0  # of which: Service() construction (state load by replay)
        context = mp.get_context("spawn")
        self._report, child_end = context.Pipe(duplex=False)
        self._child_end = child_end
        self.process = context.Process(
            target=serve,
            args=(url, self.port, child_end, os.getpid(), server_timing),
            name="partbuild-api",
            daemon=True,
        )

    @property
    def pid(self) -> int:
        assert self.process.pid is not None
        return self.process.pid

    def __enter__(self) -> Self:
        started = time.perf_counter()
        self.process.start()
        self._child_end.close()
        try:
            self._wait_healthy(started)
        except BaseException:
            self.stop()
            raise
        self.startup_s = time.perf_counter() - started
        if self._report.poll(5):
            self.load_s = float(self._report.recv())
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def _wait_healthy(self, started: float) -> None:
        deadline = started + self.startup_timeout_s
        with httpx.Client(base_url=self.base_url, timeout=5) as client:
            while time.perf_counter() < deadline:
                if not self.process.is_alive():
                    raise RuntimeError(f"the API server exited during start-up (exit code {self.process.exitcode})")
                try:
                    response = client.get("/healthz")
                    if response.status_code == 200:
                        return
                except httpx.TransportError:
                    pass
                time.sleep(0.1)
        raise TimeoutError(f"the API server was not healthy within {self.startup_timeout_s:.0f} s")

    def stop(self) -> None:
        """SIGTERM (uvicorn shuts down gracefully), then SIGKILL if it is still there after 15 s."""
        if self.process.pid is None:
            return
        if self.process.is_alive():
            self.process.terminate()
            self.process.join(15)
        if self.process.is_alive():
            self.process.kill()
        self.process.join(5)

    def cpu_seconds(self) -> float:
        """User + system CPU time the server process has used so far."""
        return process_cpu_seconds(self.pid)

    def rss_bytes(self) -> tuple[int, int]:
        """(current, peak) resident set size of the server process."""
        fields = {}
        with open(f"/proc/{self.pid}/status") as status:
            for line in status:
                if line.startswith(("VmRSS:", "VmHWM:")):
                    name, value = line.split(":")
                    fields[name] = int(value.split()[0]) * 1024
        return fields["VmRSS"], fields["VmHWM"]

    def metric_sums(self) -> dict[str, float]:
        """Unlabelled samples of /metrics (e.g. partbuild_append_seconds_sum) and per-family totals."""
        text = httpx.get(f"{self.base_url}/metrics", timeout=30).text
        sums: dict[str, float] = {}
        for line in text.splitlines():
            if not line or line.startswith("#"):
                continue
            name_labels, _, value = line.rpartition(" ")
            name = name_labels.split("{", 1)[0]
            if name_labels == name or name in ("partbuild_instances", "partbuild_wants", "partbuild_job_runs"):
                sums[name] = sums.get(name, 0.0) + float(value)
        return sums


# ----------------------------------------------------------------- the load generator


RequestSpec = tuple[str, str, dict[str, Any]]  # method, path, {"json": body} and/or {"params": query}
Check = Callable[[int, int, bytes], str | None]  # (index, status, body) -> error message or None


@dataclass
class LoadResult:
    """Per-request latencies (s) of the successful requests, errors, wall and CPU time."""

    latencies: list[float] = field(default_factory=list)
    indexes: list[int] = field(default_factory=list)  # the request index of each latency
    errors: list[str] = field(default_factory=list)
    sent: int = 0
    wall_s: float = 0.0
    client_cpu_s: float = 0.0  # this process (the load generator)
    machine_busy_s: float = 0.0  # all processes on the machine, from /proc/stat
    timed_out: bool = False

    def percentile(self, p: float) -> float:
        ordered = sorted(self.latencies)
        return ordered[max(0, min(len(ordered) - 1, math.ceil(p * len(ordered)) - 1))] if ordered else math.nan

    @property
    def rate(self) -> float:
        return len(self.latencies) / self.wall_s if self.wall_s else 0.0

    def summary(self) -> str:
        ms = [1000 * self.percentile(p) for p in (0.50, 0.95, 0.99)]
        worst = 1000 * max(self.latencies, default=math.nan)
        return (
            f"p50 {ms[0]:.1f} ms, p95 {ms[1]:.1f} ms, p99 {ms[2]:.1f} ms, max {worst:.1f} ms; "
            f"{self.rate:,.0f} req/s; errors {len(self.errors)}"
        )

    def cpu_line(self, server_cpu_s: float) -> str:
        """Where the machine's CPU went during the run: server, load generator, everything else."""
        done = max(len(self.latencies), 1)
        others = max(0.0, self.machine_busy_s - server_cpu_s - self.client_cpu_s)
        return (
            f"CPU during the run ({os.cpu_count()} cores in all): server {server_cpu_s / self.wall_s:.2f} cores "
            f"({1e3 * server_cpu_s / done:.2f} ms/request), load generator (this process, same machine) "
            f"{self.client_cpu_s / self.wall_s:.2f} cores ({1e3 * self.client_cpu_s / done:.2f} ms/request), "
            f"other processes {others / self.wall_s:.2f} cores"
        )


def machine_busy_seconds() -> float:
    """CPU seconds all processes have used since boot (every state of /proc/stat but idle and iowait)."""
    with open("/proc/stat") as stat:
        ticks = [int(value) for value in stat.readline().split()[1:9]]
    return (sum(ticks) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK")


class RawConnection:
    """A minimal HTTP/1.1 keep-alive client connection (asyncio streams): far less CPU than httpx."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None
        self.server_ms: float | None = None  # the last response's `Server-Timing: app;dur=`, when it had one

    async def request(self, method: str, path: str, body: bytes) -> tuple[int, bytes]:
        if self.writer is None or self.reader is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        head = (
            f"{method} {path} HTTP/1.1\r\nhost: {self.host}:{self.port}\r\n"
            f"content-type: application/json\r\ncontent-length: {len(body)}\r\n\r\n"
        )
        self.writer.write(head.encode() + body)
        status = int((await self.reader.readline()).split(b" ", 2)[1])
        length, chunked, close = 0, False, False
        self.server_ms = None
        while (line := await self.reader.readline()) not in (b"\r\n", b""):
            name, _, value = line.partition(b":")
            name = name.strip().lower()
            if name == b"content-length":
                length = int(value)
            elif name == b"transfer-encoding":
                chunked = b"chunked" in value.lower()
            elif name == b"connection":
                close = b"close" in value.lower()
            elif name == b"server-timing" and b"dur=" in value:
                self.server_ms = float(value.split(b"dur=", 1)[1].split(b";")[0].split(b",")[0])
        if chunked:
            parts = []
            while size := int((await self.reader.readline()).split(b";")[0], 16):
                parts.append(await self.reader.readexactly(size))
                await self.reader.readline()
            await self.reader.readline()
            content = b"".join(parts)
        else:
            content = await self.reader.readexactly(length)
        if close:
            await self.close()
        return status, content

    async def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            self.reader = self.writer = None


async def run_load(
    base_url: str,
    request: Callable[[int], RequestSpec],
    count: int,
    concurrency: int,
    time_limit_s: float,
    check: Check | None = None,
    client: str = "raw",
) -> LoadResult:
    """Send `count` requests (`request(i)` for i in 0..count-1), `concurrency` in flight, until done or time is up.

    Every worker keeps one HTTP/1.1 keep-alive connection. Latency is the time
    to the complete response body; `check` (outside the timing) returns an
    error message for a response it does not accept.
    """
    result = LoadResult()
    indexes = iter(range(count))
    host, port = base_url.removeprefix("http://").split(":")
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(base_url=base_url, limits=limits, timeout=60.0) as http:

        async def send(connection: RawConnection, method: str, path: str, kwargs: dict[str, Any]) -> tuple[int, bytes]:
            if client == "httpx":
                response = await http.request(method, path, **kwargs)
                return response.status_code, response.content
            if kwargs.get("params"):
                path = f"{path}?{urlencode(kwargs['params'])}"
            body = json.dumps(kwargs["json"]).encode() if "json" in kwargs else b""
            return await asyncio.wait_for(connection.request(method, path, body), 60.0)

        async def worker() -> None:
            connection = RawConnection(host, int(port))
            try:
                for index in indexes:
                    if time.perf_counter() > deadline:
                        result.timed_out = True
                        return
                    method, path, kwargs = request(index)
                    result.sent += 1
                    sent_at = time.perf_counter()
                    try:
                        status, content = await send(connection, method, path, kwargs)
                    except (httpx.HTTPError, OSError, ValueError, asyncio.IncompleteReadError, TimeoutError) as exc:
                        result.errors.append(f"{type(exc).__name__}: {exc}")
                        await connection.close()
                        continue
                    elapsed = time.perf_counter() - sent_at
                    problem = check(index, status, content) if check is not None else None
                    if problem is None and status >= 400:
                        problem = f"HTTP {status}: {content[:200]!r}"
                    if problem is None:
                        result.latencies.append(elapsed)
                        result.indexes.append(index)
                    else:
                        result.errors.append(problem)
            finally:
                await connection.close()

        started = time.perf_counter()
        cpu_started = time.process_time()
        busy_started = machine_busy_seconds()
        deadline = started + time_limit_s
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        result.wall_s = time.perf_counter() - started
        result.client_cpu_s = time.process_time() - cpu_started
        result.machine_busy_s = machine_busy_seconds() - busy_started
    return result


# ----------------------------------------------------------------- the benchmark


def single_want(prefix: str) -> Callable[[int], RequestSpec]:
    def request(index: int) -> RequestSpec:
        return "POST", "/api/v1/wants", {"json": {"refs": [f"{prefix}/part={index}"]}}

    return request


def batch_body(batch: int, size: int) -> bytes:
    return json.dumps({"wants": [{"refs": [f"bench/batch{batch}/part={n}"]} for n in range(size)]}).encode()


def time_batch(server: ApiServer, batch: int, size: int) -> tuple[float, dict[str, float]]:
    """Seconds for one batch request (client round trip) and the server's append/fold seconds in it."""
    body = batch_body(batch, size)
    before = server.metric_sums()
    with httpx.Client(base_url=server.base_url, timeout=120) as client:
        started = time.perf_counter()
        response = client.post("/api/v1/wants/batch", content=body, headers={"content-type": "application/json"})
        elapsed = time.perf_counter() - started
    if response.status_code != 201:
        raise RuntimeError(f"batch {batch}: HTTP {response.status_code}: {response.text[:300]}")
    created = response.json()["wants"]
    if len(created) != size:
        raise RuntimeError(f"batch {batch}: {len(created)} wants created, expected {size}")
    after = server.metric_sums()
    split = {
        "append": after["partbuild_append_seconds_sum"] - before["partbuild_append_seconds_sum"],
        "fold": after["partbuild_catch_up_seconds_sum"] - before["partbuild_catch_up_seconds_sum"],
    }
    return elapsed, split


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=5_000, help="single-ref wants to send")
    parser.add_argument("--concurrency", type=int, default=16, help="requests in flight")
    parser.add_argument("--batch", type=int, default=10_000, help="single-ref wants per batch request")
    parser.add_argument("--batches", type=int, default=3, help="batches to time (median reported)")
    parser.add_argument("--time-limit", type=float, default=120.0, help="seconds at most for the single wants")
    parser.add_argument(
        "--client",
        choices=("httpx", "raw"),
        default="raw",
        help="load generator: httpx.AsyncClient, or a minimal asyncio HTTP/1.1 client that needs far less CPU",
    )
    args = parser.parse_args()
    exit_on_sigterm()

    with tempfile.TemporaryDirectory() as tmp, ApiServer(f"sqlite:///{Path(tmp) / 'api.db'}") as server:
        print(f"machine: {machine()}; load average {os.getloadavg()[0]:.2f} at start")
        print(
            f"server: uvicorn, 1 worker, pid {server.pid}, fresh SQLite log; "
            f"healthy {server.startup_s:.1f} s after spawn"
        )

        def load(prefix: str, count: int) -> LoadResult:
            request = single_want(prefix)
            return asyncio.run(
                run_load(server.base_url, request, count, args.concurrency, args.time_limit, client=args.client)
            )

        warm = load("bench/warm", WARM_UP)
        if warm.errors:
            raise RuntimeError(f"warm-up failed: {warm.errors[:3]}")
        before = server.metric_sums()
        server_cpu = server.cpu_seconds()
        single = load("bench/single", args.requests)
        server_cpu = server.cpu_seconds() - server_cpu
        after = server.metric_sums()

        def delta(name: str) -> float:
            return after[name] - before[name]

        appends, append_s = delta("partbuild_append_seconds_count"), delta("partbuild_append_seconds_sum")
        folds, fold_s = delta("partbuild_catch_up_seconds_count"), delta("partbuild_catch_up_seconds_sum")
        done = len(single.latencies)
        print(
            f"single-ref POST /api/v1/wants: {done:,} of {args.requests:,} requests (after {WARM_UP} warm-up), "
            f"concurrency {args.concurrency}, {args.client} client, HTTP/1.1 keep-alive, {single.wall_s:.2f} s"
            f"{' (time limit reached)' if single.timed_out else ''}"
        )
        print(f"  {single.summary()}")
        for error in single.errors[:3]:
            print(f"  error: {error}")
        print(f"  {single.cpu_line(server_cpu)}")
        print(
            f"  in the server: EventLog.append {1e3 * append_s / max(appends, 1):.2f} ms avg over {appends:,.0f} "
            f"appends (incl. waiting for the SQLite write lock), fold {1e3 * fold_s / max(folds, 1):.2f} ms avg "
            f"over {folds:,.0f} catch-ups"
        )

        timings = []
        for batch in range(args.batches):
            elapsed, split = time_batch(server, batch, args.batch)
            timings.append(elapsed)
            rest = elapsed - split["append"] - split["fold"]
            print(
                f"batch {batch + 1}: {args.batch:,} single-ref wants in one POST /api/v1/wants/batch: "
                f"{elapsed:.3f} s (in the server: append {split['append']:.3f} s, fold {split['fold']:.3f} s; "
                f"the rest, {rest:.3f} s: HTTP, validation, building events, response)"
            )
        rss, peak = server.rss_bytes()
        print(
            f"server RSS {rss / 2**20:,.0f} MiB (peak {peak / 2**20:,.0f} MiB); load average {os.getloadavg()[0]:.2f}"
        )

    p99 = single.percentile(0.99)
    ok = not single.errors and done == args.requests and single.rate >= TARGET_RATE and p99 <= TARGET_P99_S
    print(
        f"api single want: {done:,} requests at concurrency {args.concurrency} ({args.client} client), "
        f"{single.rate:,.0f} req/s, p99 {1e3 * p99:.1f} ms, {len(single.errors)} errors "
        f"(target >= {TARGET_RATE:.0f} req/s and p99 <= {1e3 * TARGET_P99_S:.0f} ms, one worker, SQLite): "
        f"{'PASS' if ok else 'MISS'}"
    )
    median = statistics.median(timings)
    print(
        f"api batch want: {args.batch:,} single-ref wants in {median:.3f} s (median of {len(timings)}) "
        f"(target <= {TARGET_BATCH_S:.0f} s): {'PASS' if median <= TARGET_BATCH_S else 'MISS'}"
    )


if __name__ == "__main__":
    main()
