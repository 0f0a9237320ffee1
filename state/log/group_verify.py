"""The worker-group checker: replay a log and prove the group invariants at every seq.

`partbuild group verify` and the process-level tests run it. It folds every
event into a fresh BuildState (to learn which events the fold accepted and
which partitions a decision names) and, beside it, rebuilds each group from
the accepted GroupEpoch and GroupTaskMessage events alone, without trusting the
fold's group records. Against that model it checks:

- at most one owner per bucket at every seq (ownership changes only at group
  events, so checking after each one covers every seq), and every bucket owned
  when an epoch starts;
- every epoch follows the current one and every surviving member kept the
  buckets it owned (the leader may only gain);
- every task message changed only its sender's state, and a bucket changed
  owner only when its holder had shared it to the new owner;
- every accepted fenced decision was made under the current epoch by a member
  that owned the bucket of each partition it named (derivative wants: a member).

A problem means the fold accepted something it must not have: a bug to report.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from google.protobuf.message import DecodeError

from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.fold.build_state import BuildState
from partbuild.state.fold.registry import BY_NAME
from partbuild.state.rules.bucketing import bucket
from partbuild.state.rules.group import TaskState, format_buckets, ownership, task_state_of

_GROUP_KINDS = frozenset({"group_epoch", "group_task_message"})  # the events this checker rebuilds groups from


@dataclass(frozen=True)
class Problem:
    """One broken invariant: the seq of the accepted event that broke it, and what is wrong."""

    seq: int
    text: str

    def __str__(self) -> str:
        return f"seq {self.seq}: {self.text}"


@dataclass
class VerifyReport:
    """What the checker replayed and what it found."""

    events: int = 0
    groups: int = 0
    epochs: int = 0
    task_messages: int = 0
    fenced_decisions: int = 0
    rejected: int = 0  # group events and fenced decisions the fold rejected (stale leaders, late workers)
    problems: list[Problem] = field(default_factory=list)

    def summary(self) -> str:
        """One line: what was checked."""
        return (
            f"{self.events} events, {self.groups} groups, {self.epochs} epochs, {self.task_messages} task messages, "
            f"{self.fenced_decisions} fenced decisions accepted, {self.rejected} group events and fenced "
            "decisions rejected by the fold"
        )


@dataclass
class _Group:
    """The checker's own model of a group, rebuilt from accepted group events only."""

    namespace: str
    bucket_total: int
    epoch_id: str
    leader: str
    states: dict[str, TaskState]
    owners: dict[int, str]


def verify(events: Iterable[tuple[int, pb.Event | bytes] | pb.Event]) -> list[Problem]:
    """Every broken group invariant in a log: (seq, event or payload) pairs, or events numbered from 1."""
    return verify_report(events).problems


def verify_report(events: Iterable[tuple[int, pb.Event | bytes] | pb.Event]) -> VerifyReport:
    """Replay `events` (in seq order) and check the group invariants after each; see the module docstring."""
    fold = BuildState()
    groups: dict[str, _Group] = {}
    report = VerifyReport()
    for seq, event in _numbered(events):
        report.events += 1
        if isinstance(event, bytes):
            try:
                parsed = pb.Event.FromString(event)
            except DecodeError:
                fold.apply_payload(seq, event)  # a rejection, as in any replay
                continue
            event = parsed
        kind = event.WhichOneof("payload")
        fence, refs = _fenced_refs(fold, kind, event)
        if fold.apply(seq, event) is not None:
            report.rejected += kind in _GROUP_KINDS or fence is not None
            continue
        found: list[str] = []
        if kind == "group_epoch":
            report.epochs += 1
            found = _epoch(groups, event.group_epoch)
        elif kind == "group_task_message":
            report.task_messages += 1
            found = _message(groups, event.group_task_message)
        elif fence is not None:
            report.fenced_decisions += 1
            found = _fence(groups, kind or "", fence, refs)
        report.problems.extend(Problem(seq, text) for text in found)
    report.groups = len(groups)
    return report


def _numbered(events: Iterable[tuple[int, pb.Event | bytes] | pb.Event]) -> Iterable[tuple[int, pb.Event | bytes]]:
    for index, item in enumerate(events, 1):
        yield (index, item) if isinstance(item, pb.Event) else item


