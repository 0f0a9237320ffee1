"""The fold's rules for subscriptions: settings, status changes, reshards (new storage topics), resets."""

from __future__ import annotations

import pickle
from typing import Any

import pytest

from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.log.digest import state_digest
from partbuild.state.log.snapshot import decode_state, encode_state

from foldkit import Story
from foldkit import subscription as create


@pytest.mark.parametrize(
    ("fields", "reason"),
    [
        ({"name": ""}, "a subscription name is 1 to 64"),
        ({"endpoint": "ftp://x/y"}, "http:// or https://"),
        ({"endpoint": "https://user:pw@hooks.example.com/"}, "must not carry credentials"),
        ({"ordering": "by_color"}, "ordering is one of"),
        ({"format": "xml"}, "format is one of"),
        ({"filter": pb.SubscriptionFilter(event_types=["want_created"])}, "unknown event type 'want_created'"),
        ({"filter": pb.SubscriptionFilter(ref_prefixes=[""])}, "not empty"),
        (
            {"retry": pb.RetryPolicy(max_attempts=0, backoff_initial_ms=1, backoff_max_ms=1, timeout_ms=1000)},
            "max_attempts",
        ),
        ({"retry": pb.RetryPolicy(max_attempts=1, backoff_initial_ms=5, backoff_max_ms=1, timeout_ms=1000)}, "backoff"),
        ({"retry": pb.RetryPolicy(max_attempts=1, backoff_initial_ms=1, backoff_max_ms=1, timeout_ms=5)}, "timeout_ms"),
        ({"main_partitions": 7}, "main topic"),
        ({"rq_partitions": 0}, "rq topic"),
        ({"shard_count": 5}, "5 shards cannot split 12"),
        ({"dlq_partitions": 6, "shard_count": 4}, "4 shards cannot split 6"),
        ({"secret_digest": ""}, "digest of its signing secret"),
        ({"start_after_seq": 99}, "start_after_seq is 0 to"),
    ],
)
def test_a_subscription_with_a_bad_setting_is_rejected_with_what_was_wrong(fields: dict[str, Any], reason: str) -> None:
    s = Story()
    s.rejected(create(**fields), reason)
    assert s.state.subscriptions == {}


def test_pause_resume_delete_follow_the_status_and_a_deleted_name_starts_a_new_incarnation() -> None:
    s = Story()
    s.ok(create())
    first = s.state.subscriptions["hooks"]
    assert (first.status, first.key, first.start_after_seq, first.event_types[0]) == (
        "active",
        "hooks@1",
        1,
        "want_create",
    )
    s.rejected(pb.SubscriptionChange(name="hooks", action=pb.SUBSCRIPTION_ACTION_RESUME), "is active")
    s.ok(pb.SubscriptionChange(name="hooks", action=pb.SUBSCRIPTION_ACTION_PAUSE))
    s.rejected(pb.SubscriptionChange(name="hooks", action=pb.SUBSCRIPTION_ACTION_PAUSE), "is paused")
    s.rejected(create(), "exists")
    s.ok(pb.SubscriptionChange(name="hooks", action=pb.SUBSCRIPTION_ACTION_DELETE))
    s.rejected(pb.SubscriptionChange(name="hooks", action=pb.SUBSCRIPTION_ACTION_RESUME), "no subscription 'hooks'")
    s.ok(create(start_after_seq=0))
    again = s.state.subscriptions["hooks"]
    assert (again.key, again.status, again.start_after_seq) == ("hooks@8", "active", 0)


