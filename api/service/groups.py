"""Worker groups: the fold's `GroupState` as of a seq, with the heartbeat rows read now.

Ownership comes from the fold, so it is answerable as of any seq; heartbeats live
in the `group_members` table (not the log) and are only ever "now".
"""

from __future__ import annotations

from collections.abc import Iterable

from partbuild.api.errors import InvalidInput, NotFound
from partbuild.api.models.groups import (
    MAX_MEMBER_TIMEOUT_S,
    GroupEpochOut,
    GroupMemberOut,
    GroupOut,
    GroupShareOut,
    GroupSummaryOut,
    HeartbeatRowOut,
    MemberHeartbeatOut,
    PendingBucketOut,
)
from partbuild.api.service.base import ServiceBase
from partbuild.state.ops.members import Member
from partbuild.state.rules.group import GroupState


class GroupsService(ServiceBase):
    """Reads of worker groups."""

    def groups(self, as_of_seq: int | None = None, min_seq: int | None = None) -> list[GroupSummaryOut]:
        with self._reading(min_seq, as_of_seq) as state:
            return [summary_out(state.groups[name]) for name in sorted(state.groups)]

    def group(
        self,
        name: str,
        member_timeout_s: float = 10,
        as_of_seq: int | None = None,
        min_seq: int | None = None,
    ) -> GroupOut:
        """The group's ownership as of a seq (the fold's), its heartbeat rows as of now (the table's)."""
        if not 0 < member_timeout_s <= MAX_MEMBER_TIMEOUT_S:
            raise InvalidInput(f"member_timeout_s must be > 0 and at most {MAX_MEMBER_TIMEOUT_S}")
        with self._reading(min_seq, as_of_seq) as state:
            found = state.groups.get(name)
            seq = state.head_seq
        if found is None:
            suffix = f" as of seq {as_of_seq}" if as_of_seq is not None else ""
            raise NotFound(f"no worker group {name!r}{suffix}")
        rows = self.db.members.members(name)
        return group_out(found, seq, rows, self.clock(), member_timeout_s)


# ----------------------------------------------------------------- records -> models


def epoch_out(group: GroupState) -> GroupEpochOut:
    return GroupEpochOut(epoch_id=group.epoch_id, number=group.epochs, seq=group.epoch_seq)


def pending_buckets(group: GroupState) -> list[PendingBucketOut]:
    """Buckets without an owner, each with the hand-off that holds it (a valid log has no other kind)."""
    handing: dict[int, tuple[str, str]] = {}
    for task in group.members:
        for bucket, target in group.states[task].share.items():
            if bucket not in group.owners:
                handing[bucket] = (task, target)
    pending = []
    for bucket in range(1, group.bucket_total + 1):
        if bucket in group.owners:
            continue
        sharer, receiver = handing.get(bucket, (None, None))
        pending.append(PendingBucketOut(bucket=bucket, from_task=sharer, to_task=receiver))
    return pending


def summary_out(group: GroupState) -> GroupSummaryOut:
    return GroupSummaryOut(
        name=group.name,
        namespace=group.namespace,
        bucket_total=group.bucket_total,
        epoch=epoch_out(group),
        leader_task_id=group.leader,
        members=len(group.members),
        buckets_without_owner=group.bucket_total - len(group.owners),
    )


def heartbeat_out(row: Member, now_ms: int, timeout_ms: float) -> MemberHeartbeatOut:
    age = now_ms - row.last_heartbeat_ms
    return MemberHeartbeatOut(
        host=row.host,
        pid=row.pid,
        started_ms=row.started_ms,
        last_heartbeat_ms=row.last_heartbeat_ms,
        age_ms=age,
        live=age <= timeout_ms,
    )


def _member_out(group: GroupState, task: str, heartbeat: MemberHeartbeatOut | None) -> GroupMemberOut:
    state = group.states[task]
    owned = group.owned_by(task)
    return GroupMemberOut(
        task_id=task,
        leader=task == group.leader,
        owned=owned,
        data=sorted(state.data),
        share=[
            GroupShareOut(bucket=bucket, target=target, picked_up=bucket in group.states[target].data)
            for bucket, target in sorted(state.share.items())
        ],
        load=len(owned),
        state_timestamp_ms=state.state_timestamp_ms,
        state_seq=group.state_seqs[task],
        heartbeat=heartbeat,
    )


def group_out(
    group: GroupState, as_of_seq: int, rows: Iterable[Member], now_ms: int, member_timeout_s: float
) -> GroupOut:
    """The group at `as_of_seq`, its members' heartbeat rows (read now) judged against the timeout."""
    timeout_ms = member_timeout_s * 1000
    beats = {row.task_id: heartbeat_out(row, now_ms, timeout_ms) for row in rows}
    others = [HeartbeatRowOut(task_id=task, heartbeat=beat) for task, beat in beats.items() if task not in group.states]
    return GroupOut(
        name=group.name,
        namespace=group.namespace,
        bucket_total=group.bucket_total,
        created_seq=group.created_seq,
        as_of_seq=as_of_seq,
        epoch=epoch_out(group),
        leader_task_id=group.leader,
        members=[_member_out(group, task, beats.get(task)) for task in group.members],
        buckets_without_owner=pending_buckets(group),
        other_heartbeats=others,
        now_ms=now_ms,
        member_timeout_s=member_timeout_s,
    )
