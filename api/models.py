"""Request and response models of the HTTP API and the CLI (never the protobuf classes)."""

from __future__ import annotations

import re
from typing import Annotated, Any, Generic, Literal, TypeVar

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field

from partbuild.state.rules.bucketing import DEFAULT_NAMESPACE, MAX_BUCKETS
from partbuild.state.rules.refs import CONTROL_CHARACTERS, MAX_REF_BYTES, ref_problem

MAX_BATCH_REFS = 10_000
MAX_PAGE = 1_000
MAX_LINEAGE_DEPTH = 50
MAX_COMMENT = 2_000
MAX_VERSION = 1_024  # an ETag, a content hash, size and mtime: short
ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:@+-]{0,255}$"  # no slash: ids are path segments
# Words that follow /wants/ in a route of their own: a want with such an id could never be read at
# /wants/{want_id} (a fixed path wins over a templated one, in the document and in the server).
RESERVED_WANT_IDS = ("batch",)
# What `ref_problem` refuses, as the document states it (its byte limit aside: JSON Schema counts characters).
REF_PATTERN = f"^[^{CONTROL_CHARACTERS}]*$"
# JSON numbers are doubles: above 2^53 - 1 a bound in the document is not the number the server
# compares with (4611686018427387999 reads as 2^62), so every integer bound stays within it.
MAX_SAFE_INT = 2**53 - 1
_DECIMAL = re.compile(r"-?[0-9]+")
# A JSON number as text (what a client's str() of a float gives too: "2.5", "1e-05"); no "inf", "nan", "0x1".
_NUMBER = re.compile(r"-?[0-9]+(\.[0-9]+)?([eE][+-]?[0-9]+)?")
MAX_MEMBER_TIMEOUT_S = 86_400


def _valid_ref(ref: str) -> str:
    problem = ref_problem(ref)
    if problem:
        raise ValueError(problem)
    return ref


def _unreserved(want_id: str) -> str:
    if want_id in RESERVED_WANT_IDS:
        raise ValueError(f"want id {want_id!r} is reserved: /wants/{want_id} is a route of its own")
    return want_id


def _json_int(value: Any) -> Any:
    """An integral JSON number is an integer (JSON Schema: 10.0 is one); strings and booleans stay refused."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


# After the bounds, so they stay on the integer and the document states them as minimum/maximum.
JsonInt = BeforeValidator(_json_int)
Ref = Annotated[
    str,
    # The pattern is documented only: `_valid_ref` enforces the same rule with a message that says where.
    Field(
        min_length=1,
        max_length=MAX_REF_BYTES,
        examples=["agg/daily_clicks/date=2026-01-01"],
        json_schema_extra={"pattern": REF_PATTERN},
    ),
    AfterValidator(_valid_ref),
]
WantId = Annotated[
    str,
    Field(
        pattern=ID_PATTERN,
        examples=["backfill-2026-01"],
        json_schema_extra={"not": {"enum": list(RESERVED_WANT_IDS)}},
    ),
    AfterValidator(_unreserved),
]
NonNegative = Annotated[int, Field(ge=0, le=MAX_SAFE_INT), JsonInt]


def _query_int(value: Any) -> Any:
    """A query string holding an integer is its digits: "5.0", "1e3" and "true" are not integers."""
    if isinstance(value, bool):
        raise ValueError("expected an integer, not a boolean")
    if isinstance(value, str):
        if not _DECIMAL.fullmatch(value):
            raise ValueError(f"{value[:40]!r} is not an integer")
        return int(value)
    return value


def _query_float(value: Any) -> Any:
    """A query string holding a number is a JSON number: "inf", "nan", " 5", "1_0" and "true" are not."""
    if isinstance(value, bool):
        raise ValueError("expected a number, not a boolean")
    if isinstance(value, str):
        if not _NUMBER.fullmatch(value):
            raise ValueError(f"{value[:40]!r} is not a number")
        return float(value)
    return value


def _query_bool(value: Any) -> Any:
    """A query flag is `true` or `false`: "1", "yes" and "on" are not booleans in the document's terms."""
    if isinstance(value, str):
        if value not in ("true", "false"):
            raise ValueError(f"{value[:40]!r} is not true or false")
        return value == "true"
    return value


# Query parameters arrive as text: parsed strictly, so what the document calls an integer is one.
QueryInt = Annotated[int, BeforeValidator(_query_int)]
QueryBool = Annotated[bool, BeforeValidator(_query_bool)]
QueryFloat = Annotated[float, BeforeValidator(_query_float)]

