"""/api/v1/events over HTTP: the raw log, paged by seq."""

from __future__ import annotations

from httpkit import API, WANTS, events, head_seq, observe, ok, want
from serverkit import ApiServer


def test_events_are_the_raw_log_paged_by_seq(db_api_server: ApiServer) -> None:
    """GET /events is the log itself: every seq once, in order, payloads as dicts, the user as the source."""
    client = db_api_server.client
    want(client, ["e/1"], want_id="e-1", comment="hi")
    observe(client, "e/src", "/data/e")
    ok(client.post(f"{WANTS}/e-1/cancel", json={"reason": "done"}, headers={"X-Partbuild-User": "eve"}))
    ok(client.post(f"{WANTS}/batch", json={"wants": [{"refs": [f"e/b/{n}"]} for n in range(3)]}), 201)
    head = head_seq(client)
    assert head == 6

    for limit in (1, 4, 6, 1_000):
        assert [e["seq"] for e in events(client, limit)] == list(range(1, head + 1))
    log = events(client, 100)
    assert [e["event_type"] for e in log] == ["want_create", "partition_observed", "want_cancel", *["want_create"] * 3]
    for event in log:
        assert isinstance(event["event"], dict) and event["event"]["event_id"] == event["event_id"]
        assert event["recorded_at_ms"] > 0
    first, observed, canceled = log[:3]
    assert first["event"]["want_create"] == {"want_id": "e-1", "partition_refs": ["e/1"], "comment": "hi"}
    assert first["event"]["source"] == {"manual": {"user": "anonymous"}}
    assert observed["event"]["partition_observed"] == {"partition_ref": "e/src", "location": "/data/e"}
    assert canceled["event"]["want_cancel"] == {"want_id": "e-1", "reason": "done"}
    assert canceled["event"]["source"] == {"manual": {"user": "eve"}}
    assert ok(client.get(f"{API}/events", params={"after_seq": head})) == {
        "items": [],
        "next_cursor": None,
        "as_of_seq": head,
    }
    # A page says the head it was read as of; a full one hands on.
    assert ok(client.get(f"{API}/events", params={"limit": 2}))["as_of_seq"] == head
    # An observation with a version is judged by it when the partition was gone (fold/instances.py).
    versioned = observe(client, "e/src", "/data/e2", version={"value": "v2", "strong": True})
    (event,) = ok(client.get(f"{API}/events", params={"after_seq": versioned - 1}))["items"]
    assert event["event"]["partition_observed"]["judge_gone_by_version"] is True
