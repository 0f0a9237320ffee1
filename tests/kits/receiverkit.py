"""Webhook receiver test kit: a real HTTP endpoint (uvicorn + Starlette) in a background thread.

The delivery tests point a subscription at `Receiver.url` and let partbuild send
real HTTP requests to it. Every request is recorded (`Received`), its
Standard Webhooks signature is checked against the secret, and a `Rule` decides
the answer: a status, a Retry-After header, or a delay longer than the sender's
timeout. Ordering is checked per `partbuild-group` on the 2xx-delivered messages.

    with Receiver(secret, rule=fail_first(2)) as receiver:
        ...  # subscribe receiver.url, let partbuild deliver
        receiver.wait_for(lambda got: len(got) >= 3, timeout_s=10)
        assert receiver.order_violations() == []
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from types import TracebackType

import uvicorn
from standardwebhooks import Webhook, WebhookVerificationError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

HOST = "127.0.0.1"
PATH = "/hook"
START_TIMEOUT = 10.0  # seconds until uvicorn reports `started`
POLL_S = 0.01  # how often a delayed answer looks for a gone client or a stopping server


@dataclass(frozen=True)
class Received:
    """One request as the receiver saw it, and what it answered."""

    message_id: str  # webhook-id
    group: str  # partbuild-group header
    seq: int | None  # body["seq"] when the body is JSON with an int seq
    body: bytes
    headers: dict[str, str]  # lower-case names
    at: float  # time.monotonic() when it arrived
    answered: int  # the status answered; 0 while pending, or when the client left first (a timeout)
    signature_ok: bool  # the Standard Webhooks signature verified; False when no secret is set
    client_port: int = 0  # the sender's TCP port: the same port again is a reused connection


@dataclass(frozen=True)
class Answer:
    """The receiver's answer to one delivery."""

    status: int = 200
    retry_after: str | None = None  # Retry-After header value
    delay_s: float = 0.0  # sleep before answering (longer than the sender's timeout is a timeout)
    body_size: int = 0  # answer this many bytes of body (never with a 204 or 304)
    location: str | None = None  # Location header (for a redirect the sender must not follow)


# Given the group and how many times this message_id arrived before (0 on first), the answer.
Rule = Callable[[str, int], Answer]


def always(status: int) -> Rule:
    """Every delivery gets `status`."""
    return lambda group, before: Answer(status)


def fail_first(n: int, status: int = 500, retry_after: str | None = None) -> Rule:
    """Each message fails its first `n` arrivals, then succeeds."""
    return lambda group, before: Answer(status, retry_after) if before < n else Answer()


def by_group(mapping: dict[str, Rule], default: Rule) -> Rule:
    """The rule of the message's group, else `default`."""
    return lambda group, before: mapping.get(group, default)(group, before)


def failing_groups(groups: set[str], status: int = 500) -> Rule:
    """Messages of `groups` always fail; the others succeed."""
    frozen = frozenset(groups)  # the caller's set may change later; the rule must not
    return lambda group, before: Answer(status) if group in frozen else Answer()


def schedule(*answers: Answer) -> Rule:
    """The k-th arrival of each message gets answers[k]; the last one repeats."""
    if not answers:
        raise ValueError("schedule needs at least one answer")
    return lambda group, before: answers[min(before, len(answers) - 1)]


def timeout(delay_s: float) -> Rule:
    """Every delivery waits `delay_s` before a 200: a timeout for a sender with a shorter one."""
    return lambda group, before: Answer(delay_s=delay_s)


def _seq_of(body: bytes) -> int | None:
    try:
        parsed = json.loads(body)
    except ValueError:  # not JSON (UnicodeDecodeError is a ValueError too)
        return None
    seq = parsed.get("seq") if isinstance(parsed, dict) else None
    # bool is an int subclass; `true` is no sequence number
    return seq if isinstance(seq, int) and not isinstance(seq, bool) else None


