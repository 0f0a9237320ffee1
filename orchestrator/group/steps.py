"""The group messages a worker appends, as pure functions of the fold's state; `GroupConfig` (`run --group`).

- `epoch_event` (the leader): a new epoch when the live members differ from the
  current epoch's, built on the current epoch with `state.rules.group.next_epoch`.
- `task_event` (every task): its first message in an epoch restates its state
  unchanged (the share protocol's "new epoch seen"); only after that does it take share
  steps (`state.rules.group.share_step`). So sharing is disabled after a rebalance
  until the task has seen the new epoch: the fold records which event last set
  each state, and a state last set by the epoch itself has not been seen.

The caller appends the event with `expected_head` = the state's head: a step
computed on a stale view conflicts at the store and is computed again.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass

from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.fold.build_state import BuildState
from partbuild.state.log.events import envelope, system
from partbuild.state.rules.bucketing import DEFAULT_NAMESPACE
from partbuild.state.rules.group import TaskState, epoch_message, next_epoch, share_step, task_message

DEFAULT_BUCKETS = 12


@dataclass(frozen=True)
class GroupConfig:
    """`run --group NAME --buckets N --member-timeout S`."""

    name: str
    buckets: int = DEFAULT_BUCKETS  # used by the group's first epoch; later the fold's count wins
    member_timeout_s: float = 10.0
    namespace: str = DEFAULT_NAMESPACE

    @property
    def heartbeat_interval_s(self) -> float:
        """A quarter of the timeout: three heartbeats may be late before the member counts as dead."""
        return self.member_timeout_s / 4


def source(task_id: str) -> pb.EventSource:
    """The source of a task's group events: the fold requires it to name the task itself."""
    return system("orchestrator", task_id)


def epoch_event(
    state: BuildState, config: GroupConfig, leader: str, live: Sequence[str], now_ms: int
) -> pb.Event | None:
    """The leader's new epoch when the live members (in join order) differ from the current epoch's; else None."""
    group = state.groups.get(config.name)
    if leader not in live:
        return None  # our own row is not live (our heartbeat is late): do not lead a group we may be dead in
    if group is not None and set(group.members) == set(live):
        return None
    previous = group.states if group is not None else None
    namespace = group.namespace if group is not None else config.namespace
    total = group.bucket_total if group is not None else config.buckets
    states = next_epoch(previous, list(live), leader, total, timestamp_ms=now_ms)
    message = epoch_message(
        config.name,
        uuid.uuid4().hex,
        group.epoch_id if group is not None else "",
        namespace,
        total,
        leader,
        states,
        now_ms,
    )
    return envelope(message, source=source(leader), timestamp_ms=now_ms)


def task_event(state: BuildState, group_name: str, me: str, now_ms: int) -> pb.Event | None:
    """`me`'s next message in the current epoch: the "new epoch seen" restatement, a share step, or None."""
    group = state.groups.get(group_name)
    if group is None or me not in group.states:
        return None
    mine = group.states[me]
    if group.state_seqs[me] <= group.epoch_seq:  # set by the epoch: we have not said we saw it
        new: TaskState | None = TaskState(me, now_ms, mine.data, mine.share)
    else:
        new = share_step(group.states, me, timestamp_ms=now_ms)
    if new is None:
        return None
    return envelope(task_message(group, new, now_ms), source=source(me), timestamp_ms=now_ms)
