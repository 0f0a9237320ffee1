"""Subscriptions as the API shows them: the fold's record plus where the deliveries stand (never the secret)."""

from __future__ import annotations

import time

from partbuild.api import subscription_models as sm
from partbuild.state.database import Database
from partbuild.state.ops.deliveries import QUEUE_NAMES, Queued, Standing
from partbuild.state.rules.subscriptions import BUILD_EVENT_TYPES, Subscription
from partbuild.state.rules.topics import CompositeTopic


def topic_out(topic: CompositeTopic) -> sm.CompositeTopic:
    return sm.CompositeTopic(
        storage_topics=[
            sm.StorageTopic(partitions=t.partitions, k=t.k, start_seq=t.start_seq) for t in topic.storage_topics
        ],
        produce_pointer=topic.produce_pointer,
    )


def handled_upto(sub: Subscription, standing: Standing, head: int) -> int:
    """The seq before the oldest event some shard has not handled (`head` when every shard is current)."""
    topics = sub.main.storage_topics
    lowest = head
    for index in range(sub.main.produce_pointer + 1):
        end = topics[index + 1].start_seq - 1 if index < sub.main.produce_pointer else head
        floor = max(standing.control.main_floor, topics[index].start_seq - 1)
        for partition in range(topics[index].partitions):
            seq = standing.offsets.get((index, partition), floor)
            lowest = min(lowest, max(seq, floor) if floor < end else end)
    return lowest


def subscription_out(sub: Subscription, db: Database, head: int) -> sm.Subscription:
    """The API's subscription: settings, topics, lag, queue sizes, counters (from one snapshot)."""
    standing = db.deliveries.standing(sub.key, sub.start_after_seq) if sub.status != "deleted" else None
    handled = handled_upto(sub, standing, head) if standing is not None else head
    lag_seconds = 0.0
    if handled < head:
        oldest = db.log.read(handled, 1)
        if oldest:
            lag_seconds = max(0.0, time.time() - oldest[0].recorded_at_ms / 1000)
    counts = standing.counts if standing is not None else dict.fromkeys(QUEUE_NAMES, 0)
    control = standing.control if standing is not None else None
    default_types = sub.event_types == BUILD_EVENT_TYPES
    return sm.Subscription(
        name=sub.name,
        status=sub.status,  # type: ignore[arg-type]
        endpoint=sub.endpoint,
        filter=sm.SubscriptionFilter(
            event_types=[] if default_types else list(sub.event_types),
            ref_prefixes=list(sub.ref_prefixes),
            ref_patterns=list(sub.ref_patterns),
            job=sub.job,
            root_want=sub.root_want,
        ),
        ordering=sub.ordering,  # type: ignore[arg-type]
        format=sub.format,  # type: ignore[arg-type]
        retry=sm.RetryPolicy(
            max_attempts=sub.max_attempts,
            backoff_initial_ms=sub.backoff_initial_ms,
            backoff_max_ms=sub.backoff_max_ms,
            max_age_ms=sub.max_age_ms,
            timeout_ms=sub.timeout_ms,
        ),
        shard_count=sub.shard_count,
        main_topic=topic_out(sub.main),
        rq_topic=topic_out(sub.rq),
        dlq_topic=topic_out(sub.dlq),
        secret_digest=sub.secret_digest,
        created_seq=sub.created_seq,
        start_after_seq=sub.start_after_seq,
        lag_events=head - handled,
        lag_seconds=round(lag_seconds, 3),
        rq_messages=counts["rq"],
        dlq_messages=counts["dlq"],
        delivered=control.delivered if control else 0,
        retried=control.retried if control else 0,
        dead_lettered=control.dead_lettered if control else 0,
    )


def dead_letter_out(message: Queued, message_id: str, event_type: str | None) -> sm.DeadLetter:
    return sm.DeadLetter(
        message_id=message_id,
        group=message.ordering_key,
        seq=message.event_seq,
        event_type=event_type,
        attempts=message.attempts,
        last_status=message.last_status,
        last_error=message.last_error,
        first_failed_ms=message.first_failed_ms,
        topic=message.topic,
        partition=message.partition,
        offset=message.offset,
    )