class _ThreadServer(uvicorn.Server):
    """A uvicorn server that never touches signal handlers: those belong to the test process."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


class Receiver:
    """A webhook endpoint on a free local port; `start()`/`stop()` or `with Receiver(...) as r:`.

    A receiver keeps its port for life: after `stop()`, `start()` listens on the
    same URL again (an endpoint that was down comes back), and the record of
    received requests and per-message arrival counts carries on.
    """

    def __init__(self, secret: str | None = None, rule: Rule | None = None) -> None:
        self._webhook = Webhook(secret) if secret is not None else None
        self._rule = rule or always(200)
        self._lock = threading.Lock()  # guards the rule, the record and the arrival counts
        self._received: list[Received] = []
        self._arrivals: Counter[str] = Counter()
        self._stopping = threading.Event()
        self._server: _ThreadServer | None = None
        self._thread: threading.Thread | None = None
        self.port = 0
        self.url = ""

    # -- lifecycle

    def start(self) -> Receiver:
        """Listen (on a new free port the first time, on the same port after a stop) and wait until serving."""
        if self._server is not None:
            raise RuntimeError("receiver already started")
        sock = self._bind()
        app = Starlette(routes=[Route(PATH, self._handle, methods=["POST"])])
        # A short graceful shutdown: `stop()` must not hang on a client that keeps a request open.
        config = uvicorn.Config(app, log_level="warning", access_log=False, timeout_graceful_shutdown=2)
        server = _ThreadServer(config)
        self._stopping.clear()
        self._thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
        self._server = server
        self._thread.start()
        deadline = time.monotonic() + START_TIMEOUT
        while not server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"webhook receiver did not start on {self.url}")
            time.sleep(POLL_S)
        return self

    def _bind(self) -> socket.socket:
        # Binding here (not in uvicorn) gives the port before the thread starts, and lets a restart reuse it.
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((HOST, self.port))
        self.port = int(sock.getsockname()[1])
        self.url = f"http://{HOST}:{self.port}{PATH}"
        return sock

    def stop(self) -> None:
        """Stop serving and wait for the server thread; a no-op when not started."""
        server, thread = self._server, self._thread
        if server is None or thread is None:
            return
        self._stopping.set()  # delayed answers give up at once instead of holding the shutdown
        server.should_exit = True
        thread.join(timeout=10)
        self._server = self._thread = None

    def __enter__(self) -> Receiver:
        return self.start()

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()

    def set_rule(self, rule: Rule | None) -> None:
        """Answer the next requests with `rule` (None: always 200)."""
        with self._lock:
            self._rule = rule or always(200)

    # -- the endpoint

    async def _handle(self, request: Request) -> Response:
        body = await request.body()
        headers = dict(request.headers)
        with self._lock:
            message_id = headers.get("webhook-id", "")
            answer = self._rule(headers.get("partbuild-group", ""), self._arrivals[message_id])
            self._arrivals[message_id] += 1
            index = len(self._received)
            # Recorded on arrival (answered 0, pending) so the record keeps arrival order.
            received = self._record(message_id, body, headers)
            port = request.client.port if request.client is not None else 0
            self._received.append(dataclasses.replace(received, client_port=port))
        answered = answer.status if await self._wait(request, answer.delay_s) else 0
        with self._lock:
            self._received[index] = dataclasses.replace(self._received[index], answered=answered)
        extra = {"Retry-After": answer.retry_after} if answer.retry_after is not None else {}
        if answer.location is not None:
            extra["Location"] = answer.location
        # No body unless asked: the sender only looks at the status and must cope with any body.
        return Response(b"x" * answer.body_size, status_code=answer.status, headers=extra)

    def _record(self, message_id: str, body: bytes, headers: dict[str, str]) -> Received:
        return Received(
            message_id=message_id,
            group=headers.get("partbuild-group", ""),
            seq=_seq_of(body),
            body=body,
            headers=headers,
            at=time.monotonic(),
            answered=0,
            signature_ok=self._verify(body, headers),
        )

    def _verify(self, body: bytes, headers: dict[str, str]) -> bool:
        if self._webhook is None:
            return False
        try:
            self._webhook.verify(body, headers)
        except (WebhookVerificationError, ValueError):  # ValueError: a malformed header or a non-UTF-8 body
            return False
        return True

    async def _wait(self, request: Request, delay_s: float) -> bool:
        """Sleep `delay_s`; False when the client went away (its timeout) or the server is stopping."""
        deadline = time.monotonic() + delay_s
        while (left := deadline - time.monotonic()) > 0:
            await asyncio.sleep(min(POLL_S, left))
            if self._stopping.is_set() or await request.is_disconnected():
                return False
        return True

    # -- what arrived

    @property
    def received(self) -> list[Received]:
        """Every request so far, failed ones included, in arrival order (a copy)."""
        with self._lock:
            return list(self._received)

    def delivered(self) -> list[Received]:
        """The requests answered 2xx, in arrival order."""
        return [r for r in self.received if 200 <= r.answered < 300]

    def wait_for(self, predicate: Callable[[list[Received]], bool], timeout_s: float) -> list[Received]:
        """Poll until `predicate(delivered())` holds and return that list; AssertionError with counts if never."""
        deadline = time.monotonic() + timeout_s
        while True:
            delivered = self.delivered()
            if predicate(delivered):
                return delivered
            if time.monotonic() >= deadline:
                raise AssertionError(f"webhook receiver: condition not met within {timeout_s}s; {self.summary()}")
            time.sleep(POLL_S)

    def summary(self) -> str:
        """Counts for a failure message: requests, answers by status, distinct messages, per group."""
        received = self.received
        statuses = Counter(r.answered for r in received)
        groups = Counter(r.group for r in received if 200 <= r.answered < 300)
        delivered_ids = {r.message_id for r in received if 200 <= r.answered < 300}
        return (
            f"{len(received)} requests, {len({r.message_id for r in received})} distinct messages, "
            f"{len(delivered_ids)} delivered; answers {dict(sorted(statuses.items()))}; "
            f"2xx by group {dict(sorted(groups.items()))}"
        )

    def order_violations(self) -> list[str]:
        """Per group, first successful deliveries whose seq goes backwards; later duplicates are ignored."""
        seen: set[str] = set()
        last: dict[str, Received] = {}  # per group: the first-delivered message with the highest seq so far
        violations = []
        for r in self.delivered():
            if r.message_id in seen or r.seq is None:
                continue
            seen.add(r.message_id)
            before = last.get(r.group)
            if before is not None and before.seq is not None and r.seq < before.seq:
                violations.append(
                    f"group {r.group!r}: message {r.message_id!r} seq {r.seq} "
                    f"delivered after message {before.message_id!r} seq {before.seq}"
                )
                continue
            last[r.group] = r
        return violations
