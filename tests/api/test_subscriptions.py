"""/api/v1/subscriptions over HTTP: lifecycle (the secret shown once), reshard and offsets, dead letters."""

from __future__ import annotations

from typing import Any

import httpx

from httpkit import API, events, ok, problem

SUBS = f"{API}/subscriptions"


def test_subscription_lifecycle_over_http_never_shows_the_secret(shared_client: httpx.Client) -> None:
    """Create (a secret made and shown once), list, show, pause, resume, delete; bad input says what was wrong."""
    body = {"name": "http-life", "endpoint": "http://127.0.0.1:9/hook", "filter": {"ref_prefixes": ["agg/"]}}
    created = ok(shared_client.post(SUBS, json=body), 201)
    secret = created["secret"]
    assert secret.startswith("whsec_") and created["subscription"]["status"] == "active"
    assert created["subscription"]["main_topic"]["storage_topics"][0]["partitions"] == 12
    problem(shared_client.post(SUBS, json=body), 409, "exists")
    problem(shared_client.post(SUBS, json={**body, "name": "x", "shard_count": "2"}), 422, "shard_count")
    problem(shared_client.post(SUBS, json={**body, "name": "x", "shard_count": 5}), 409, "5 shards cannot split 12")
    problem(shared_client.post(SUBS, json={**body, "name": "x", "endpoint": "http://u:p@h/"}), 409, "credentials")
    listed = ok(shared_client.get(SUBS))["subscriptions"]
    assert [sub["name"] for sub in listed] == ["http-life"]
    shown = ok(shared_client.get(f"{SUBS}/http-life"))
    assert (shown["filter"]["ref_prefixes"], shown["lag_events"], shown["dlq_messages"]) == (["agg/"], 0, 0)
    problem(shared_client.get(f"{SUBS}/nope"), 404, "no subscription")
    assert ok(shared_client.post(f"{SUBS}/http-life/pause"))["subscription"]["status"] == "paused"
    problem(shared_client.post(f"{SUBS}/http-life/pause"), 409, "is paused")
    assert ok(shared_client.post(f"{SUBS}/http-life/resume"))["subscription"]["status"] == "active"
    deleted = ok(shared_client.request("DELETE", f"{SUBS}/http-life"))
    assert deleted["subscription"]["status"] == "deleted"
    assert ok(shared_client.get(SUBS))["subscriptions"] == []
    events = events_of(shared_client)
    assert secret not in str(events) and secret not in str(shown) and secret not in str(listed)
    assert any("subscription_create" in event["event"] for event in events)


def events_of(client: httpx.Client) -> list[dict[str, Any]]:
    return events(client, 1000)


def test_subscription_reshard_and_offsets_follow_the_fold(shared_client: httpx.Client) -> None:
    """A reshard the partitions allow goes in; one they do not is a 409 with the fold's reason; resets likewise."""
    body = {"name": "http-shards", "endpoint": "https://hooks.example.com/pb", "secret": "whsec_" + "QUJD" * 8}
    created = ok(shared_client.post(SUBS, json=body), 201)
    assert created["secret"] is None  # given, so not shown back
    resharded = ok(shared_client.post(f"{SUBS}/http-shards/shards", json={"shard_count": 8, "main_partitions": 24}))
    sub = resharded["subscription"]
    assert sub["shard_count"] == 8 and [t["partitions"] for t in sub["rq_topic"]["storage_topics"]] == [12, 16]
    problem(shared_client.post(f"{SUBS}/http-shards/shards", json={"shard_count": 5}), 409, "5 shards cannot split 24")
    problem(shared_client.post(f"{SUBS}/http-shards/shards", json={"shard_count": 0}), 422, "shard_count")
    head = ok(shared_client.get("/healthz"))["head_seq"]
    moved = ok(shared_client.post(f"{SUBS}/http-shards/offsets", json={"queue": "rq", "to_seq": head}))
    assert moved["seq"] > head
    problem(shared_client.post(f"{SUBS}/http-shards/offsets", json={"queue": "rq", "to_seq": 1}), 409, "fast-forwards")
    problem(shared_client.post(f"{SUBS}/http-shards/offsets", json={"queue": "main"}), 422, "exactly one")
    problem(shared_client.post(f"{SUBS}/nope/offsets", json={"to_seq": 1}), 404, "no subscription")
    ok(shared_client.request("DELETE", f"{SUBS}/http-shards"))


