"""Models of partitions and instances (`/api/v1/partitions`, `/instances`): taint, observe, lineage, retention."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, Field

from partbuild.api.models.common import (
    MAX_COMMENT,
    InstanceStateName,
    JsonInt,
    NonNegative,
    Ref,
    StrictRequest,
    WrittenOut,
)
from partbuild.api.models.wants import MadeBy as MadeBy  # re-exported: the partitions list's `made_by` filter
from partbuild.state.rules.check_results import CheckResultName as CheckResultName  # re-exported: the field type
from partbuild.state.rules.refs import MAX_REF_BYTES

MAX_LINEAGE_DEPTH = 50
MAX_VERSION = 1_024  # an ETag, a content hash, size and mtime: short


class TaintRequest(StrictRequest):
    ref: Ref
    reason: str = Field(default="", max_length=MAX_COMMENT)
    only_this_ref: bool = Field(default=False, description="Do not taint Live partitions built from it.")


class SourceVersionRequest(StrictRequest):
    """The version of source data: strong when it identifies the bytes (an ETag, a content hash)."""

    value: str = Field(min_length=1, max_length=MAX_VERSION)
    strong: bool = False


class ObserveRequest(StrictRequest):
    """A source partition (one no job builds) became available."""

    ref: Ref
    location: str = Field(min_length=1, max_length=MAX_REF_BYTES)
    row_count: NonNegative = 0
    bytes: NonNegative = 0
    metadata: dict[Annotated[str, Field(max_length=256)], Annotated[str, Field(max_length=MAX_COMMENT)]] = Field(
        default_factory=dict, max_length=100
    )
    version: SourceVersionRequest | None = Field(
        default=None,
        description=(
            "The data's version as its source reports it. Observing a Live partition again with another "
            "version taints every Live partition built from it; with the same version it is a conflict."
        ),
    )


class RetentionRequest(StrictRequest):
    """Drop instances that stopped being canonical (were superseded) more than `retain_days` days ago."""

    retain_days: Annotated[int, Field(ge=0, le=1_000_000), JsonInt] = Field(
        description="Keep this many days of history: instances superseded since stay."
    )
    dry_run: bool = Field(default=False, description="Only report what would be dropped.")


class CheckResultOut(BaseModel):
    """One quality check's result on an instance, from the outcome recorded at `seq` (issue 24)."""

    name: str
    result: CheckResultName = Field(
        description="passed; warning (a non-blocking check failed); failed (a blocking one); errored (it raised)."
    )
    passed: bool
    blocking: bool = Field(description="A failed blocking check kept the instance from going Live.")
    errored: bool = Field(description="The check raised: an error of the check, never a pass.")
    description: str
    metrics: dict[str, float]
    seq: int
    duration_ms: int | None = Field(
        default=None, description="How long the check took (a share of one pass for checks computed together)."
    )


class ChecksRequestOut(BaseModel):
    """A request to run the instance's job's checks again (`POST /instances/{uuid}/checks`)."""

    request_id: str
    requested_seq: int
    answered_seq: int | None = Field(description="Where an orchestrator answered it (its results); null: pending.")


class ChecksRunRequest(StrictRequest):
    """Run a job's checks again on one of its Live instances."""

    comment: str = Field(default="", max_length=MAX_COMMENT)


class ChecksRequestedOut(WrittenOut):
    """A checks request recorded: an orchestrator runs the checks and records the results on the instance."""

    request_id: str
    instance_uuid: str
    link: str = Field(description="The instance: its `checks_requests` say when the request is answered.")


class SuccessorOut(BaseModel):
    """The instance being built (or failed, or blocked by a check) to replace a stale one that still serves."""

    uuid: str
    state: InstanceStateName
    note: str | None = Field(description="Why it failed or what it waits for, if it did.")
    waiting_on: list[str]


class InstanceOut(BaseModel):
    uuid: str
    ref: str
    state: InstanceStateName
    canonical: bool
    created_seq: int
    updated_seq: int
    superseded_seq: int | None
    previous_uuid: str | None
    built_by: str | None
    attempts: list[str]
    inputs: list[str]
    consumers: list[str]
    location: str | None
    row_count: int
    byte_count: int
    metadata: dict[str, str]
    waiting_on: list[str]
    note: str | None
    version: SourceVersionRequest | None = None
    checks: list[CheckResultOut] = Field(
        default_factory=list, description="The checks of the last run that checked it (empty: none did)."
    )
    checks_requests: list[ChecksRequestOut] = Field(
        default_factory=list,
        description="Requests to run its checks again, oldest first (shown by `GET /instances/{uuid}` only).",
    )
    code_version: str | None = Field(
        default=None,
        description="The code version of the job run that built it, as the log recorded it (null: source data, "
        "not built yet, or built before versions were recorded).",
    )
    stale: bool = Field(
        default=False,
        description="Live and out of date: an input got new data or its code changed, and a successor is being "
        "built while it keeps serving readers (`successor`); or built by a code version other than its job's in the "
        "graph served now (even as of an earlier seq: the version recorded is a fact of the log, the comparison is "
        "with the graph now; false without a served graph, for a job it no longer has, and for an unknown version).",
    )
    serving: bool = Field(
        default=False,
        description="Readers get this instance for its ref: its canonical Live instance, or a stale one that keeps "
        "serving until its successor goes Live.",
    )
    successor: SuccessorOut | None = Field(
        default=None,
        description="For a stale instance still serving: the canonical instance that will replace it once Live.",
    )


class LineageNodeOut(BaseModel):
    uuid: str
    ref: str | None = Field(description="None when retention dropped the instance.")
    state: InstanceStateName | None
    depth: int
    built_by: str | None
    check_result: CheckResultName | None = Field(
        default=None, description="The worst result of its checks (those of the last run that checked it); null: none."
    )
    superseded: bool = Field(
        default=False,
        description=(
            "A newer instance of its ref is canonical (as of the seq): a Live one is an older version, "
            "whose location may hold other data now (a source partition observed again)."
        ),
    )


class LineageEdgeOut(BaseModel):
    input: str
    output: str


class LineageOut(BaseModel):
    root: str
    as_of_seq: int
    nodes: list[LineageNodeOut]
    edges: list[LineageEdgeOut]


class RetentionReportOut(BaseModel):
    """What retention dropped (or, on a dry run, would drop)."""

    cutoff_seq: int = Field(description="Instances superseded (no longer canonical) before this seq go (1: none).")
    dropped: int
    instances: list[str] = Field(description="UUIDs of the first instances that go (at most 1,000).")
    seq: int | None = Field(description="Where the InstanceRetention event landed; null on a dry run or no-op.")
    dry_run: bool


class StaleOut(BaseModel):
    """A job's Live instances built by another code version than the served graph's, oldest partitions last."""

    job: str
    code_version: str = Field(description="The job's code version in the graph served now.")
    stale_count: int = Field(description="How many of its Live instances are stale (all of them, not only listed).")
    instances: list[InstanceOut] = Field(
        description="At most `limit` of them, refs in descending order (date-keyed partitions: newest first)."
    )
    as_of_seq: int