def _fenced_refs(fold: BuildState, kind: str | None, event: pb.Event) -> tuple[pb.DecisionFence | None, list[str]]:
    """A fenced decision's fence and the refs of the partitions it decides about, read before it is folded.

    Which event types may carry a fence, and which partitions they decide about: their registry rows.
    """
    row = BY_NAME.get(kind) if kind is not None else None
    if row is None or row.fence_refs is None:
        return None, []
    msg = row.message(event)
    if not msg.HasField("fence"):
        return None, []
    return msg.fence, list(row.fence_refs(fold, msg))


def _conflicts(owners_and_conflicts: tuple[dict[int, str], dict[int, tuple[str, ...]]]) -> list[str]:
    return [
        f"bucket {b} has {len(tasks)} owners: {', '.join(map(repr, tasks))}"
        for b, tasks in sorted(owners_and_conflicts[1].items())
    ]


def _epoch(groups: dict[str, _Group], msg: pb.GroupEpoch) -> list[str]:
    """An accepted epoch: built on the current one, survivors kept their buckets, one owner for every bucket."""
    problems: list[str] = []
    current = groups.get(msg.group)
    leader = msg.leader_task_id
    states = {state.task_id: task_state_of(state) for state in msg.connector_state}
    if current is not None:
        if msg.previous_epoch_id != current.epoch_id:
            problems.append(
                f"epoch {msg.epoch_id!r} replaced {current.epoch_id!r} but was built on {msg.previous_epoch_id!r}"
            )
        problems.extend(_stickiness(current, states, leader))
    found = ownership(states.values())
    problems.extend(_conflicts(found))
    unowned = set(range(1, msg.bucket_total + 1)).difference(found[0])
    if unowned:
        problems.append(f"epoch {msg.epoch_id!r} starts with buckets {format_buckets(unowned)} owned by nobody")
    groups[msg.group] = _Group(msg.namespace, msg.bucket_total, msg.epoch_id, leader, states, found[0])
    return problems


def _stickiness(current: _Group, states: Mapping[str, TaskState], leader: str) -> list[str]:
    """Survivors keep exactly what they owned; the leader keeps at least its own."""
    problems = []
    for task, state in states.items():
        if task not in current.states:
            continue
        owned = {b for b, owner in current.owners.items() if owner == task}
        lost = owned - state.data
        gained = state.data - owned if task != leader else set()
        if lost or gained:
            problems.append(
                f"surviving member {task!r} lost buckets {format_buckets(lost)} and gained {format_buckets(gained)}"
            )
    return problems


def _message(groups: dict[str, _Group], msg: pb.GroupTaskMessage) -> list[str]:
    """An accepted task message: only the sender's state changed, buckets moved only by hand-off, one owner each."""
    group = groups.get(msg.group)
    sender = msg.task_id
    if group is None or msg.epoch_id != group.epoch_id or sender not in group.states:
        return [f"task message of {sender!r} accepted outside the current epoch of group {msg.group!r}"]
    listed = {state.task_id: task_state_of(state) for state in msg.connector_state}
    problems = [
        f"task message of {sender!r} changed the state of {task!r}"
        for task, state in group.states.items()
        if task != sender and listed.get(task) != state
    ]
    new = listed.get(sender)
    if new is None:
        return [*problems, f"task message of {sender!r} holds no state of its own"]
    before = group.states
    after = {**before, sender: new}
    found = ownership(after.values())
    for b, owner in sorted(found[0].items()):
        taken = owner == sender and group.owners.get(b) != sender
        if taken and not any(state.share.get(b) == sender for state in before.values()):
            problems.append(f"bucket {b} moved to {sender!r} without being shared to it")
    problems.extend(_conflicts(found))
    group.states, group.owners = after, found[0]
    return problems


def _fence(groups: dict[str, _Group], kind: str, fence: pb.DecisionFence, refs: list[str]) -> list[str]:
    """An accepted fenced decision: the current epoch, a member, the owner of every partition's bucket."""
    group = groups.get(fence.group)
    task = fence.task_id
    if group is None or fence.epoch_id != group.epoch_id or task not in group.states:
        return [f"{kind} of {task!r} accepted outside the current epoch of group {fence.group!r}"]
    problems = []
    for ref in refs:
        b = bucket(group.namespace, ref, group.bucket_total)
        owner = group.owners.get(b)
        if owner != task:
            problems.append(f"{kind} of {task!r} names {ref!r} in bucket {b}, owned by {owner!r}")
    return problems
