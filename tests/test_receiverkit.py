"""The webhook receiver kit, checked over real HTTP: signatures, answer rules, delays, ordering, lifecycle."""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Iterator
from datetime import UTC, datetime

import httpx
import pytest

pytest.importorskip("standardwebhooks", reason="needs pip install -e '.[dev]'")

from standardwebhooks import Webhook

from receiverkit import (
    Answer,
    Receiver,
    always,
    by_group,
    fail_first,
    failing_groups,
    schedule,
    timeout,
)

SECRET = "whsec_" + base64.b64encode(b"partbuild-receiver-kit-test-key!").decode()


@pytest.fixture
def client() -> Iterator[httpx.Client]:
    with httpx.Client(timeout=5) as c:
        yield c


def body_of(message_id: str, seq: int, group: str = "p1") -> bytes:
    """The default body format partbuild sends."""
    event = {"kind": "built", "ref": group}
    message = {"subscription": "s1", "message_id": message_id, "seq": seq, "event_type": "built"}
    return json.dumps({**message, "group": group, "event": event}).encode()


def signed_headers(message_id: str, body: bytes, group: str, secret: str = SECRET) -> dict[str, str]:
    """The Standard Webhooks headers (id, timestamp in seconds, v1 signature) and the ordering group."""
    now = datetime.now(tz=UTC)
    signature = Webhook(secret).sign(message_id, now, body.decode())
    return {
        "content-type": "application/json",
        "webhook-id": message_id,
        "webhook-timestamp": str(int(now.timestamp())),
        "webhook-signature": signature,
        "partbuild-group": group,
    }


def send(client: httpx.Client, receiver: Receiver, message_id: str, seq: int = 1, group: str = "p1") -> httpx.Response:
    body = body_of(message_id, seq, group)
    return client.post(receiver.url, content=body, headers=signed_headers(message_id, body, group))


def statuses(client: httpx.Client, receiver: Receiver, sends: list[tuple[str, str]]) -> list[int]:
    """Send (message_id, group) pairs in order; the status codes answered."""
    return [send(client, receiver, message_id, group=group).status_code for message_id, group in sends]


def test_a_signed_delivery_is_recorded_and_verified(client: httpx.Client) -> None:
    with Receiver(SECRET) as receiver:
        before = time.monotonic()
        assert send(client, receiver, "m1", seq=7, group="events/2024-01-01").status_code == 200
    [got] = receiver.received
    assert (got.message_id, got.group, got.seq, got.answered) == ("m1", "events/2024-01-01", 7, 200)
    assert got.signature_ok
    assert got.at >= before
    assert json.loads(got.body)["message_id"] == "m1"
    assert got.headers["webhook-id"] == "m1"
    assert receiver.delivered() == [got]


def test_a_tampered_body_or_another_secret_fails_verification(client: httpx.Client) -> None:
    other = "whsec_" + base64.b64encode(b"some-other-key-of-thirty-two-by!").decode()
    with Receiver(SECRET) as receiver:
        body = body_of("m1", 1)
        headers = signed_headers("m1", body, "p1")
        client.post(receiver.url, content=body.replace(b'"seq": 1', b'"seq": 2'), headers=headers)
        client.post(receiver.url, content=body, headers=signed_headers("m1", body, "p1", secret=other))
        client.post(receiver.url, content=body, headers={"webhook-id": "m1"})  # no signature at all
        client.post(receiver.url, content=body, headers=headers)
    assert [r.signature_ok for r in receiver.received] == [False, False, False, True]
    # The rule answers, not the signature check: the sender's behaviour is what the tests look at.
    assert [r.answered for r in receiver.received] == [200, 200, 200, 200]


def test_without_a_secret_nothing_is_verified(client: httpx.Client) -> None:
    with Receiver() as receiver:
        send(client, receiver, "m1")
    assert [r.signature_ok for r in receiver.received] == [False]


def test_fail_first_fails_each_message_its_first_n_arrivals(client: httpx.Client) -> None:
    with Receiver(SECRET, rule=fail_first(2, status=503, retry_after="1")) as receiver:
        first = send(client, receiver, "m1")
        assert first.headers["retry-after"] == "1"
        sends = [("m1", "p1"), ("m2", "p1"), ("m1", "p1"), ("m2", "p1"), ("m2", "p1")]
        assert [first.status_code, *statuses(client, receiver, sends)] == [503, 503, 503, 200, 503, 200]
    assert len(receiver.received) == 6
    assert [r.message_id for r in receiver.delivered()] == ["m1", "m2"]


def test_by_group_and_failing_groups_answer_per_group(client: httpx.Client) -> None:
    sends = [("m1", "a"), ("m2", "b"), ("m3", "c"), ("m1", "a")]
    rule = by_group({"a": always(500), "b": always(410)}, default=always(204))
    with Receiver(rule=rule) as receiver:
        assert statuses(client, receiver, sends) == [500, 410, 204, 500]
        receiver.set_rule(failing_groups({"b", "c"}, status=502))
        assert statuses(client, receiver, sends) == [200, 502, 502, 200]
        receiver.set_rule(None)
        assert statuses(client, receiver, sends) == [200, 200, 200, 200]
    assert [r.answered for r in receiver.delivered()] == [204, 200, 200, 200, 200, 200, 200]


