"""Subscriptions: SubscriptionCreate, SubscriptionChange, SubscriptionReshard, SubscriptionOffsetReset.

The fold keeps each subscription's settings and the layout of its three composite
topics (docs/subscriptions.md): the main topic (the log, routed into virtual partitions by the
ordering key's hash; a new storage topic takes over from the seq of the event that
adds it), the retry queue and the dead-letter queue. It judges every change:

- the shard count divides the partitions of the topics produced to (an RQ or DLQ
  that it does not divide gets a new storage topic, produced to from now on, so
  every shard keeps whole partitions of what it reads next);
- a rewind of the main topic crosses only storage topics the current shard count
  divides (otherwise a group's messages could land in another shard);
- the RQ and the DLQ only fast-forward.

What the delivery side keeps (offsets, queued messages) is not in the state: a
reset is recorded here, in log order, and applied by the delivery shards once.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.fold.subscription_records import (
    FORMATS,
    NAME_PATTERN,
    ORDERINGS,
    QUEUES,
    StatusName,
    Subscription,
    endpoint_problem,
    filter_problem,
    retry_problem,
)
from partbuild.state.fold.validation import short
from partbuild.state.rules.topics import CompositeTopic, partition_count_problem, shard_count_problem

if TYPE_CHECKING:
    from partbuild.state.fold.build_state import BuildState

MAX_REASON_CHARS = 1024
# (main, rq, dlq) after a reshard
ReshardPlan = tuple[Subscription, CompositeTopic, CompositeTopic, CompositeTopic]


def _existing(state: BuildState, name: str) -> Subscription | str:
    """The subscription named `name` that is not deleted, or the rejection reason."""
    sub = state.subscriptions.get(name)
    if sub is None or sub.status == "deleted":
        return f"no subscription {short(name)}"
    return sub


def check_subscription_create(state: BuildState, seq: int, msg: pb.SubscriptionCreate, event: pb.Event) -> str | None:
    """Validate a new subscription's every setting."""
    if not NAME_PATTERN.fullmatch(msg.name):
        return "a subscription name is 1 to 64 letters, digits, '_', '.' or '-', starting with a letter or digit"
    old = state.subscriptions.get(msg.name)
    if old is not None and old.status != "deleted":
        return f"subscription {short(msg.name)} exists"
    if msg.ordering not in ORDERINGS:
        return f"ordering is one of {', '.join(ORDERINGS)}, not {short(msg.ordering)}"
    if msg.format not in FORMATS:
        return f"format is one of {', '.join(FORMATS)}, not {short(msg.format)}"
    problem = endpoint_problem(msg.endpoint) or filter_problem(msg.filter) or retry_problem(msg.retry)
    if problem:
        return problem
    for what, count in (("main", msg.main_partitions), ("rq", msg.rq_partitions), ("dlq", msg.dlq_partitions)):
        problem = partition_count_problem(count)
        if problem:
            return f"{what} topic: {problem}"
    problem = shard_count_problem(msg.shard_count, (msg.main_partitions, msg.rq_partitions, msg.dlq_partitions))
    if problem:
        return problem
    if not msg.secret_digest or len(msg.secret_digest) > 64:
        return "a subscription needs the digest of its signing secret"
    if msg.HasField("start_after_seq") and not 0 <= msg.start_after_seq <= seq:
        return f"start_after_seq is 0 to this event's seq {seq}"
    return None


def apply_subscription_create(state: BuildState, seq: int, plan: None, event: pb.Event) -> None:
    sub = Subscription(seq, event.timestamp_ms, event.subscription_create)
    state.subscriptions[sub.name] = sub


_ACTIONS: dict[int, tuple[StatusName | None, StatusName]] = {
    pb.SUBSCRIPTION_ACTION_PAUSE: ("active", "paused"),
    pb.SUBSCRIPTION_ACTION_RESUME: ("paused", "active"),
    pb.SUBSCRIPTION_ACTION_DELETE: (None, "deleted"),
}


def check_subscription_change(
    state: BuildState, seq: int, msg: pb.SubscriptionChange, event: pb.Event
) -> str | Subscription:
    """Pause an active subscription, resume a paused one, delete either."""
    sub = _existing(state, msg.name)
    if isinstance(sub, str):
        return sub
    if msg.action not in _ACTIONS:
        return "a subscription change is pause, resume or delete"
    if len(msg.reason) > MAX_REASON_CHARS:
        return f"a reason is at most {MAX_REASON_CHARS} characters"
    before, _ = _ACTIONS[msg.action]
    if before is not None and sub.status != before:
        return f"subscription {short(msg.name)} is {sub.status}"
    return sub