InstanceStateName = Literal[
    "missing", "building", "upstream_building", "up_for_retry", "live", "failed", "upstream_failed", "tainted"
]
WantStateName = Literal[
    "idle", "building", "upstream_building", "successful", "failed", "upstream_failed", "canceled", "expired"
]
JobRunStateName = Literal["queued", "running", "succeeded", "failed", "dep_miss", "canceled"]

T = TypeVar("T")


class _Request(BaseModel):
    # Strict: "10" is not an integer and true is not a number (10.0 is: see JsonInt); unknown fields are refused.
    model_config = ConfigDict(extra="forbid", strict=True)


# ----------------------------------------------------------------- requests


class WantRequest(_Request):
    """Ask for partitions to be built (one want, one or more refs)."""

    # No max_length here: the service counts a request's refs in all and answers 413 over MAX_BATCH_REFS.
    # uniqueItems is documented only: the service names the refs given twice.
    refs: list[Ref] = Field(min_length=1, json_schema_extra={"uniqueItems": True})
    want_id: WantId | None = Field(default=None, description="Default: a new random id.")
    data_timestamp_ms: NonNegative | None = Field(default=None, description="Default: now.")
    ttl_seconds: NonNegative = Field(default=0, description="Give up after data_timestamp + ttl; 0 never.")
    sla_seconds: NonNegative = Field(default=0, description="Expected Live by data_timestamp + sla; 0 none.")
    comment: str = Field(default="", max_length=MAX_COMMENT)


class WantBatchRequest(_Request):
    """Many wants in one append (backfills): at most 10,000 refs in all."""

    wants: list[WantRequest] = Field(min_length=1)


class CancelRequest(_Request):
    reason: str = Field(default="", max_length=MAX_COMMENT)


class TaintRequest(_Request):
    ref: Ref
    reason: str = Field(default="", max_length=MAX_COMMENT)
    only_this_ref: bool = Field(default=False, description="Do not taint Live partitions built from it.")


class SourceVersion(_Request):
    """The version of source data: strong when it identifies the bytes (an ETag, a content hash)."""

    value: str = Field(min_length=1, max_length=MAX_VERSION)
    strong: bool = False


class ObserveRequest(_Request):
    """A source partition (one no job builds) became available."""

    ref: Ref
    location: str = Field(min_length=1, max_length=MAX_REF_BYTES)
    row_count: NonNegative = 0
    bytes: NonNegative = 0
    metadata: dict[Annotated[str, Field(max_length=256)], Annotated[str, Field(max_length=MAX_COMMENT)]] = Field(
        default_factory=dict, max_length=100
    )
    version: SourceVersion | None = Field(
        default=None,
        description=(
            "The data's version as its source reports it. Observing a Live partition again with another "
            "version taints every Live partition built from it; with the same version it is a conflict."
        ),
    )


class RetentionRequest(_Request):
    """Drop superseded (non-canonical) instances created more than `retain_days` days ago."""

    retain_days: Annotated[int, Field(ge=0, le=1_000_000), JsonInt] = Field(
        description="Keep superseded instances this many days."
    )
    dry_run: bool = Field(default=False, description="Only report what would be dropped.")


class ReshardRequest(_Request):
    """Split a bucketing namespace's refs into a new number of buckets (workers on the old number stop)."""

    bucket_total: Annotated[int, Field(ge=1, le=MAX_BUCKETS), JsonInt] = Field(
        description="The namespace's new number of buckets."
    )
    namespace: str = Field(default=DEFAULT_NAMESPACE, pattern=ID_PATTERN, description="The bucketing namespace.")


# ----------------------------------------------------------------- responses


class Written(BaseModel):
    """Where a write landed in the log: read with `min_seq` >= this to see it (read-your-writes)."""

    seq: int


class WantCreated(Written):
    want_id: str
    state: WantStateName


class WantBatchCreated(BaseModel):
    first_seq: int
    last_seq: int
    wants: list[WantCreated]


class Want(BaseModel):
    want_id: str
    refs: list[str]
    state: WantStateName
    created_seq: int
    updated_seq: int
    created_ms: int
    data_timestamp_ms: int
    ttl_seconds: int
    sla_seconds: int
    expires_at_ms: int | None
    sla_deadline_ms: int | None
    sla_breached: bool
    comment: str
    source: str
    parent_want_id: str | None
    root_want_id: str
    children: list[str]
    satisfied_by: list[str]
    cancel_reason: str | None


class RefStatus(BaseModel):
    """Where one ref of a want stands, and what it waits for."""

    ref: str
    instance_uuid: str | None
    state: InstanceStateName | None
    waiting_on: list[RefStatus] = Field(default_factory=list, description="Upstream refs not Live yet.")


