"""The webhook sender against a real receiver: signatures, the answer classification, timeouts,
redirects, connection reuse, and what an error may say."""

from __future__ import annotations

import asyncio
import email.utils
import time
from collections.abc import Iterator

import pytest

from partbuild.orchestrator.delivery.sender import (
    MAX_ANSWER_BYTES,
    MAX_RETRY_AFTER_MS,
    Outcome,
    Sender,
    parse_retry_after,
)

from receiverkit import Answer, Receiver, always, schedule, timeout
from s3kit import free_port

SECRET = "whsec_" + "c2VjcmV0LXNlY3JldC1zZWNyZXQtc2VjcmV0"  # base64 of a 27-byte key


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with Receiver(SECRET) as running:
        yield running


def send_all(
    url: str, count: int = 1, *, timeout_s: float = 5.0, group: str = "agg/x/date=2026-01-01"
) -> list[Outcome]:
    """`count` sequential deliveries through one Sender (one pool), as a shard step makes them."""

    async def go() -> list[Outcome]:
        sender = Sender()
        try:
            return [
                await sender.send(
                    url,
                    body=b'{"seq": %d}' % n,
                    content_type="application/json",
                    message_id=f"msg_{n}",
                    ordering_key=group,
                    secret=SECRET,
                    timeout_s=timeout_s,
                )
                for n in range(count)
            ]
        finally:
            await sender.close()

    return asyncio.run(go())


def test_a_2xx_is_delivered_signed_with_its_group(receiver: Receiver) -> None:
    [outcome] = send_all(receiver.url, group="raw/clicks/date=2026-01-01 é")
    assert outcome == Outcome(True, False, 200)
    [got] = receiver.received
    assert got.signature_ok
    assert got.message_id == "msg_0" and got.seq == 0
    assert got.headers["content-type"] == "application/json"
    assert got.headers["user-agent"].startswith("partbuild-webhooks/")
    assert got.group == "raw/clicks/date=2026-01-01%20%C3%A9"  # percent-encoded: a header stays ASCII


@pytest.mark.parametrize(
    ("answer", "ok", "retryable"),
    [
        (Answer(204), True, False),
        (Answer(500), False, True),
        (Answer(503), False, True),
        (Answer(408), False, True),
        (Answer(429), False, True),
        (Answer(400), False, False),
        (Answer(404), False, False),
        (Answer(410), False, False),
    ],
)
def test_each_answer_is_classified(receiver: Receiver, answer: Answer, ok: bool, retryable: bool) -> None:
    receiver.set_rule(lambda group, before: answer)
    [outcome] = send_all(receiver.url)
    assert (outcome.ok, outcome.retryable, outcome.status) == (ok, retryable, answer.status)
    if not ok:
        assert outcome.error.startswith(f"HTTP {answer.status} ")


def test_retry_after_is_honoured_in_seconds_and_as_a_date(receiver: Receiver) -> None:
    in_a_minute = email.utils.formatdate(time.time() + 60, usegmt=True)
    receiver.set_rule(
        schedule(Answer(429, retry_after="7"), Answer(503, retry_after=in_a_minute), Answer(400, retry_after="9"))
    )
    # The same message three times: the schedule answers its first, second and third arrival.
    seconds, date, permanent = (send_all(receiver.url)[0] for _ in range(3))
    assert seconds.retry_after_ms == 7000
    assert 55_000 <= date.retry_after_ms <= 60_000
    assert permanent.retry_after_ms == 0  # a permanent failure is not retried, whatever it asks


def test_a_redirect_is_not_followed_and_is_permanent(receiver: Receiver) -> None:
    with Receiver(SECRET) as elsewhere:
        receiver.set_rule(lambda group, before: Answer(307, location=elsewhere.url))
        [outcome] = send_all(receiver.url)
        assert (outcome.ok, outcome.retryable, outcome.status) == (False, False, 307)
        assert elsewhere.received == []


def test_a_slow_receiver_is_a_retryable_timeout(receiver: Receiver) -> None:
    receiver.set_rule(timeout(2.0))
    started = time.monotonic()
    [outcome] = send_all(receiver.url, timeout_s=0.3)
    assert time.monotonic() - started < 1.5
    assert outcome == Outcome(False, True, 0, error="no answer within 0.3 s")


def test_nobody_listening_is_a_retryable_transport_error() -> None:
    [outcome] = send_all(f"http://127.0.0.1:{free_port()}/hook")
    assert (outcome.ok, outcome.retryable, outcome.status) == (False, True, 0)
    assert outcome.error.startswith("transport error: ")


def test_an_invalid_endpoint_is_permanent() -> None:
    [outcome] = send_all("http://[::1/hook")
    assert (outcome.ok, outcome.retryable) == (False, False)


def test_connections_are_reused_and_a_long_answer_drops_only_its_own(receiver: Receiver) -> None:
    long_body = MAX_ANSWER_BYTES * 4
    receiver.set_rule(schedule(Answer(200, body_size=100)))
    send_all(receiver.url, 5)
    assert len({got.client_port for got in receiver.received}) == 1  # one keep-alive connection

    receiver.set_rule(lambda group, before: Answer(500, body_size=long_body) if group == "long" else Answer())
    outcomes = asyncio.run(_long_then_short(receiver.url))
    assert [o.status for o in outcomes] == [500, 200, 200]
    ports = [got.client_port for got in receiver.received[5:]]
    assert ports[1] != ports[0] and ports[2] == ports[1]  # the long answer's connection was closed, no other


async def _long_then_short(url: str) -> list[Outcome]:
    sender = Sender()
    try:
        kwargs = {"content_type": "application/json", "secret": SECRET, "timeout_s": 5.0, "body": b"{}"}
        return [
            await sender.send(url, message_id=f"m{n}", ordering_key=group, **kwargs)  # type: ignore[arg-type]
            for n, group in enumerate(["long", "short", "short"])
        ]
    finally:
        await sender.close()


def test_errors_never_carry_the_receivers_words(receiver: Receiver) -> None:
    receiver.set_rule(always(500))
    [outcome] = send_all(receiver.url)
    assert outcome.error == "HTTP 500 Internal Server Error"


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, 0),
        ("", 0),
        ("0", 0),
        ("12", 12_000),
        (" 3 ", 3000),
        ("-5", 0),
        ("soon", 0),
        ("99999999", MAX_RETRY_AFTER_MS),
    ],
)
def test_parse_retry_after(value: str | None, expected: int) -> None:
    assert parse_retry_after(value) == expected


def test_parse_retry_after_of_a_past_date_is_now() -> None:
    assert parse_retry_after(email.utils.formatdate(time.time() - 600, usegmt=True)) == 0
