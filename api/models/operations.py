"""Models of operations (`/healthz`, `/api/v1/buckets`, `/api/v1/counts`): health, bucket layouts and re-sharding
them, counts by state."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, Field

from partbuild.api.models.common import ID_PATTERN, JsonInt, StrictRequest
from partbuild.state.rules.bucketing import DEFAULT_NAMESPACE, MAX_BUCKETS


class ReshardRequest(StrictRequest):
    """Split a bucketing namespace's refs into a new number of buckets (workers on the old number stop)."""

    bucket_total: Annotated[int, Field(ge=1, le=MAX_BUCKETS), JsonInt] = Field(
        description="The namespace's new number of buckets."
    )
    namespace: str = Field(default=DEFAULT_NAMESPACE, pattern=ID_PATTERN, description="The bucketing namespace.")


class BucketLayoutOut(BaseModel):
    """How a bucketing namespace is split, and where round-robin workers stand in it."""

    namespace: str
    bucket_total: int = Field(description="Sharded decisions under another total are rejected.")
    since_seq: int = Field(description="The event that fixed this total.")
    last_round_robin_bucket: int | None = Field(description="The bucket the last round-robin run started.")


class OrchestratorHealthOut(BaseModel):
    """The orchestrator running in this process (`up`): "running", "restarting" (it failed and a new one starts
    after a backoff) or "stopped"; how many times it failed, and the last failure."""

    status: Literal["running", "restarting", "stopped"]
    failures: int
    last_error: str | None


class HealthOut(BaseModel):
    """ "degraded": the API answers, but the orchestrator beside it failed and is restarting."""

    status: Literal["ok", "degraded"]
    head_seq: int
    state_seq: int
    orchestrator: OrchestratorHealthOut | None = None


class WaitingOut(BaseModel):
    """Instances in one waiting state (missing, upstream_building, up_for_retry): the orchestrator moves them on
    only while an active want names their ref (state/queries/wanted.py)."""

    total: int
    wanted: int = Field(description="Named by an active (not yet terminal) want: directly, or by a derivative want.")
    unwanted: int = Field(
        description="Named by no active want (their wants expired or were canceled): nothing builds them until "
        "their refs are wanted again. Listed by `GET /partitions?unwanted=true`."
    )


class CountsOut(BaseModel):
    """How many wants, partition instances and job runs are in each state, as of `seq` (the overview's numbers)."""

    seq: int
    wants: dict[str, int]
    instances: dict[str, int]
    job_runs: dict[str, int]
    waiting: dict[str, WaitingOut] = Field(
        description="Per waiting instance state: how many instances an active want needs, and how many none does."
    )
