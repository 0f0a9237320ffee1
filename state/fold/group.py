"""Worker groups in the fold: GroupEpoch, GroupTaskMessage, and the fences on members' decisions.

`BuildState.groups` holds each group's current epoch, every member's state and
the owner of each bucket (`partbuild.state.rules.group.GroupState`), replaced as a
whole by every accepted group event, so the ownership at any seq is the state
as of that seq. The rules themselves (who owns a bucket, which epochs and which
steps are legal) are the pure functions of `partbuild.state.rules.group`; this module
checks the messages' identity and shape and applies the plan.

- A GroupEpoch is accepted only if it is built on the group's current epoch
  (a stale leader's is not), keeps the namespace and bucket count fixed by the
  group's first epoch, and its initial states follow `epoch_problem`.
- A GroupTaskMessage is accepted only under the current epoch, from a member,
  with every member's state listed once, every other state exactly as the fold
  holds it, and the sender's change a legal `step_problem` step.
- A decision carrying a `DecisionFence` is accepted only under the current
  epoch, from a member that owns the bucket of every partition it decides about
  (derivative wants: membership suffices).
- A group's namespace belongs to it: its first epoch fixes
  `bucket_layouts[namespace]` (so it must agree with a layout already there),
  another group cannot use it, static bucket scopes in it are rejected and so is
  a `BucketLayout` changing its bucket count.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import TYPE_CHECKING

from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.fold.records import Instance
from partbuild.state.fold.validation import id_problem, short
from partbuild.state.rules.bucketing import bucket
from partbuild.state.rules.group import (
    MAX_GROUP_BUCKETS,
    GroupState,
    TaskState,
    epoch_problem,
    owners_of,
    step_problem,
    task_state_of,
)

if TYPE_CHECKING:
    from partbuild.state.fold.build_state import BuildState

# (the group's new record, whether it fixes its namespace's bucket layout)
EpochPlan = tuple[GroupState, bool]


def namespace_group(state: BuildState, namespace: str) -> GroupState | None:
    """The group that shares `namespace`, if any (there are few groups: a scan is cheap)."""
    for group in state.groups.values():
        if group.namespace == namespace:
            return group
    return None


def _writer_problem(event: pb.Event, task_id: str, what: str) -> str | None:
    """A worker speaks only for itself: when the event's source names a worker, it must be `task_id`."""
    worker = event.source.system.worker
    if worker and worker != task_id:
        return f"{what} {short(task_id)} is written by worker {short(worker)}: a task speaks only for itself"
    return None


def _state_shape_problem(msg: pb.GroupTaskState, bucket_total: int, members: frozenset[str]) -> str | None:
    """What is wrong with one task state's form: timestamp, data strictly ascending in range, share in data."""
    task = msg.task_id
    if msg.state_timestamp_ms < 0:
        return f"state of {short(task)} has a negative state_timestamp_ms"
    data = msg.data
    for index in range(1, len(data)):
        if data[index] <= data[index - 1]:
            return f"data of {short(task)} is not strictly ascending at bucket {data[index]}"
    if data and (data[0] < 1 or data[-1] > bucket_total):
        wrong = data[0] if data[0] < 1 else data[-1]
        return f"data of {short(task)} names bucket {wrong}, not between 1 and bucket_total {bucket_total}"
    held = frozenset(data) if msg.share else frozenset()
    for shared, target in sorted(msg.share.items()):
        if shared not in held:
            return f"{short(task)} shares bucket {shared}, which is not in its data"
        if target == task:
            return f"{short(task)} shares bucket {shared} with itself"
        if target not in members:
            return f"{short(task)} shares bucket {shared} with {short(target)}, which is not a member"
    return None


