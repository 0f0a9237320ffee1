"""Shared bits of the benchmarks: machine description and the simulated W1-shaped history."""

from __future__ import annotations

import contextlib
import itertools
import math
import os
import platform
import signal
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

from partbuild.examples.clicks.simulate import SimulationPlan, simulate
from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.log.store import EventLog

WEEKS_PER_SITE = 52
FULL_SIZE = 1_000_000  # partition instances of the benchmarks' big W1 state
INSTANCES_PER_WEEK = 15  # 7 raw, 7 daily, 1 weekly
BATCH = 5_000


def machine() -> str:
    """One line naming the machine, for RESULTS.md."""
    cpu = "unknown cpu"
    try:
        with open("/proc/cpuinfo") as info:
            cpu = next(line.split(":", 1)[1].strip() for line in info if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return (
        f"{cpu}, {os.cpu_count()} cores, {ram_gib():.0f} GiB RAM, "
        f"Python {platform.python_version()} ({sys.implementation.name})"
    )


def ram_gib() -> float:
    """Total memory of the machine, from /proc/meminfo (0 when unknown)."""
    try:
        with open("/proc/meminfo") as info:
            kib = next(int(line.split()[1]) for line in info if line.startswith("MemTotal:"))
    except (OSError, StopIteration):
        return 0.0
    return kib / 2**20


def w1_history(events: int, heartbeats_per_run: int = 1) -> Iterator[pb.Event]:
    """The first `events` events of a simulated W1 history big enough to hold them."""
    # simulate() is lazy: ask for more sites than can be needed and stop at `events`.
    plan = SimulationPlan(weeks=WEEKS_PER_SITE, sites=events, heartbeats_per_run=heartbeats_per_run)
    return itertools.islice(simulate(plan), events)


def rss_bytes() -> tuple[int, int]:
    """(current, peak) resident set size of this process, from /proc."""
    fields = {}
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(("VmRSS:", "VmHWM:")):
                name, value = line.split(":")
                fields[name] = int(value.split()[0]) * 1024
    return fields["VmRSS"], fields["VmHWM"]


def process_cpu_seconds(pid: int) -> float:
    """User + system CPU seconds a process has used so far, from /proc/<pid>/stat."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def proc_stats() -> Iterator[tuple[int, str, list[str]]]:
    """(pid, command name, the /proc/<pid>/stat fields after the name) of every process we can read.

    The fields start at `state`: [0] state, [1] ppid, [2] pgrp, ... [11] utime, [12] stime.
    """
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                text = stat.read()
        except OSError:  # gone meanwhile, or not ours to read
            continue
        yield int(entry), text[text.index("(") + 1 : text.rindex(")")], text.rsplit(")", 1)[1].split()


def exit_on_sigterm() -> None:
    """Turn SIGTERM into SystemExit, so `with` blocks stop child processes and remove temporary files."""

    def handler(signum: int, _frame: object) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, handler)


def build(log: EventLog, instances: int) -> None:
    """Append a simulated W1 history with at least `instances` partition instances, printing progress."""
    sites = math.ceil(instances / (WEEKS_PER_SITE * INSTANCES_PER_WEEK)) + 1
    plan = f"{WEEKS_PER_SITE} weeks x {sites:,} sites"
    print(f"building: W1 history, {plan}, appended in batches of {BATCH:,}", flush=True)
    started = time.perf_counter()
    batch: list[pb.Event] = []
    next_report = 100_000
    for event in simulate(SimulationPlan(weeks=WEEKS_PER_SITE, sites=sites)):
        batch.append(event)
        if len(batch) == BATCH:
            log.append(batch, expected_head=log.head())
            batch = []
            head = log.head()
            if head >= next_report:
                elapsed = time.perf_counter() - started
                print(f"  {head:>10,} events in {elapsed:5.0f} s ({head / elapsed:,.0f} events/s)", flush=True)
                next_report += 100_000
    if batch:
        log.append(batch, expected_head=log.head())
    print(f"built: {log.head():,} events in {time.perf_counter() - started:.0f} s", flush=True)


@contextlib.contextmanager
def w1_log(db: str | None, tmp: str, name: str, instances: int) -> Iterator[tuple[str, EventLog]]:
    """The W1 log at `db` (a file or a URL), built with `instances` when empty; without `db`, `tmp`/`name`."""
    url = db or str(Path(tmp) / name)
    url = url if "://" in url else f"sqlite:///{url}"
    with EventLog.open(url) as log:
        if log.head() == 0:
            build(log, instances)
        else:
            print(f"reusing {url}: {log.head():,} events", flush=True)
        yield url, log


def project_store(url: str, *, snapshot: bool = False) -> None:
    """Fold the log at `url` and project its state store, unless the store is whole at the log's head already
    (`snapshot`: save a snapshot of the folded state too, so a `serve` started on it loads that)."""
    from partbuild.state.database import Database
    from partbuild.state.log.live import LiveState
    from partbuild.state.store.projector import Projector

    with Database.open(url, auto_upgrade=True) as db:
        head = db.log.head()
        if db.changes.watermark() == head and db.changes.records.watermark() == head:
            return
        started = time.perf_counter()
        live = LiveState(db.log, snapshot_every=1) if snapshot else LiveState(db.log, use_snapshots=False)
        Projector(live, db.changes).project()
        print(f"folded and projected {head:,} events in {time.perf_counter() - started:.0f} s", flush=True)


def percentile(values: list[float], p: float) -> float:
    """The `p`-quantile (0..1) of `values`, nearest rank; NaN when empty."""
    ordered = sorted(values)
    return ordered[max(0, min(len(ordered) - 1, math.ceil(p * len(ordered)) - 1))] if ordered else math.nan


AsgiApp = Callable[[dict[str, Any], Callable[[], Awaitable[Any]], Callable[[Any], Awaitable[None]]], Awaitable[None]]


def server_timing(app: AsgiApp) -> AsgiApp:
    """`app` with a `Server-Timing: app;dur=<ms>` header on every HTTP response.

    The time runs from the request reaching the application to the response's headers: routing,
    middleware, a wait for a worker thread, the handler and rendering (pages render their whole
    body before the headers go out). Not in it: uvicorn's parsing and the socket, a few tenths of
    a millisecond on loopback. Wrapped around the app by the benchmark only, so the service is
    measured as it ships.
    """

    async def timed(scope: dict[str, Any], receive: Callable[[], Awaitable[Any]], send: Any) -> None:
        if scope["type"] != "http":
            await app(scope, receive, send)
            return
        started = time.perf_counter()

        async def send_timed(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                value = f"app;dur={1e3 * (time.perf_counter() - started):.2f}".encode()
                message = {**message, "headers": [*message.get("headers", ()), (b"server-timing", value)]}
            await send(message)

        await app(scope, receive, send_timed)

    return timed