class WantTree(BaseModel):
    want_id: str
    state: WantStateName
    refs: list[str]
    children: list[WantTree]


class WantDetail(Want):
    refs_status: list[RefStatus]
    tree: WantTree


class Instance(BaseModel):
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
    version: SourceVersion | None = None


class JobRun(BaseModel):
    job_run_id: str
    job_label: str
    state: JobRunStateName
    instance_uuids: list[str]
    refs: list[str]
    created_seq: int
    updated_seq: int
    created_ms: int
    updated_ms: int
    last_heartbeat_ms: int
    attempt: int = Field(description="1 for a partition's first run, 2 for its first retry, ...")
    inputs: list[str]
    error_class: str | None
    error_message: str | None
    retry_after_ms: int
    missing_refs: list[str]
    cancel_reason: str | None


class LineageNode(BaseModel):
    uuid: str
    ref: str | None = Field(description="None when retention dropped the instance.")
    state: InstanceStateName | None
    depth: int
    built_by: str | None


class LineageEdge(BaseModel):
    input: str
    output: str


class Lineage(BaseModel):
    root: str
    as_of_seq: int
    nodes: list[LineageNode]
    edges: list[LineageEdge]


class StoredEvent(BaseModel):
    seq: int
    event_id: str
    event_type: str
    recorded_at_ms: int
    event: dict[str, object]


class Page(BaseModel, Generic[T]):
    items: list[T]
    next_cursor: str | None = Field(description="Pass as `cursor` for the next page; null on the last page.")


class Rejected(BaseModel):
    seq: int
    event_type: str
    reason: str


class Validated(BaseModel):
    """A batch that `create` would accept now (a concurrent writer may still take an id first)."""

    wants: int
    refs: int


class Audit(BaseModel):
    head_seq: int
    state_seq: int
    digest: str
    counts: dict[str, dict[str, int]]
    rejected_total: int
    rejected: list[Rejected]
    snapshot_seq: int
    replayed_events: int
    seconds: float
    verified: bool | None = Field(default=None, description="With verify: did a full replay from seq 0 agree?")
    problems: list[str] = Field(default_factory=list)


class RetentionReport(BaseModel):
    """What retention dropped (or, on a dry run, would drop)."""

    cutoff_seq: int = Field(description="Superseded instances created before this seq go (1: none).")
    dropped: int
    instances: list[str] = Field(description="UUIDs of the first instances that go (at most 1,000).")
    seq: int | None = Field(description="Where the InstanceRetention event landed; null on a dry run or no-op.")
    dry_run: bool


class BucketLayout(BaseModel):
    """How a bucketing namespace is split, and where round-robin workers stand in it."""

    namespace: str
    bucket_total: int = Field(description="Sharded decisions under another total are rejected.")
    since_seq: int = Field(description="The event that fixed this total.")
    last_round_robin_bucket: int | None = Field(description="The bucket the last round-robin run started.")


class GroupEpochInfo(BaseModel):
    """A worker group's current epoch (started by its leader's GroupEpoch event)."""

    epoch_id: str
    number: int = Field(description="1 for the group's first epoch, 2 for the next, ...")
    seq: int = Field(description="The seq of the GroupEpoch event that started it.")


class GroupShare(BaseModel):
    """A bucket in a member's share section: being handed to `target`."""

    bucket: int
    target: str = Field(description="The member it is handed to.")
    picked_up: bool = Field(description="Whether the target holds it already (it is the target's then).")


class MemberHeartbeat(BaseModel):
    """A member's row in the heartbeat table, read now: heartbeats are never answered as of a past seq."""

    host: str
    pid: int
    started_ms: int
    last_heartbeat_ms: int
    age_ms: int = Field(description="How long ago its last heartbeat was, at `now_ms` of the answer.")
    live: bool = Field(description="Its last heartbeat is at most `member_timeout_s` old.")


class GroupMember(BaseModel):
    """One member of the epoch: its state as the fold holds it, and its heartbeat row now."""

    task_id: str
    leader: bool
    owned: list[int] = Field(description="Buckets it owns: holds and is not handing off. Only it may build them.")
    data: list[int] = Field(description="Buckets it holds (owned ones and those in its share section).")
    share: list[GroupShare] = Field(description="Its share section: bucket -> target.")
    load: int = Field(description="How many buckets it owns.")
    state_timestamp_ms: int
    state_seq: int = Field(description="The seq of the event that last set its state.")
    heartbeat: MemberHeartbeat | None = Field(
        description="Its heartbeat row now (not as of `as_of_seq`); null when it has none (it left or was reaped)."
    )