def apply_subscription_change(state: BuildState, seq: int, sub: Subscription, event: pb.Event) -> None:
    sub.status = _ACTIONS[event.subscription_change.action][1]
    sub.updated_seq = seq
    sub.updated_ms = event.timestamp_ms


def check_subscription_reshard(
    state: BuildState, seq: int, msg: pb.SubscriptionReshard, event: pb.Event
) -> str | ReshardPlan:
    """A new shard count (and storage topics where it needs them), by the reshard procedure of docs/subscriptions.md."""
    sub = _existing(state, msg.name)
    if isinstance(sub, str):
        return sub
    main = sub.main
    if msg.main_partitions:
        problem = partition_count_problem(msg.main_partitions)
        if problem:
            return f"main topic: {problem}"
        main = main.add_storage_topic(msg.main_partitions, start_seq=seq + 1).switch_produce()
    problem = shard_count_problem(msg.shard_count, (main.produce_topic.partitions,))
    if problem:
        return f"{problem} (add a main storage topic with main_partitions)"
    queues = []
    for what, topic, asked in (("rq", sub.rq, msg.rq_partitions), ("dlq", sub.dlq, msg.dlq_partitions)):
        grown = _grown(topic, msg.shard_count, asked)
        if isinstance(grown, str):
            return f"{what} topic: {grown}"
        queues.append(grown)
    rq, dlq = queues
    if msg.shard_count == sub.shard_count and (main, rq, dlq) == (sub.main, sub.rq, sub.dlq):
        return f"subscription {short(msg.name)} already has {msg.shard_count} shard(s) on these topics"
    return sub, main, rq, dlq


def _grown(topic: CompositeTopic, shard_count: int, asked: int) -> CompositeTopic | str:
    """`topic`, with a new storage topic produced to when `asked` or when `shard_count` does not divide it."""
    current = topic.produce_topic.partitions
    if not asked and current % shard_count == 0:
        return topic
    size = asked or -(-current // shard_count) * shard_count
    problem = partition_count_problem(size) or shard_count_problem(shard_count, (size,))
    if problem:
        return problem
    return topic.add_storage_topic(size).switch_produce()


def apply_subscription_reshard(state: BuildState, seq: int, plan: ReshardPlan, event: pb.Event) -> None:
    sub, main, rq, dlq = plan
    sub.main, sub.rq, sub.dlq = main, rq, dlq
    sub.shard_count = event.subscription_reshard.shard_count
    sub.updated_seq = seq
    sub.updated_ms = event.timestamp_ms


def check_subscription_offset_reset(
    state: BuildState, seq: int, msg: pb.SubscriptionOffsetReset, event: pb.Event
) -> str | Subscription:
    """Main: rewind or fast-forward across shard-consistent storage topics; RQ/DLQ: fast-forward only."""
    sub = _existing(state, msg.name)
    if isinstance(sub, str):
        return sub
    queue = QUEUES.get(msg.queue)
    if queue is None:
        return "queue is main, rq or dlq"
    if not 0 <= msg.to_seq < seq:
        return f"to_seq is 0 to {seq - 1} (the log before this event)"
    if len(msg.reason) > MAX_REASON_CHARS:
        return f"a reason is at most {MAX_REASON_CHARS} characters"
    if queue == "main":
        first = sub.main_topic_index(msg.to_seq + 1)
        for index, topic in enumerate(sub.main.storage_topics[first : sub.main.produce_pointer + 1], first):
            if topic.partitions % sub.shard_count:
                return (
                    f"main storage topic {index} has {topic.partitions} partitions, which "
                    f"{sub.shard_count} shards do not divide: change the shard count first"
                )
        return sub
    floor = sub.rq_floor if queue == "rq" else sub.dlq_floor
    if msg.to_seq < floor:
        return f"the {queue} only fast-forwards: it is already past seq {floor}"
    return sub


def apply_subscription_offset_reset(state: BuildState, seq: int, sub: Subscription, event: pb.Event) -> None:
    msg = event.subscription_offset_reset
    queue = QUEUES[msg.queue]
    if queue == "rq":
        sub.rq_floor = msg.to_seq
    elif queue == "dlq":
        sub.dlq_floor = msg.to_seq
    sub.resets = (*sub.resets, (seq, queue, msg.to_seq))
    sub.updated_seq = seq
    sub.updated_ms = event.timestamp_ms
