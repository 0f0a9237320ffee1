"""Delivery to webhooks: throughput, append-to-delivery latency, and healthy throughput beside failing ordering keys.

Targets, one process delivering (`Deliverer`, every shard of a 1-shard subscription, as
`partbuild deliver` and `up` run it) to a local receiver that answers at once:

1. throughput: >= 2,000 events/s. N `want_create` events (each naming one ref, spread
   round-robin over `--refs` refs, so one ordering key per ref) are appended after the
   subscription and folded before the `Deliverer` starts, so what is timed is delivery
   only: from `Deliverer.start()` until the receiver has answered 200 to all N.
2. latency: p99 <= 250 ms from append to arrival at 200 events/s. The bench appends one
   want every 5 ms through the API's `Service.create_want` sharing its `LiveState` with the
   `Deliverer` (as `up` does); latency = the receiver's arrival time - the event's
   `timestamp_ms` (same machine, same clock).
3. failing ordering keys: while 10% of the refs fail every delivery (the receiver answers
   500 for them; default retry policy: RQ with backoff, then the DLQ), the healthy keys'
   events/s is >= 0.8x the all-healthy figure of (1), measured in the same run.

The receiver is a separate process (a raw asyncio HTTP/1.1 server, keep-alive, no framework)
so it does not take the deliverer's GIL; it records each message's first 2xx arrival and
answers `GET /stats` and `GET /arrivals`. Payload format `partbuild`, signed as always.

    .venv/bin/python bench/delivery.py [--backend both|sqlite|postgres] [--events 20000] [--refs 2000]
        [--rate 200] [--latency-s 15] [--fail-share 0.1] [--rounds 1] [--profile FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import json
import logging
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from _common import exit_on_sigterm, machine
from _groupkit import fresh_log

from partbuild.api.models.subscriptions import SubscriptionFilterRequest, SubscriptionRequest
from partbuild.api.models.wants import WantRequest
from partbuild.api.service import Service
from partbuild.api.service.subscriptions import new_secret
from partbuild.api.webhook_payloads import render as render_payload
from partbuild.orchestrator.delivery import deliverer as deliverer_module
from partbuild.orchestrator.delivery.deliverer import Deliverer, ShardRunner
from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.database import Database
from partbuild.state.log.events import envelope, manual
from partbuild.state.log.live import LiveState
from partbuild.state.log.store import EventLog

TARGET_EVENTS_S = 2_000.0
TARGET_P99_MS = 250.0
TARGET_RATIO = 0.8
FAIL_MARK = "/fail/"  # refs (ordering keys) containing this get a 500 from the receiver
APPEND_BATCH = 1_000
WAIT_LIMIT_S = 600.0

# ----------------------------------------------------------------- the receiver (its own process)


class _Receiver(asyncio.Protocol):
    """One keep-alive connection: POST /hook records and answers; GET /stats and /arrivals report."""

    arrivals: ClassVar[dict[int, float]] = {}  # seq -> first 2xx arrival, time.time() in ms (all connections)
    counts: ClassVar[dict[str, int]] = {"requests": 0, "ok": 0, "failed": 0}

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport
        self.buffer = b""

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while True:
            end = self.buffer.find(b"\r\n\r\n")
            if end < 0:
                return
            head = self.buffer[:end].decode("latin-1").split("\r\n")
            headers = {}
            for line in head[1:]:
                name, _, value = line.partition(":")
                headers[name.strip().lower()] = value.strip()
            length = int(headers.get("content-length", "0"))
            if len(self.buffer) < end + 4 + length:
                return
            self.buffer = self.buffer[end + 4 + length :]
            self._answer(head[0], headers)

    def _answer(self, request_line: str, headers: dict[str, str]) -> None:
        method, path = request_line.split(" ")[:2]
        body = b""
        if method == "POST":
            now_ms = time.time() * 1000
            self.counts["requests"] += 1
            if FAIL_MARK in headers.get("partbuild-group", ""):
                self.counts["failed"] += 1
                status = b"500 Internal Server Error"
            else:
                status = b"200 OK"
                seq = int(headers.get("webhook-id", "pb_0_0_").split("_")[2])
                if seq not in self.arrivals:
                    self.arrivals[seq] = now_ms
                    self.counts["ok"] += 1
        else:
            status = b"200 OK"
            if path == "/arrivals":
                body = json.dumps(self.arrivals).encode()
            elif path == "/reset":
                self.arrivals.clear()
                for key in self.counts:
                    self.counts[key] = 0
            else:
                body = json.dumps(self.counts).encode()
        self.transport.write(b"HTTP/1.1 " + status + b"\r\ncontent-length: %d\r\n\r\n" % len(body) + body)  # type: ignore[attr-defined]


def serve_receiver(port_file: str) -> None:
    async def main() -> None:
        server = await asyncio.get_running_loop().create_server(_Receiver, "127.0.0.1", 0, backlog=512)
        port = server.sockets[0].getsockname()[1]
        Path(port_file).write_text(str(port))
        await server.serve_forever()

    asyncio.run(main())


@contextlib.contextmanager
def receiver_process(tmp: Path) -> Iterator[str]:
    """The receiver in a child process; yields its base URL."""
    port_file = tmp / "receiver.port"
    process = subprocess.Popen([sys.executable, __file__, "--serve-receiver", str(port_file)], start_new_session=True)
    try:
        deadline = time.monotonic() + 30
        while not port_file.exists() or not port_file.read_text():
            if process.poll() is not None or time.monotonic() > deadline:
                raise SystemExit("the receiver did not start")
            time.sleep(0.05)
        yield f"http://127.0.0.1:{port_file.read_text()}"
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(10)


def get(url: str) -> object:
    with urllib.request.urlopen(url, timeout=30) as answer:
        return json.loads(answer.read() or b"null")


# ----------------------------------------------------------------- one measured run


@dataclass
class Setup:
    log: EventLog
    live: LiveState
    service: Service


@contextlib.contextmanager
def subscribed(url: str, receiver: str) -> Iterator[Setup]:
    """A log with one subscription (want_create events, partition_ref ordering) pointed at the receiver."""
    get(receiver + "/reset")
    with Database.open(url) as db:
        log = db.log
        live = LiveState(log)
        service = Service(db, live=live)
        request = SubscriptionRequest(
            name="bench",
            endpoint=receiver + "/hook",
            filter=SubscriptionFilterRequest(event_types=["want_create"]),
            secret=new_secret(),
        )
        service.create_subscription(request, "bench")
        try:
            yield Setup(log, live, service)
        finally:
            live.close()


def ref_of(n: int, refs: int, fail_share: float) -> str:
    index = n % refs
    failing = index < round(refs * fail_share)
    return f"bench/{'fail' if failing else 'ok'}/r={index}"


def wait_ok(receiver: str, expected: int, what: str) -> None:
    deadline = time.monotonic() + WAIT_LIMIT_S
    while (got := get(receiver + "/stats")["ok"]) < expected:  # type: ignore[index]
        if time.monotonic() > deadline:
            raise SystemExit(f"{what}: only {got} of {expected} delivered after {WAIT_LIMIT_S:g} s")
        time.sleep(0.02)


@dataclass
class Throughput:
    healthy: int
    seconds: float
    failed_requests: int

    @property
    def per_s(self) -> float:
        return self.healthy / self.seconds


def throughput(url: str, receiver: str, events: int, refs: int, fail_share: float, profile: str | None) -> Throughput:
    """Pre-append `events` wants, fold them, then time the Deliverer until every healthy one arrived."""
    with subscribed(url, receiver) as setup:
        batch = []
        for n in range(events):
            want = pb.WantCreate(want_id=f"w{n}", partition_refs=[ref_of(n, refs, fail_share)])
            batch.append(envelope(want, source=manual("bench")))
            if len(batch) == APPEND_BATCH:
                setup.log.append(batch)
                batch = []
        if batch:
            setup.log.append(batch)
        setup.live.catch_up()
        healthy = sum(FAIL_MARK not in ref_of(n, refs, fail_share) for n in range(events))
        started = time.perf_counter()
        deliverer = Deliverer(setup.live, render_payload)
        if profile:
            profiled(deliverer, profile)
        deliverer.start()
        try:
            wait_ok(receiver, healthy, "throughput")
            seconds = time.perf_counter() - started
        finally:
            deliverer.stop()
            deliverer_module.ShardRunner = ShardRunner  # unprofiled again
        failed = get(receiver + "/stats")["failed"]  # type: ignore[index]
    return Throughput(healthy, seconds, failed)


def profiled(deliverer: Deliverer, path: str) -> None:
    """cProfile every shard runner's thread the deliverer starts, each into `path`.<shard> when it ends."""
    runner_class = ShardRunner

    class Profiled(runner_class):  # type: ignore[misc, valid-type]
        def _main(self) -> None:
            profiler = cProfile.Profile()
            profiler.runcall(super()._main)
            profiler.dump_stats(f"{path}.{self.shard_id}")

    deliverer_module.ShardRunner = Profiled  # type: ignore[misc]