def _states_of(
    connector_state: Iterable[pb.GroupTaskState], members: tuple[str, ...], bucket_total: int
) -> dict[str, TaskState] | str:
    """Exactly one well-formed state per member, in member order; or what is wrong."""
    allowed = frozenset(members)
    found: dict[str, pb.GroupTaskState] = {}
    for msg in connector_state:
        task = msg.task_id
        if task not in allowed:
            return f"connector_state holds a state for {short(task)}, which is not a member"
        if task in found:
            return f"connector_state holds two states for {short(task)}"
        problem = _state_shape_problem(msg, bucket_total, allowed)
        if problem:
            return problem
        found[task] = msg
    for task in members:
        if task not in found:
            return f"connector_state has no state for member {short(task)}"
    return {task: task_state_of(found[task]) for task in members}


# ----------------------------------------------------------------- GroupEpoch


def _members_problem(msg: pb.GroupEpoch) -> str | None:
    """Members: non-empty, valid ids, unique, the leader among them."""
    members = msg.members
    if not members:
        return "epoch lists no members"
    seen: set[str] = set()
    for task in members:
        problem = id_problem("member task id", task)
        if problem:
            return problem
        if task in seen:
            return f"member {short(task)} is listed more than once"
        seen.add(task)
    if msg.leader_task_id not in members:
        return f"leader {short(msg.leader_task_id)} is not a member"
    return None


def _first_epoch_problem(state: BuildState, msg: pb.GroupEpoch) -> str | None:
    """A new group: its namespace and bucket count, which must agree with the namespace's layout and groups."""
    if msg.previous_epoch_id:
        return f"group {short(msg.group)} has no epoch yet; its first cannot follow {short(msg.previous_epoch_id)}"
    problem = id_problem("bucket namespace", msg.namespace)
    if problem:
        return problem
    total = msg.bucket_total
    if not 1 <= total <= MAX_GROUP_BUCKETS:
        return f"bucket_total {total} is not between 1 and {MAX_GROUP_BUCKETS}"
    other = namespace_group(state, msg.namespace)
    if other is not None:
        return f"namespace {msg.namespace!r} is already shared by worker group {short(other.name)}"
    layout = state.bucket_layouts.get(msg.namespace)
    if layout is not None and layout[0] != total:
        return (
            f"namespace {msg.namespace!r} is split into {layout[0]} buckets (since seq {layout[1]}); "
            f"a group over it must use {layout[0]} too, or re-shard it first"
        )
    return None


def _next_epoch_problem(current: GroupState, msg: pb.GroupEpoch) -> str | None:
    """A following epoch: built on the current one, a fresh id, the group's namespace and bucket count."""
    if msg.previous_epoch_id != current.epoch_id:
        return (
            f"epoch {short(msg.epoch_id)} of group {short(current.name)} is built on epoch "
            f"{short(msg.previous_epoch_id)}, but the current epoch is {short(current.epoch_id)} "
            f"(since seq {current.epoch_seq}): a stale leader's epoch"
        )
    if msg.epoch_id in current.epoch_ids:
        return f"epoch id {short(msg.epoch_id)} was already used by group {short(current.name)}"
    if msg.namespace != current.namespace or msg.bucket_total != current.bucket_total:
        return (
            f"group {short(current.name)} works on namespace {current.namespace!r} in {current.bucket_total} "
            f"buckets, fixed by its first epoch; this epoch names {msg.namespace!r} in {msg.bucket_total}"
        )
    return None