def test_a_reshard_grows_the_rq_and_dlq_only_where_the_count_does_not_divide_them() -> None:
    s = Story()
    s.ok(create(rq_partitions=12, dlq_partitions=24))
    s.rejected(pb.SubscriptionReshard(name="hooks", shard_count=2), "already has 2 shard(s)")
    s.ok(pb.SubscriptionReshard(name="hooks", shard_count=4))  # 4 divides 12 and 24: no new storage topic
    sub = s.state.subscriptions["hooks"]
    assert (sub.shard_count, len(sub.rq.storage_topics), len(sub.dlq.storage_topics)) == (4, 1, 1)
    s.rejected(pb.SubscriptionReshard(name="hooks", shard_count=8), "8 shards cannot split 12")
    s.ok(pb.SubscriptionReshard(name="hooks", shard_count=8, main_partitions=48))
    sub = s.state.subscriptions["hooks"]
    main = [(t.partitions, t.k, t.start_seq) for t in sub.main.storage_topics]
    assert (main, sub.main.produce_pointer) == ([(12, 1, 2), (48, 4, 6)], 1)  # the K rule: 48 = 12 * 4
    assert [t.partitions for t in sub.rq.storage_topics] == [12, 16] and sub.rq.produce_pointer == 1
    assert [t.partitions for t in sub.dlq.storage_topics] == [24]  # 8 divides 24
    s.rejected(pb.SubscriptionReshard(name="hooks", shard_count=2, rq_partitions=10), "not 10")
    s.ok(pb.SubscriptionReshard(name="hooks", shard_count=1))
    assert s.state.subscriptions["hooks"].shard_count == 1


def test_resets_rewind_the_main_topic_across_divisible_topics_only_and_fast_forward_internal_queues() -> None:
    s = Story()
    s.ok(create(shard_count=1))
    for n in range(3):
        s.want(f"w{n}", f"r/{n}")
    s.ok(pb.SubscriptionReshard(name="hooks", shard_count=3, main_partitions=36, rq_partitions=12, dlq_partitions=12))
    s.ok(pb.SubscriptionOffsetReset(name="hooks", queue=pb.SUBSCRIPTION_QUEUE_MAIN, to_seq=0))  # 3 divides 12 and 36
    s.ok(pb.SubscriptionReshard(name="hooks", shard_count=9, main_partitions=72))  # the main topics: 12, 36, 72
    s.rejected(
        pb.SubscriptionOffsetReset(name="hooks", queue=pb.SUBSCRIPTION_QUEUE_MAIN, to_seq=2),
        "main storage topic 0 has 12 partitions, which 9 shards do not divide",
    )
    s.ok(pb.SubscriptionOffsetReset(name="hooks", queue=pb.SUBSCRIPTION_QUEUE_MAIN, to_seq=s.state.head_seq))
    s.ok(pb.SubscriptionOffsetReset(name="hooks", queue=pb.SUBSCRIPTION_QUEUE_DLQ, to_seq=4))
    s.rejected(
        pb.SubscriptionOffsetReset(name="hooks", queue=pb.SUBSCRIPTION_QUEUE_DLQ, to_seq=3), "only fast-forwards"
    )
    s.rejected(pb.SubscriptionOffsetReset(name="hooks", queue=pb.SUBSCRIPTION_QUEUE_UNSPECIFIED, to_seq=3), "queue is")
    sub = s.state.subscriptions["hooks"]
    assert [queue for _, queue, _ in sub.resets] == ["main", "main", "dlq"] and sub.dlq_floor == 4


def test_subscriptions_survive_a_snapshot_and_count_in_the_digest() -> None:
    s = Story()
    before = state_digest(s.state)
    s.ok(create(filter=pb.SubscriptionFilter(ref_patterns=["agg/*"], job="daily")))
    s.ok(pb.SubscriptionReshard(name="hooks", shard_count=4, rq_partitions=24))
    assert state_digest(s.state) != before
    restored = decode_state(encode_state(s.state))
    sub = restored.subscriptions["hooks"]
    assert (sub.ref_patterns, sub.job, sub.shard_count, sub.rq) == (
        ("agg/*",),
        "daily",
        4,
        s.state.subscriptions["hooks"].rq,
    )
    assert state_digest(restored) == state_digest(s.state)
    assert pickle.loads(pickle.dumps(sub.main)) == sub.main
