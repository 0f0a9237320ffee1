"""Models of worker groups (`/api/v1/groups`, `/api/v1/group/{name}`): epochs, members, buckets, heartbeats."""

from __future__ import annotations

from pydantic import BaseModel, Field

MAX_MEMBER_TIMEOUT_S = 86_400


class GroupEpochOut(BaseModel):
    """A worker group's current epoch (started by its leader's GroupEpoch event)."""

    epoch_id: str
    number: int = Field(description="1 for the group's first epoch, 2 for the next, ...")
    seq: int = Field(description="The seq of the GroupEpoch event that started it.")


class GroupShareOut(BaseModel):
    """A bucket in a member's share section: being handed to `target`."""

    bucket: int
    target: str = Field(description="The member it is handed to.")
    picked_up: bool = Field(description="Whether the target holds it already (it is the target's then).")


class MemberHeartbeatOut(BaseModel):
    """A member's row in the heartbeat table, read now: heartbeats are never answered as of a past seq."""

    host: str
    pid: int
    started_ms: int
    last_heartbeat_ms: int
    age_ms: int = Field(description="How long ago its last heartbeat was, at `now_ms` of the answer.")
    live: bool = Field(description="Its last heartbeat is at most `member_timeout_s` old.")


class GroupMemberOut(BaseModel):
    """One member of the epoch: its state as the fold holds it, and its heartbeat row now."""

    task_id: str
    leader: bool
    owned: list[int] = Field(description="Buckets it owns: holds and is not handing off. Only it may build them.")
    data: list[int] = Field(description="Buckets it holds (owned ones and those in its share section).")
    share: list[GroupShareOut] = Field(description="Its share section: bucket -> target.")
    load: int = Field(description="How many buckets it owns.")
    state_timestamp_ms: int
    state_seq: int = Field(description="The seq of the event that last set its state.")
    heartbeat: MemberHeartbeatOut | None = Field(
        description="Its heartbeat row now (not as of `as_of_seq`); null when it has none (it left or was reaped)."
    )


class PendingBucketOut(BaseModel):
    """A bucket without an owner: shared and not picked up yet (nobody may build it meanwhile)."""

    bucket: int
    from_task: str | None = Field(description="The member handing it off.")
    to_task: str | None = Field(description="The member it is addressed to.")


class HeartbeatRowOut(BaseModel):
    """A heartbeat row of a task that is not a member of the epoch (joined since, or dead and not reaped)."""

    task_id: str
    heartbeat: MemberHeartbeatOut


class GroupSummaryOut(BaseModel):
    """A worker group in a listing."""

    name: str
    namespace: str
    bucket_total: int
    epoch: GroupEpochOut
    leader_task_id: str
    members: int = Field(description="Members of the current epoch.")
    buckets_without_owner: int = Field(description="Buckets being handed off (shared, not picked up yet).")


class GroupOut(BaseModel):
    """A worker group as of a seq: its epoch, leader, members with what they own, and heartbeats now."""

    name: str
    namespace: str
    bucket_total: int
    created_seq: int = Field(description="The seq of its first epoch.")
    as_of_seq: int = Field(description="The seq the ownership is answered at.")
    epoch: GroupEpochOut
    leader_task_id: str
    members: list[GroupMemberOut]
    buckets_without_owner: list[PendingBucketOut] = Field(description="Pending hand-offs, by bucket.")
    other_heartbeats: list[HeartbeatRowOut] = Field(
        description="Heartbeat rows now of tasks that are not members of this epoch."
    )
    now_ms: int = Field(description="The clock reading heartbeats were judged at.")
    member_timeout_s: float