def check_group_epoch(state: BuildState, seq: int, msg: pb.GroupEpoch, event: pb.Event) -> str | EpochPlan:
    """A leader's new epoch; the plan is the group's new record."""
    problem = id_problem("group", msg.group) or id_problem("epoch_id", msg.epoch_id)
    if problem:
        return problem
    current = state.groups.get(msg.group)
    problem = _first_epoch_problem(state, msg) if current is None else _next_epoch_problem(current, msg)
    if problem:
        return problem
    if msg.message_timestamp_ms < 0:
        return "message_timestamp_ms is negative"
    problem = _members_problem(msg) or _writer_problem(event, msg.leader_task_id, "leader")
    if problem:
        return problem
    members = tuple(msg.members)
    states = _states_of(msg.connector_state, members, msg.bucket_total)
    if isinstance(states, str):
        return states
    previous = current.states if current is not None else None
    problem = epoch_problem(previous, msg.leader_task_id, msg.bucket_total, states)
    if problem:
        return problem
    new = GroupState(
        name=msg.group,
        created_seq=current.created_seq if current is not None else seq,
        namespace=msg.namespace,
        bucket_total=msg.bucket_total,
        epoch_id=msg.epoch_id,
        epoch_seq=seq,
        leader=msg.leader_task_id,
        members=members,
        states=states,
        owners=owners_of(states.values()),
        state_seqs=dict.fromkeys(members, seq),
        epoch_ids=(current.epoch_ids if current is not None else frozenset()) | {msg.epoch_id},
        epochs=(current.epochs if current is not None else 0) + 1,
        fences_runs_since=_fences_runs_since(current, seq, msg.fences_removed_runs),
    )
    return new, msg.namespace not in state.bucket_layouts


def _fences_runs_since(current: GroupState | None, seq: int, fences: bool) -> int:
    """Since when the group fences off removed members' runs: the first epoch that asked, for good."""
    since = current.fences_runs_since if current is not None else 0
    return since or (seq if fences else 0)


def apply_group_epoch(state: BuildState, seq: int, plan: EpochPlan, event: pb.Event) -> None:
    """The new epoch replaces the group's record; a new group fixes its namespace's layout."""
    group, fixes_layout = plan
    state.groups[group.name] = group
    if fixes_layout:
        state.bucket_layouts[group.namespace] = (group.bucket_total, seq)


# ----------------------------------------------------------------- GroupTaskMessage


def _current_member(state: BuildState, group_name: str, epoch_id: str, task_id: str) -> GroupState | str:
    """The group, if `epoch_id` is its current epoch and `task_id` a member of it; or why not."""
    group = state.groups.get(group_name)
    if group is None:
        return f"group {short(group_name)} has no epoch"
    if epoch_id != group.epoch_id:
        known = "an old epoch" if epoch_id in group.epoch_ids else "not an epoch"
        return (
            f"epoch {short(epoch_id)} is {known} of group {short(group_name)}; the current one is "
            f"{short(group.epoch_id)} (since seq {group.epoch_seq})"
        )
    if task_id not in group.states:
        return f"task {short(task_id)} is not a member of group {short(group_name)} in epoch {short(epoch_id)}"
    return group


def _others_problem(group: GroupState, sender: str, states: dict[str, TaskState]) -> str | None:
    """Every state but the sender's must be exactly the fold's: a message changes only its sender's state."""
    for task, listed in states.items():
        held = group.states[task]
        if task == sender or listed == held:
            continue
        if listed.data != held.data:
            what = "data"
        elif listed.share != held.share:
            what = "share section"
        else:
            what = "state timestamp"
        return (
            f"task {short(sender)} changes the {what} of {short(task)} (its state since seq "
            f"{group.state_seqs[task]}): a message changes only its sender's state"
        )
    return None


def check_group_task_message(
    state: BuildState, seq: int, msg: pb.GroupTaskMessage, event: pb.Event
) -> str | GroupState:
    """A task's incremental message; the plan is the group's new record."""
    sender = msg.task_id
    group = _current_member(state, msg.group, msg.epoch_id, sender)
    if isinstance(group, str):
        return group
    problem = _writer_problem(event, sender, "task")
    if problem:
        return problem
    if msg.message_timestamp_ms < 0:
        return "message_timestamp_ms is negative"
    states = _states_of(msg.connector_state, group.members, group.bucket_total)
    if isinstance(states, str):
        return states
    problem = _others_problem(group, sender, states) or step_problem(group.states, sender, states[sender])
    if problem:
        return problem
    return dataclasses.replace(
        group,
        states=states,
        owners=owners_of(states.values()),
        state_seqs={**group.state_seqs, sender: seq},
    )


