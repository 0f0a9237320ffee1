"""What a group member decides about: the buckets it owns in the fold's current epoch.

The decider's one filter (`orchestrator.buckets.Scope`), for a worker group:
`GroupOwnership.at(state)` reads the group's record in the fold (its owners
map, `state.rules.group.GroupState.owners`) and answers "does this task own
bucket(namespace, ref, total)" for every ref; every decision it stamps carries
the fence (epoch, task) the fold checks against the same rule. A task that is
not a member of the current epoch (not joined yet, or declared dead) owns nothing.
"""

from __future__ import annotations

from collections.abc import Mapping

from google.protobuf.message import Message

from partbuild.orchestrator.reactor import ReactionScope
from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.fold.build_state import BuildState
from partbuild.state.fold.records import JobRun
from partbuild.state.rules.bucketing import bucket
from partbuild.state.rules.group import fence

# Payloads that carry a fence (state/fold: JobRunBuffer, JobRunFailure, InstancesWaitUpstream, WantCreate).
_FENCED = (pb.JobRunBuffer, pb.JobRunFailure, pb.InstancesWaitUpstream, pb.WantCreate)


class GroupOwnership:
    """One task's ownership in one group, re-read from the fold at each decision (`at`)."""

    def __init__(self, group: str, task_id: str) -> None:
        self.group = group
        self.task_id = task_id
        self.run_tag = f"t{task_id.rsplit(':', 1)[-1]}"  # the per-start token: distinct ids per worker
        self._buckets: dict[str, int] = {}  # ref -> its bucket (the layout is fixed for a group's life)
        self._layout: tuple[str, int] | None = None

    def at(self, state: BuildState) -> GroupScope:
        """This task's scope at `state`: the buckets it owns there and the fence of its decisions."""
        group = state.groups.get(self.group)
        if group is None or self.task_id not in group.states:
            return GroupScope(self, {}, None)
        if self._layout != (group.namespace, group.bucket_total):
            self._layout = (group.namespace, group.bucket_total)
            self._buckets.clear()
        return GroupScope(self, group.owners, fence(group, self.task_id))

    def bucket_of(self, ref: str) -> int:
        """The bucket of `ref` in the group's layout (remembered: refs are decided about again and again)."""
        found = self._buckets.get(ref)
        if found is None:
            assert self._layout is not None  # set by `at` before any question about a ref
            namespace, total = self._layout
            found = self._buckets[ref] = bucket(namespace, ref, total)
        return found


class GroupScope:
    """The scope of one decision round: owners as of one state, and the fence to stamp."""

    def __init__(self, ownership: GroupOwnership, owners: Mapping[int, str], fence: pb.DecisionFence | None) -> None:
        self._ownership = ownership
        self._owners = owners
        self._fence = fence
        self.run_tag = ownership.run_tag

    def owns(self, ref: str) -> bool:
        if self._fence is None:
            return False
        return self._owners.get(self._ownership.bucket_of(ref)) == self._ownership.task_id

    def owns_run(self, state: BuildState, run: JobRun) -> bool:
        """Every partition of the run is ours: the fold accepts our failure of it only then."""
        return all(self.owns(state.instances[uuid].ref) for uuid in run.instance_uuids)

    def batch_key(self, ref: str) -> int:
        return self._ownership.bucket_of(ref)

    def reaction_scope(self) -> ReactionScope:
        """A cursor per bucket it owns: a bucket handed on is read by its new owner from that bucket's cursor."""
        ownership = self._ownership
        layout = ownership._layout
        total = layout[1] if layout is not None else 0
        prefix = f"group {ownership.group} "
        mine = sorted(bucket for bucket, task in self._owners.items() if task == ownership.task_id)
        keys = tuple(f"{prefix}{bucket}/{total}" for bucket in mine) if self._fence is not None else ()
        return ReactionScope(keys, lambda ref: f"{prefix}{ownership.bucket_of(ref)}/{total}", self.owns)

    def stamp(self, payload: Message) -> None:
        """Fenced decisions carry (group, epoch, task); the fold judges them against the owners."""
        if self._fence is not None and isinstance(payload, _FENCED):
            payload.fence.CopyFrom(self._fence)
