"""Worker groups as the API shows them: the fold's `GroupState` at a seq, with the heartbeat rows read now.

Ownership comes from the fold, so it is answerable as of any seq; heartbeats live
in the `group_members` table (not the log) and are only ever "now".
"""

from __future__ import annotations

from collections.abc import Iterable

from partbuild.api import models as m
from partbuild.state.ops.members import Member
from partbuild.state.rules.group import GroupState


def epoch_out(group: GroupState) -> m.GroupEpochInfo:
    return m.GroupEpochInfo(epoch_id=group.epoch_id, number=group.epochs, seq=group.epoch_seq)


def pending_buckets(group: GroupState) -> list[m.PendingBucket]:
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
        sharer, target = handing.get(bucket, (None, None))
        pending.append(m.PendingBucket(bucket=bucket, from_task=sharer, to_task=target))
    return pending


def summary_out(group: GroupState) -> m.GroupSummary:
    return m.GroupSummary(
        name=group.name,
        namespace=group.namespace,
        bucket_total=group.bucket_total,
        epoch=epoch_out(group),
        leader_task_id=group.leader,
        members=len(group.members),
        buckets_without_owner=group.bucket_total - len(group.owners),
    )


def heartbeat_out(row: Member, now_ms: int, timeout_ms: float) -> m.MemberHeartbeat:
    age = now_ms - row.last_heartbeat_ms
    return m.MemberHeartbeat(
        host=row.host,
        pid=row.pid,
        started_ms=row.started_ms,
        last_heartbeat_ms=row.last_heartbeat_ms,
        age_ms=age,
        live=age <= timeout_ms,
    )


def _member_out(group: GroupState, task: str, heartbeat: m.MemberHeartbeat | None) -> m.GroupMember:
    state = group.states[task]
    owned = group.owned_by(task)
    return m.GroupMember(
        task_id=task,
        leader=task == group.leader,
        owned=owned,
        data=sorted(state.data),
        share=[
            m.GroupShare(bucket=bucket, target=target, picked_up=bucket in group.states[target].data)
            for bucket, target in sorted(state.share.items())
        ],
        load=len(owned),
        state_timestamp_ms=state.state_timestamp_ms,
        state_seq=group.state_seqs[task],
        heartbeat=heartbeat,
    )


def group_out(
    group: GroupState, as_of_seq: int, rows: Iterable[Member], now_ms: int, member_timeout_s: float
) -> m.Group:
    """The group at `as_of_seq`, its members' heartbeat rows (read now) judged against the timeout."""
    timeout_ms = member_timeout_s * 1000
    beats = {row.task_id: heartbeat_out(row, now_ms, timeout_ms) for row in rows}
    others = [m.HeartbeatRow(task_id=task, heartbeat=beat) for task, beat in beats.items() if task not in group.states]
    return m.Group(
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