def test_subscription_dead_letter_routes(shared_client: httpx.Client) -> None:
    """An empty DLQ lists nothing; replay and purge move nothing; an unknown subscription is a 404."""
    ok(shared_client.post(SUBS, json={"name": "http-dlq", "endpoint": "http://127.0.0.1:9/hook"}), 201)
    assert ok(shared_client.get(f"{SUBS}/http-dlq/dlq")) == {"messages": [], "next_after_seq": None}
    assert ok(shared_client.post(f"{SUBS}/http-dlq/dlq/replay", json={}))["moved"] == 0
    assert ok(shared_client.post(f"{SUBS}/http-dlq/dlq/purge", json={"group": "agg/x"}))["moved"] == 0
    problem(shared_client.get(f"{SUBS}/http-dlq/dlq", params={"limit": "many"}), 422, "limit")
    problem(shared_client.post(f"{SUBS}/nope/dlq/purge", json={}), 404, "no subscription")
    ok(shared_client.request("DELETE", f"{SUBS}/http-dlq"))


def test_subscription_settings_as_of_a_seq_and_deliveries_now(shared_client: httpx.Client) -> None:
    """As of a seq: the settings then (not yet created; active, then paused; two shards, then four; deleted),
    and where deliveries stand now, whatever the seq (deliveries are not in the log)."""
    body = {"name": "http-past", "endpoint": "http://127.0.0.1:9/hook", "shard_count": 2}
    created = ok(shared_client.post(SUBS, json=body), 201)["seq"]
    paused = ok(shared_client.post(f"{SUBS}/http-past/pause"))["seq"]
    resharded = ok(shared_client.post(f"{SUBS}/http-past/shards", json={"shard_count": 4}))["seq"]
    # Nothing delivers here: the lag now is every event since its creation, as of any seq (as of its
    # creation, a lag of that moment would have been none).
    now = ok(shared_client.get(f"{SUBS}/http-past"))
    then = ok(shared_client.get(f"{SUBS}/http-past", params={"as_of_seq": created}))
    assert now["lag_events"] == then["lag_events"] == resharded - created
    deleted = ok(shared_client.request("DELETE", f"{SUBS}/http-past"))["seq"]

    def shown(seq: int) -> tuple[str, int, int]:
        found = ok(shared_client.get(f"{SUBS}/http-past", params={"as_of_seq": seq}))
        return found["status"], found["shard_count"], found["as_of_seq"]

    def names(seq: int) -> list[str]:
        found = ok(shared_client.get(SUBS, params={"as_of_seq": seq}))
        assert found["as_of_seq"] == seq
        return [sub["name"] for sub in found["subscriptions"]]

    assert [shown(seq) for seq in (created, paused, resharded, deleted)] == [
        ("active", 2, created),
        ("paused", 2, paused),
        ("paused", 4, resharded),
        ("deleted", 4, deleted),
    ]
    problem(shared_client.get(f"{SUBS}/http-past", params={"as_of_seq": created - 1}), 404, f"as of seq {created - 1}")
    assert "http-past" not in names(created - 1) and "http-past" not in names(deleted)
    assert "http-past" in names(created) and "http-past" in names(resharded)
    head = ok(shared_client.get("/healthz"))["head_seq"]
    problem(shared_client.get(SUBS, params={"as_of_seq": head + 1_000}), 409, "is after the log head")
    problem(shared_client.get(f"{SUBS}/http-past", params={"as_of_seq": "-1"}), 422, "query.as_of_seq")
    problem(shared_client.get(SUBS, params={"as_of_seq": "1.5"}), 422, "query.as_of_seq")