def apply_group_task_message(state: BuildState, seq: int, plan: GroupState, event: pb.Event) -> None:
    """The sender's new state (the whole record, with the owners it implies) replaces the group's."""
    state.groups[plan.name] = plan


# ----------------------------------------------------------------- fences


def fence_problem(state: BuildState, fence: pb.DecisionFence, event: pb.Event) -> GroupState | str:
    """The group of a fenced decision, if it is made under the current epoch by a member; or why not."""
    found = _current_member(state, fence.group, fence.epoch_id, fence.task_id)
    if isinstance(found, str):
        return f"fenced decision: {found}"
    problem = _writer_problem(event, fence.task_id, "fenced decision of task")
    return problem or found


def fenced_decision_problem(
    state: BuildState, fence: pb.DecisionFence, event: pb.Event, instances: Iterable[Instance]
) -> str | None:
    """Why a fenced decision about `instances` is not its task's to make at this point of the log, or None."""
    group = fence_problem(state, fence, event)
    if isinstance(group, str):
        return group
    task, namespace, total, owners = fence.task_id, group.namespace, group.bucket_total, group.owners
    for instance in instances:
        found = bucket(namespace, instance.ref, total)
        owner = owners.get(found)
        if owner != task:
            held = f"owned by {short(owner)}" if owner else "owned by nobody (being handed off)"
            return (
                f"fenced decision: task {short(task)} does not own bucket {found} of group {short(group.name)} "
                f"({held}), the bucket of instance {instance.uuid} of {short(instance.ref)}"
            )
    return None


def fenced_member_problem(state: BuildState, fence: pb.DecisionFence, event: pb.Event) -> str | None:
    """Why a fenced decision that needs only membership (a derivative want) is refused, or None."""
    group = fence_problem(state, fence, event)
    return group if isinstance(group, str) else None


def removed_runner(state: BuildState, job_run_id: str) -> tuple[GroupState, str] | None:
    """(its group, the task) if an active run's group member was removed by an epoch that fences off removed
    members' runs; None for every other run."""
    fenced = state.run_fences.get(job_run_id) if state.run_fences else None
    if fenced is None:
        return None
    group_name, task = fenced
    group = state.groups[group_name]
    return (group, task) if group.fences_off(task) else None


def removed_runner_problem(state: BuildState, job_run_id: str) -> str | None:
    """Why an event of an active run's own (a heartbeat, an unfenced outcome) is refused: the group member that
    buffered it was removed (`removed_runner`). None if it was not."""
    removed = removed_runner(state, job_run_id)
    if removed is None:
        return None
    group, task = removed
    group_name = group.name
    return (
        f"job run {short(job_run_id)} was buffered by task {short(task)}, which is no longer a member of group "
        f"{short(group_name)} (epoch {short(group.epoch_id)} since seq {group.epoch_seq}): its runs are fenced "
        "off, only the owner of their buckets may fail them"
    )


# ----------------------------------------------------------------- fence rejections, for operators

FENCE_REJECTION_PREFIX = "fenced decision"  # every reason above that refuses a fenced decision starts so
FENCE_REJECTION_KINDS = ("no_group", "old_epoch", "unknown_epoch", "not_member", "not_owner", "wrong_writer")


def fence_rejection_kind(reason: str) -> str | None:
    """Which fence rule a rejection reason names (one of FENCE_REJECTION_KINDS); None for other rejections."""
    if not reason.startswith(FENCE_REJECTION_PREFIX):
        return None
    if reason.startswith(f"{FENCE_REJECTION_PREFIX} of task "):
        return "wrong_writer"
    rest = reason.removeprefix(f"{FENCE_REJECTION_PREFIX}: ")
    if rest.startswith("group "):
        return "no_group"
    if rest.startswith("epoch "):
        return "old_epoch" if " is an old epoch of group " in rest else "unknown_epoch"
    return "not_owner" if " does not own bucket " in rest else "not_member"
