"""Worker-group stories: epochs and task messages built with the protocol's own pure functions."""

from __future__ import annotations

from collections.abc import Sequence

from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.log.events import system
from partbuild.state.rules.bucketing import bucket
from partbuild.state.rules.group import (
    GroupState,
    TaskState,
    epoch_message,
    fence,
    next_epoch,
    share_step,
    task_message,
)

from foldkit import Story

NAMESPACE = "partbuild"


def as_task(task_id: str) -> pb.EventSource:
    """The source a member's events carry: the orchestrator, with the task id as its worker id."""
    return system("orchestrator", task_id)


def group_of(story: Story, name: str = "g") -> GroupState:
    return story.state.groups[name]


def epoch(
    story: Story,
    members: Sequence[str],
    leader: str,
    epoch_id: str,
    *,
    name: str = "g",
    total: int = 6,
    namespace: str = NAMESPACE,
) -> pb.GroupEpoch:
    """The epoch `next_epoch` gives, built on the group's current one (a first epoch for a new group)."""
    current = story.state.groups.get(name)
    previous = current.states if current is not None else None
    if current is not None:
        total, namespace = current.bucket_total, current.namespace
    states = next_epoch(previous, list(members), leader, total, timestamp_ms=story.clock_ms)
    last = current.epoch_id if current is not None else ""
    return epoch_message(name, epoch_id, last, namespace, total, leader, states, story.clock_ms)


def start(story: Story, members: Sequence[str], leader: str, epoch_id: str, **kwargs: object) -> None:
    """Append an epoch that must be accepted (from the leader)."""
    story.ok(epoch(story, members, leader, epoch_id, **kwargs), source=as_task(leader))  # type: ignore[arg-type]


def message(story: Story, new: TaskState, name: str = "g") -> pb.GroupTaskMessage:
    """`new.task_id`'s message with its new state and everyone else's as the fold holds them."""
    return task_message(group_of(story, name), new, story.clock_ms)


def step(story: Story, task: str, name: str = "g") -> TaskState | None:
    """One share-protocol step of `task`, appended (it must be accepted); None when it had nothing to do."""
    new = share_step(group_of(story, name).states, task, timestamp_ms=story.clock_ms)
    if new is not None:
        story.ok(message(story, new, name), source=as_task(task))
    return new


def settle(story: Story, name: str = "g", limit: int = 1_000) -> int:
    """Step every member in turn until none has anything to do; returns how many messages that took."""
    sent = 0
    for _ in range(limit):
        moved = [task for task in group_of(story, name).members if step(story, task, name) is not None]
        sent += len(moved)
        if not moved:
            return sent
    raise AssertionError("the share protocol did not settle")


def with_state(state: TaskState, *, data: set[int] | None = None, share: dict[int, str] | None = None) -> TaskState:
    """A copy of `state` with other data or share section."""
    return TaskState(
        state.task_id,
        state.state_timestamp_ms,
        frozenset(state.data if data is None else data),
        dict(state.share if share is None else share),
    )


def ref_in(bucket_id: int, total: int = 6, prefix: str = "noop/", namespace: str = NAMESPACE) -> str:
    """The first ref `{prefix}{n}` in a bucket."""
    return next(f"{prefix}{n}" for n in range(10_000) if bucket(namespace, f"{prefix}{n}", total) == bucket_id)


def fenced(story: Story, task: str, name: str = "g") -> pb.DecisionFence:
    """The fence of `task` under the group's current epoch."""
    return fence(group_of(story, name), task)