class PendingBucket(BaseModel):
    """A bucket without an owner: shared and not picked up yet (nobody may build it meanwhile)."""

    bucket: int
    from_task: str | None = Field(description="The member handing it off.")
    to_task: str | None = Field(description="The member it is addressed to.")


class HeartbeatRow(BaseModel):
    """A heartbeat row of a task that is not a member of the epoch (joined since, or dead and not reaped)."""

    task_id: str
    heartbeat: MemberHeartbeat


class GroupSummary(BaseModel):
    """A worker group in a listing."""

    name: str
    namespace: str
    bucket_total: int
    epoch: GroupEpochInfo
    leader_task_id: str
    members: int = Field(description="Members of the current epoch.")
    buckets_without_owner: int = Field(description="Buckets being handed off (shared, not picked up yet).")


class Group(BaseModel):
    """A worker group as of a seq: its epoch, leader, members with what they own, and heartbeats now."""

    name: str
    namespace: str
    bucket_total: int
    created_seq: int = Field(description="The seq of its first epoch.")
    as_of_seq: int = Field(description="The seq the ownership is answered at.")
    epoch: GroupEpochInfo
    leader_task_id: str
    members: list[GroupMember]
    buckets_without_owner: list[PendingBucket] = Field(description="Pending hand-offs, by bucket.")
    other_heartbeats: list[HeartbeatRow] = Field(
        description="Heartbeat rows now of tasks that are not members of this epoch."
    )
    now_ms: int = Field(description="The clock reading heartbeats were judged at.")
    member_timeout_s: float


SourceFoundByName = Literal["locate", "discovery", "both"]


class SourceConnector(BaseModel):
    """The connector a discovery scans: its class and tag (never its configuration)."""

    class_name: str
    tag: str | None = Field(description="The connector type's tag (item ids are derived under it), if it has one.")


class SourceDiscovery(BaseModel):
    """How a source's partitions are discovered: the connector, where readers find them, when complete."""

    connector: SourceConnector
    base_location: str = Field(description="The connector's root as jobs read it.")
    keys: str = Field(description="The partition directory under the root (a pattern).")
    complete_marker: str | None = Field(description="The item that makes a partition complete; null: listed.")
    rescan_every_s: float
    rewant_tainted: bool
    shards: int = Field(description="Up to how many key ranges a pass is split into.")


class SourceScanError(BaseModel):
    """The last error a scan of the source recorded."""

    message: str
    retryable: bool
    at_ms: int


class SourceScanShard(BaseModel):
    """One key range of a pass, its cursor and counts. Keys are a connector's bytes: shown redacted."""

    start: str = Field(description="The range's first key, redacted (`None`: open).")
    end: str = Field(description="The key after the range, redacted (`None`: open).")
    cursor: str = Field(description="The last key accounted for, redacted (`ItemKey(len=N, hash=..)`; `None`).")
    resume_token: str = Field(description="The connector's resume token there, redacted (`None`: none).")
    done: bool
    items: int = Field(
        description="Items listed in it in this pass (a partition listed again after a restart counts again)."
    )
    bytes: int = Field(description="Bytes of those items, by size hint.")


class SourceScanStatus(BaseModel):
    """How far the scans of a source have got (the fold's record). The cursor is shown redacted."""

    pass_number: int = Field(description="The current (or last) pass; 1 for the first, 0 before any.")
    pass_done: bool
    shards: list[SourceScanShard] = Field(description="The pass's key ranges, each with its own cursor.")
    rescan_requested: bool = Field(description="A scan was asked for: the next pass begins when this one ends.")
    pass_items: int = Field(description="Items listed in this pass so far.")
    pass_partitions: int = Field(description="Complete partitions found in this pass so far.")
    items_total: int
    partitions_total: int
    passes_done: int
    pass_started_ms: int
    last_pass_done_ms: int | None = Field(description="When the latest finished pass ended; null: none has.")
    last_pass_items: int
    last_pass_partitions: int
    errors_total: int
    last_error: SourceScanError | None
    updated_seq: int = Field(description="The seq of its latest scan event.")


class Source(BaseModel):
    """A source dataset: how it is found (from the served graph) and how far its scans have got (the log)."""

    name: str
    pattern: str | None = Field(description="Its ref pattern; null when the served graph does not have it.")
    found_by: SourceFoundByName | None = Field(description="null when the served graph does not have it.")
    discovery: SourceDiscovery | None
    scan: SourceScanStatus | None = Field(description="null until a scan of it is recorded.")


class ScanRequested(Written):
    """A scan of a source was asked for: its next pass begins at once, or when the current one ends."""

    source: Source


class Health(BaseModel):
    status: Literal["ok"]
    head_seq: int
    state_seq: int