def test_schedule_walks_each_message_through_its_answers(client: httpx.Client) -> None:
    rule = schedule(Answer(429, retry_after="2"), Answer(500), Answer(200))
    with Receiver(rule=rule) as receiver:
        answers = [send(client, receiver, message_id) for message_id in ["m1", "m1", "m2", "m1", "m1", "m2"]]
    assert [a.status_code for a in answers] == [429, 500, 429, 200, 200, 500]
    assert answers[0].headers["retry-after"] == "2"
    assert answers[2].headers["retry-after"] == "2"
    assert "retry-after" not in answers[1].headers
    assert [r.message_id for r in receiver.delivered()] == ["m1", "m1"]


def test_schedule_needs_an_answer() -> None:
    with pytest.raises(ValueError):
        schedule()


def test_a_delayed_answer_arrives_after_the_delay(client: httpx.Client) -> None:
    with Receiver(rule=schedule(Answer(201, delay_s=0.3))) as receiver:
        started = time.monotonic()
        assert send(client, receiver, "m1").status_code == 201
        assert time.monotonic() - started >= 0.3
    assert [r.answered for r in receiver.received] == [201]


def test_a_delay_longer_than_the_client_timeout_is_a_timeout(client: httpx.Client) -> None:
    with Receiver(rule=timeout(0.5)) as receiver:
        body = body_of("m1", 1)
        with pytest.raises(httpx.TimeoutException):
            client.post(receiver.url, content=body, headers=signed_headers("m1", body, "p1"), timeout=0.2)
        # Past the delay: the receiver noticed the client left and recorded no answer, so nothing is delivered.
        time.sleep(0.5)
        assert receiver.received[0].answered == 0
        receiver.set_rule(None)
        assert send(client, receiver, "m1").status_code == 200
    assert [r.answered for r in receiver.received] == [0, 200]
    assert len(receiver.delivered()) == 1


def test_order_violations_find_a_seq_going_backwards_and_ignore_duplicates(client: httpx.Client) -> None:
    with Receiver() as receiver:
        # m1 arrives again after m3: a duplicate of a delivered message is allowed.
        for message_id, seq, group in [("m1", 1, "p1"), ("m3", 3, "p1"), ("m1", 1, "p1"), ("q5", 5, "p2")]:
            send(client, receiver, message_id, seq, group)
        assert receiver.order_violations() == []
        receiver.set_rule(always(500))
        send(client, receiver, "m0", 0, "p1")  # answered 500: no delivery, so no violation
        assert receiver.order_violations() == []
        receiver.set_rule(None)
        send(client, receiver, "m2", 2, "p1")  # first delivery of seq 2 after seq 3 in p1
        send(client, receiver, "q4", 4, "p2")  # and seq 4 after seq 5 in p2
        send(client, receiver, "m4", 4, "p1")  # back in order
    assert receiver.order_violations() == [
        "group 'p1': message 'm2' seq 2 delivered after message 'm3' seq 3",
        "group 'p2': message 'q4' seq 4 delivered after message 'q5' seq 5",
    ]


def test_wait_for_returns_the_deliveries_or_fails_with_counts(client: httpx.Client) -> None:
    with Receiver(rule=failing_groups({"bad"})) as receiver:
        send(client, receiver, "m1", group="good")
        send(client, receiver, "m2", group="bad")
        got = receiver.wait_for(lambda delivered: len(delivered) == 1, timeout_s=1)
        assert [r.message_id for r in got] == ["m1"]
        started = time.monotonic()
        with pytest.raises(AssertionError) as error:
            receiver.wait_for(lambda delivered: len(delivered) >= 2, timeout_s=0.2)
        assert time.monotonic() - started >= 0.2
    message = str(error.value)
    assert "2 requests" in message
    assert "1 delivered" in message
    assert "{200: 1, 500: 1}" in message


def test_receivers_get_their_own_ports_and_a_restart_keeps_the_url(client: httpx.Client) -> None:
    first, second = Receiver(), Receiver()
    with first, second:
        assert first.port != second.port
        assert send(client, first, "a1").status_code == 200
        assert send(client, second, "b1").status_code == 200
        url = first.url
    with pytest.raises(httpx.ConnectError):
        send(client, first, "a2")
    first.stop()  # stopping a stopped receiver is a no-op
    with first:
        assert first.url == url
        assert send(client, first, "a2").status_code == 200
    assert [r.message_id for r in first.received] == ["a1", "a2"]
    assert [r.message_id for r in second.received] == ["b1"]


def test_the_seq_is_read_only_from_a_json_object_with_an_int(client: httpx.Client) -> None:
    with Receiver() as receiver:
        for content in [b"not json", b"[1, 2]", b'{"seq": true}', b'{"seq": "3"}', b'{"seq": 3}']:
            client.post(receiver.url, content=content, headers={"webhook-id": "m"})
    assert [r.seq for r in receiver.received] == [None, None, None, None, 3]
    assert {r.group for r in receiver.received} == {""}
