"""Worker groups: who owns each bucket, and the pure steps of the protocol (docs/worker-group.md).

No I/O, no clock, no randomness. The fold (`state/fold/group.py`) judges the
group events with `epoch_problem` and `step_problem`; workers compute their
next moves with `next_epoch` (the leader's sticky rebalance) and `share_step`
(every task's step of the share protocol); the checker (state/log/group_verify.py)
replays a log and proves the invariants at every seq. `GroupState` and
`TaskState` are the records of `BuildState.groups`; the message builders make
the group events and fences.

The ownership rule: a task *holds* a bucket when it is in its `data`, and
*shares* it when it is also in its `share` section (addressed to a target).
The owner of a bucket is the one task that holds it without sharing it. So a
bucket shared X -> T and already picked up (in T's data) is T's; a bucket
shared but not picked up yet has no owner (nobody may build it); two tasks
holding a bucket without sharing it would be two owners, which the fold never
accepts.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import ClassVar

from partbuild.proto.v1 import events_pb2 as pb

# Every epoch lists every bucket explicitly (data sets covering 1..bucket_total), so a group's
# bucket count is kept small: thousands are plenty to balance hundreds of workers within one bucket.
MAX_GROUP_BUCKETS = 4096


@dataclass(frozen=True, slots=True)
class TaskState:
    """One task's state in a group: the protocol's `{taskID, stateTimestamp, data, share}`."""

    task_id: str
    state_timestamp_ms: int = 0
    data: frozenset[int] = frozenset()
    share: Mapping[int, str] = field(default_factory=dict)  # bucket -> target task; never mutated

    def owned(self) -> frozenset[int]:
        """The buckets it holds and is not handing off (its own, unless another task holds one too)."""
        return self.data.difference(self.share) if self.share else self.data

    def record(self) -> tuple[str, int, tuple[int, ...], tuple[tuple[int, str], ...]]:
        """A canonical tuple (sorted), for digests and comparisons that must not depend on set order."""
        return self.task_id, self.state_timestamp_ms, tuple(sorted(self.data)), tuple(sorted(self.share.items()))


@dataclass(frozen=True, slots=True)
class GroupState:
    """A group as the fold holds it at a seq: its current epoch, every member's state, the owners.

    Immutable: every accepted group event replaces the record (its apply assigns the plan).
    """

    name: str
    created_seq: int  # the seq of its first epoch
    namespace: str
    bucket_total: int
    epoch_id: str
    epoch_seq: int  # the seq of the GroupEpoch that started the current epoch
    leader: str
    members: tuple[str, ...]
    states: Mapping[str, TaskState]  # by member, in member order
    owners: Mapping[int, str]  # bucket -> its owner (derived from states; buckets without one are absent)
    state_seqs: Mapping[str, int]  # member -> seq of the event that last set its state
    epoch_ids: frozenset[str]  # every epoch id the group has had: an id is never reused
    epochs: int  # how many epochs so far
    # The seq of the first epoch that fenced off removed members' runs (GroupEpoch.fences_removed_runs), or 0.
    fences_runs_since: int = 0

    digest_leaves_out: ClassVar[tuple[str, ...]] = ("owners",)

    def digest_values(self) -> tuple[object, ...]:
        """A canonical tuple for the state digest (`owners` follow from the states, so it is left out; the fence
        of removed members' runs is hashed once set, so older logs keep their digests)."""
        states = tuple((self.states[task].record(), self.state_seqs[task]) for task in self.members)
        layout = (self.name, self.created_seq, self.namespace, self.bucket_total)
        epoch = (self.epoch_id, self.epoch_seq, self.leader, self.members, tuple(sorted(self.epoch_ids)), self.epochs)
        if self.fences_runs_since:
            return layout, epoch, states, self.fences_runs_since
        return layout, epoch, states

    def fences_off(self, task_id: str) -> bool:
        """Whether the runs `task_id` buffered for this group are fenced off: it was removed from a group that
        fences removed members' runs."""
        return bool(self.fences_runs_since) and task_id not in self.states

    def owned_by(self, task_id: str) -> list[int]:
        """The buckets `task_id` owns, ascending."""
        return sorted(bucket for bucket, owner in self.owners.items() if owner == task_id)


# ----------------------------------------------------------------- ownership


def ownership(states: Iterable[TaskState]) -> tuple[dict[int, str], dict[int, tuple[str, ...]]]:
    """(bucket -> owner, bucket -> its owners where there are several). A conflicted bucket is in the second only."""
    holders: dict[int, list[str]] = {}
    for state in states:
        for bucket in state.owned():
            holders.setdefault(bucket, []).append(state.task_id)
    owners = {bucket: tasks[0] for bucket, tasks in holders.items() if len(tasks) == 1}
    conflicts = {bucket: tuple(tasks) for bucket, tasks in holders.items() if len(tasks) > 1}
    return owners, conflicts


def owners_of(states: Iterable[TaskState]) -> dict[int, str]:
    """Bucket -> owner (conflicted buckets, which a valid log never has, are left out)."""
    return ownership(states)[0]


def owned_sets(states: Iterable[TaskState]) -> dict[str, frozenset[int]]:
    """Task -> the buckets it owns (conflicted ones excluded)."""
    found: dict[str, set[int]] = {}
    for bucket, owner in owners_of(states).items():
        found.setdefault(owner, set()).add(bucket)
    return {task: frozenset(buckets) for task, buckets in found.items()}


def loads(states: Mapping[str, TaskState]) -> dict[str, int]:
    """Task -> the buckets it owns plus those addressed to it and not picked up yet (its load once they are)."""
    counts = dict.fromkeys(states, 0)
    for owner in owners_of(states.values()).values():
        counts[owner] += 1
    for state in states.values():
        for bucket, target in state.share.items():
            receiver = states.get(target)
            if receiver is not None and bucket not in receiver.data:
                counts[target] += 1
    return counts


def format_buckets(buckets: Iterable[int], limit: int = 12) -> str:
    """Buckets as ranges ("1-3,5"), cut after `limit` ranges so a reason stays short."""
    ordered = sorted(buckets)
    if not ordered:
        return "none"
    ranges: list[str] = []
    start = previous = ordered[0]
    for bucket in [*ordered[1:], None]:
        if bucket is not None and bucket == previous + 1:
            previous = bucket
            continue
        ranges.append(str(start) if start == previous else f"{start}-{previous}")
        if bucket is not None:
            start = previous = bucket
    shown = ",".join(ranges[:limit])
    return shown if len(ranges) <= limit else f"{shown},... ({len(ordered)} buckets)"


# ----------------------------------------------------------------- the leader: a new epoch


def next_epoch(
    previous: Mapping[str, TaskState] | None,
    members: Sequence[str],
    leader: str,
    bucket_total: int,
    *,
    timestamp_ms: int = 0,
) -> dict[str, TaskState]:
    """The initial states of a new epoch (member order kept): the leader's rebalance.

    Sticky: each surviving member keeps exactly the buckets it owned; states of
    members that left are dropped; pending shares are canceled (a bucket shared
    but not picked up had no owner). Every bucket without a surviving owner, in
    a dead member's share section or a pending share included, goes to the
    leader, which shares it on (`share_step`). Share sections start empty.
    """
    if len(set(members)) != len(members):
        raise ValueError("members are not unique")
    if leader not in members:
        raise ValueError(f"leader {leader!r} is not a member")
    if not 1 <= bucket_total <= MAX_GROUP_BUCKETS:
        raise ValueError(f"bucket_total {bucket_total} is not between 1 and {MAX_GROUP_BUCKETS}")
    kept = owned_sets(previous.values()) if previous else {}
    data = {task: kept.get(task, frozenset()) for task in members if task != leader}
    taken = frozenset().union(*data.values())
    data[leader] = frozenset(range(1, bucket_total + 1)) - taken
    return {task: TaskState(task, timestamp_ms, data[task], {}) for task in members}


def epoch_problem(
    previous: Mapping[str, TaskState] | None,
    leader: str,
    bucket_total: int,
    states: Mapping[str, TaskState],
) -> str | None:
    """Why an epoch's initial states are not `next_epoch`'s rule, or None.

    `states` holds one well-formed state per member (the fold checked the
    shapes). Share sections empty; data sets disjoint and covering
    1..bucket_total; every member but the leader holds exactly what it owned in
    `previous` (nothing when it is new), so the leader keeps its own and takes
    every ownerless bucket.
    """
    given: dict[int, str] = {}
    for task, state in states.items():
        if state.share:
            return f"member {task!r} starts with buckets in its share section ({format_buckets(state.share)})"
        for bucket in state.data:
            if bucket in given:
                return f"bucket {bucket} is given to both {given[bucket]!r} and {task!r}"
            given[bucket] = task
    if len(given) != bucket_total:
        missing = set(range(1, bucket_total + 1)).difference(given)
        return f"buckets {format_buckets(missing)} are given to no member; every bucket of 1..{bucket_total} must be"
    kept = owned_sets(previous.values()) if previous else {}
    for task, state in states.items():
        if task == leader:
            continue
        owned = kept.get(task, frozenset())
        if state.data == owned:
            continue
        if previous is None or task not in previous:
            return (
                f"new member {task!r} is given buckets {format_buckets(state.data)}: a new member starts empty; "
                f"ownerless buckets go to the leader {leader!r}"
            )
        lost, gained = owned - state.data, state.data - owned
        return (
            f"member {task!r} would lose buckets {format_buckets(lost)} and gain {format_buckets(gained)}: "
            f"a surviving member keeps exactly the buckets it owned; ownerless buckets go to the leader {leader!r}"
        )
    return None


# ----------------------------------------------------------------- a task: one step of the share protocol


def step_problem(states: Mapping[str, TaskState], sender: str, new: TaskState) -> str | None:
    """Why `new` is not a legal next state of `sender` given every member's current `states`, or None.

    `new` is well formed (the fold checked its shape: buckets in range, share
    keys in data, share targets other members). Legal changes: pick up a bucket
    shared to the sender by its current holder; share a bucket the sender owns
    and alone holds (an earlier hand-off of it finished) to another member;
    drop a shared bucket, from data and share together, once its target has
    picked it up. Nothing else: a bucket is never released without a hand-off,
    a share is never withdrawn or re-addressed, a bucket never re-owned.
    """
    old = states[sender]
    for bucket in sorted(new.data - old.data):
        holder = next((s.task_id for s in states.values() if s.share.get(bucket) == sender), None)
        if holder is None:
            owner = owners_of(states.values()).get(bucket)
            held = f"owned by {owner!r}" if owner else "owned by nobody"
            return f"task {sender!r} picks up bucket {bucket}, which no task shares with it ({held})"
    for bucket in sorted(old.data - new.data):
        if bucket not in old.share:
            return f"task {sender!r} drops bucket {bucket} without handing it off (a bucket leaves only by a share)"
        target = old.share[bucket]
        if bucket not in states[target].data:
            return f"task {sender!r} drops bucket {bucket} before its target {target!r} picked it up"
    problem = _share_problem(states, sender, old, new)
    if problem:
        return problem
    after = {**states, sender: new}
    conflicts = ownership(after.values())[1]
    if conflicts:
        bucket, tasks = min(conflicts.items())
        return f"bucket {bucket} would have two owners: {', '.join(map(repr, tasks))}"
    return None


def _share_problem(states: Mapping[str, TaskState], sender: str, old: TaskState, new: TaskState) -> str | None:
    """Why the change of `sender`'s share section is not legal, or None."""
    for bucket, target in sorted(old.share.items()):
        now = new.share.get(bucket)
        if now is None and bucket in new.data:
            return f"task {sender!r} withdraws its share of bucket {bucket} to {target!r}: a bucket is never re-owned"
        if now is not None and now != target:
            return f"task {sender!r} re-addresses its share of bucket {bucket} from {target!r} to {now!r}"
    for bucket in sorted(new.share):
        if bucket in old.share:
            continue
        if bucket not in old.data:
            return f"task {sender!r} shares bucket {bucket}, which it does not own"
        others = [s.task_id for s in states.values() if s.task_id != sender and bucket in s.data]
        if others:
            return f"task {sender!r} shares bucket {bucket} while {others[0]!r} still holds it (a hand-off is not over)"
    return None


def share_step(states: Mapping[str, TaskState], me: str, *, timestamp_ms: int | None = None) -> TaskState | None:
    """`me`'s next state under the share protocol, or None when it has nothing to do.

    In one step, as a task does on each scan: pick up every bucket
    addressed to it; drop every bucket it shared that its target picked up;
    then, while it carries at least two buckets more than the least-loaded
    member, share one more of the buckets it alone holds (highest first) to
    that member. Loads count buckets addressed to a task as its own already, so
    two sharers never overshoot the same target, and loads converge to within
    one bucket (each share lowers the sum of squared loads).
    """
    mine = states[me]
    data, share = set(mine.data), dict(mine.share)
    for other in states.values():
        for bucket, target in other.share.items():
            if target == me and bucket in other.data:
                data.add(bucket)
    for bucket, target in mine.share.items():
        if bucket in states[target].data:
            data.discard(bucket)
            del share[bucket]
    load = loads(states)
    others = [task for task in states if task != me]
    held_elsewhere = {bucket for state in states.values() if state.task_id != me for bucket in state.data}
    shareable = sorted(mine.owned() - held_elsewhere)
    while others and shareable:
        target = min(others, key=lambda task: (load[task], task))
        if load[me] - load[target] < 2:
            break
        bucket = shareable.pop()
        share[bucket] = target
        load[me] -= 1
        load[target] += 1
    if data == mine.data and share == mine.share:
        return None
    stamp = mine.state_timestamp_ms if timestamp_ms is None else timestamp_ms
    return TaskState(me, stamp, frozenset(data), share)


# ----------------------------------------------------------------- messages


def task_state_pb(state: TaskState) -> pb.GroupTaskState:
    """The wire form of a task state: data ascending, share as a map."""
    return pb.GroupTaskState(
        task_id=state.task_id,
        state_timestamp_ms=state.state_timestamp_ms,
        data=sorted(state.data),
        share=dict(state.share),
    )


def task_state_of(msg: pb.GroupTaskState) -> TaskState:
    """A task state from its wire form (the fold checks the shape first)."""
    return TaskState(msg.task_id, msg.state_timestamp_ms, frozenset(msg.data), dict(msg.share))


def epoch_message(
    group: str,
    epoch_id: str,
    previous_epoch_id: str,
    namespace: str,
    bucket_total: int,
    leader: str,
    states: Mapping[str, TaskState],
    timestamp_ms: int,
) -> pb.GroupEpoch:
    """The GroupEpoch a leader appends for `next_epoch`'s states."""
    return pb.GroupEpoch(
        group=group,
        epoch_id=epoch_id,
        previous_epoch_id=previous_epoch_id,
        namespace=namespace,
        bucket_total=bucket_total,
        leader_task_id=leader,
        message_timestamp_ms=timestamp_ms,
        members=list(states),
        connector_state=[task_state_pb(state) for state in states.values()],
        fences_removed_runs=True,
    )


def task_message(group: GroupState, new: TaskState, timestamp_ms: int) -> pb.GroupTaskMessage:
    """The GroupTaskMessage of `new.task_id`: its new state and every other member's as `group` holds it."""
    states = [new if task == new.task_id else group.states[task] for task in group.members]
    return pb.GroupTaskMessage(
        group=group.name,
        epoch_id=group.epoch_id,
        task_id=new.task_id,
        message_timestamp_ms=timestamp_ms,
        connector_state=[task_state_pb(state) for state in states],
    )


def fence(group: GroupState, task_id: str) -> pb.DecisionFence:
    """The fence a member's decisions carry under the group's current epoch."""
    return pb.DecisionFence(group=group.name, epoch_id=group.epoch_id, task_id=task_id)
