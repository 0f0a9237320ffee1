"""Where a subscription's deliveries stand against the log's head: lag, queue sizes, counters.

One reading for the two surfaces that show it: the API's subscription (api/service/subscriptions.py) and the
Prometheus metrics (api/metrics.py), which the service builds, so neither imports the other for it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from partbuild.state.database import Database
from partbuild.state.fold.subscription_records import Subscription
from partbuild.state.ops.deliveries import QUEUE_NAMES, Standing


@dataclass(frozen=True, slots=True)
class DeliveryProgress:
    """How far a subscription's deliveries got: events not yet handled (and the oldest one's wait), the
    messages waiting in the retry and dead-letter queues, what was delivered, retried and dead-lettered."""

    lag_events: int
    lag_seconds: float
    rq_messages: int
    dlq_messages: int
    delivered: int
    retried: int
    dead_lettered: int


def delivery_progress(now: Subscription | None, db: Database, head: int) -> DeliveryProgress:
    """Where the deliveries of `now` (the subscription's record now; None once deleted) stand against `head`."""
    standing = db.deliveries.standing(now.key, now.start_after_seq) if now and now.status != "deleted" else None
    handled = handled_upto(now, standing, head) if now and standing is not None else head
    lag_seconds = 0.0
    if handled < head:
        oldest = db.log.read(handled, 1)
        if oldest:
            lag_seconds = max(0.0, time.time() - oldest[0].recorded_at_ms / 1000)
    counts = standing.counts if standing is not None else dict.fromkeys(QUEUE_NAMES, 0)
    control = standing.control if standing is not None else None
    return DeliveryProgress(
        lag_events=head - handled,
        lag_seconds=round(lag_seconds, 3),
        rq_messages=counts["rq"],
        dlq_messages=counts["dlq"],
        delivered=control.delivered if control else 0,
        retried=control.retried if control else 0,
        dead_lettered=control.dead_lettered if control else 0,
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