def latency(url: str, receiver: str, rate: float, seconds: float, refs: int) -> list[float]:
    """Append `rate` wants/s through the API's service for `seconds`; each one's arrival - its timestamp, ms."""
    with subscribed(url, receiver) as setup:
        deliverer = Deliverer(setup.live, render_payload).start()
        time.sleep(0.5)  # the runner is up and idle
        try:
            count = int(rate * seconds)
            first = setup.live.head_seq + 1
            start = time.perf_counter()
            for n in range(count):
                pause = start + n / rate - time.perf_counter()
                if pause > 0:
                    time.sleep(pause)
                request = WantRequest(refs=[ref_of(n, refs, 0.0)], comment="bench")
                setup.service.create_want(request, "bench")
            wait_ok(receiver, count, "latency")
        finally:
            deliverer.stop()
        arrivals = {int(seq): at for seq, at in get(receiver + "/arrivals").items()}  # type: ignore[attr-defined]
        stamps = {e.seq: e.to_event().timestamp_ms for e in setup.log.read(first - 1, count + 10)}
    return [arrivals[seq] - stamps[seq] for seq in sorted(arrivals) if seq in stamps]


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered)) - 1))]


def verdict(ok: bool) -> str:
    return "PASS" if ok else "MISS"


def run_backend(backend: str, args: argparse.Namespace, tmp: Path, receiver: str) -> None:
    print(f"\n== {backend}", flush=True)
    for label in ("h", "f", "l"):
        for round_ in range(1, args.rounds + 1):
            (tmp / f"{backend}-{label}{round_}").mkdir()
    for round_ in range(1, args.rounds + 1):
        with fresh_log(backend, tmp / f"{backend}-h{round_}") as url:
            profile = f"{args.profile}.healthy" if args.profile else None
            healthy = throughput(url, receiver, args.events, args.refs, 0.0, profile)
        ok = verdict(healthy.per_s >= TARGET_EVENTS_S)
        print(
            f"  round {round_}: all healthy: {healthy.healthy:,} events in {healthy.seconds:.2f} s = "
            f"{healthy.per_s:,.0f} events/s  (target >= {TARGET_EVENTS_S:,.0f}: {ok})",
            flush=True,
        )
        with fresh_log(backend, tmp / f"{backend}-f{round_}") as url:
            profile = f"{args.profile}.failing" if args.profile else None
            mixed = throughput(url, receiver, args.events, args.refs, args.fail_share, profile)
        ratio = mixed.per_s / healthy.per_s
        print(
            f"  round {round_}: {args.fail_share:.0%} of ordering keys failing: {mixed.healthy:,} healthy events in "
            f"{mixed.seconds:.2f} s = {mixed.per_s:,.0f} events/s ({mixed.failed_requests:,} 500s answered); "
            f"{ratio:.2f}x all-healthy  (target >= {TARGET_RATIO}x: {verdict(ratio >= TARGET_RATIO)})",
            flush=True,
        )
        with fresh_log(backend, tmp / f"{backend}-l{round_}") as url:
            lat = latency(url, receiver, args.rate, args.latency_s, args.refs)
        p99 = pct(lat, 0.99)
        print(
            f"  round {round_}: latency at {args.rate:g} events/s over {len(lat):,} events: "
            f"p50 {statistics.median(lat):.1f}  p90 {pct(lat, 0.9):.1f}  p99 {p99:.1f}  max {max(lat):.1f} ms"
            f"  (target p99 <= {TARGET_P99_MS:g}: {verdict(p99 <= TARGET_P99_MS)})",
            flush=True,
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", choices=["both", "sqlite", "postgres"], default="both")
    parser.add_argument("--events", type=int, default=20_000)
    parser.add_argument("--refs", type=int, default=2_000)
    parser.add_argument("--rate", type=float, default=200.0)
    parser.add_argument("--latency-s", type=float, default=15.0)
    parser.add_argument("--fail-share", type=float, default=0.1)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument(
        "--profile", default=None, help="cProfile the throughput runs into FILE.healthy.<shard>, FILE.failing.<shard>"
    )
    parser.add_argument("--serve-receiver", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_receiver:
        serve_receiver(args.serve_receiver)
        return
    exit_on_sigterm()  # a killed bench still stops its receiver process
    # The failing-keys run makes the shards warn on every step; that is the point, not news.
    logging.getLogger("partbuild.orchestrator.delivery").setLevel(logging.ERROR)
    print(f"machine: {machine()}")
    print(f"{args.events:,} want_create events over {args.refs:,} refs; receiver in a child process", flush=True)
    backends = ["sqlite", "postgres"] if args.backend == "both" else [args.backend]
    with tempfile.TemporaryDirectory(prefix="partbuild-bench-") as name:
        tmp = Path(name)
        with receiver_process(tmp) as receiver:
            for backend in backends:
                run_backend(backend, args, tmp, receiver)


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        socket.setdefaulttimeout(60)
        main()
