"""partbuild's API, declared once: every operation's name, parameters, result and HTTP route.

`Client` is the interface the CLI talks to. Its two implementations never
restate a signature:
- `Service` (the in-process back end, `--db`) implements each method; a test
  checks its signatures against these;
- `HttpClient` (`--server`) and the FastAPI routes are derived from the
  declarations below: each parameter's FastAPI marker (`Path`, `Query`, `Body`,
  `Header`) says where it travels, with the bounds the server enforces and the
  OpenAPI document states.

Adding an endpoint: a method here with `@operation(...)`, its implementation on
the service, and its name in the resource's router (`api/routes/`).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, Literal, Protocol, TypeVar, get_type_hints

from fastapi import Body, Header, Path, Query

from partbuild.api import models as m
from partbuild.api import subscription_models as sm
from partbuild.state.ops.tokens import Role

MAX_SEQ = m.MAX_SAFE_INT
ANONYMOUS = "anonymous"
USER_HEADER = "X-Partbuild-User"

# Parameters, with where they travel over HTTP and the bounds both ends enforce.
User = Annotated[
    str,
    Header(alias=USER_HEADER, max_length=128, description="Who asks: recorded as the source of what is appended."),
]
MinSeq = Annotated[
    m.QueryInt | None, Query(ge=0, le=MAX_SEQ, description="Read at least up to this seq (read-your-writes).")
]
AsOfSeq = Annotated[m.QueryInt | None, Query(ge=0, le=MAX_SEQ, description="Answer as of this seq of the log.")]
Cursor = Annotated[str | None, Query(min_length=1, max_length=4096, description="`next_cursor` of the previous page.")]
Limit = Annotated[m.QueryInt, Query(ge=1, le=m.MAX_PAGE, description="Items per page.")]
WantIdPath = Annotated[str, Path(description="A want's id.")]
RunIdPath = Annotated[str, Path(description="A job run's id.")]
UuidPath = Annotated[str, Path(description="A partition instance's UUID.")]
RefPath = Annotated[str, Path(description="A partition ref; its slashes stay slashes.")]
GroupNamePath = Annotated[str, Path(description="A worker group's name.", examples=["workers"])]
SourceNamePath = Annotated[str, Path(description="A source dataset's name.", examples=["raw_clicks"])]
SubscriptionNamePath = Annotated[str, Path(description="A subscription's name.", examples=["alerts"])]
MemberTimeout = Annotated[
    m.QueryFloat,
    Query(
        gt=0,
        le=m.MAX_MEMBER_TIMEOUT_S,
        description="Seconds since its last heartbeat after which a member counts as dead (as `run --member-timeout`).",
    ),
]
Direction = Literal["upstream", "downstream", "both"]
WantStateFilter = Annotated[m.WantStateName | None, Query(alias="state", description="Only wants in this state.")]
InstanceStateFilter = Annotated[
    m.InstanceStateName | None, Query(alias="state", description="Only current instances in this state.")
]
RunStateFilter = Annotated[m.JobRunStateName | None, Query(alias="state", description="Only job runs in this state.")]
T = TypeVar("T", bound=Callable[..., Any])


@dataclass(frozen=True)
class Operation:
    """One operation of the API and its HTTP route."""

    name: str
    method: str
    path: str  # under /api/v1 unless `versioned` is false
    status: int
    summary: str
    parameters: tuple[inspect.Parameter, ...]  # annotations resolved, FastAPI markers included
    returns: Any
    role: Role | None  # the least role a token needs to call it (None: open to all, like /healthz)
    versioned: bool = True
    inline: bool = False  # served on the event loop: cheaper than a worker thread for tiny calls

    @property
    def route(self) -> str:
        return f"/api/v1{self.path}" if self.versioned else self.path


def operation(
    method: str,
    path: str,
    summary: str,
    *,
    role: Role | None,
    status: int = 200,
    versioned: bool = True,
    inline: bool = False,
) -> Callable[[T], T]:
    """Mark a `Client` method as an operation served at `method path`, callable with a token of `role` or above.

    `role` has no default: every new operation decides who may call it.
    """

    def mark(function: T) -> T:
        function.__operation__ = {  # type: ignore[attr-defined]
            "method": method,
            "path": path,
            "summary": summary,
            "status": status,
            "versioned": versioned,
            "inline": inline,
            "role": role,
        }
        return function

    return mark


class Client(Protocol):
    """Every read and write of partbuild, as the CLI, the HTTP API and tests use them."""

    # ----------------------------------------------------------------- writes

    @operation("POST", "/wants", "Want partitions built", status=201, inline=True, role=Role.WRITER)
    def create_want(self, request: Annotated[m.WantRequest, Body()], user: User = ANONYMOUS) -> m.WantCreated: ...

    @operation("POST", "/wants/batch", "Many wants in one atomic append (backfills)", status=201, role=Role.WRITER)
    def create_wants(
        self, request: Annotated[m.WantBatchRequest, Body()], user: User = ANONYMOUS
    ) -> m.WantBatchCreated: ...

    @operation(
        "POST", "/wants/batch/validate", "Check a batch as /wants/batch would, recording nothing", role=Role.WRITER
    )
    def validate_wants(self, request: Annotated[m.WantBatchRequest, Body()]) -> m.Validated: ...

    @operation("POST", "/wants/{want_id}/cancel", "Cancel a want (and its active derivative wants)", role=Role.WRITER)
    def cancel_want(
        self,
        want_id: WantIdPath,
        request: Annotated[m.CancelRequest | None, Body()] = None,
        user: User = ANONYMOUS,
    ) -> m.Written: ...

    @operation("POST", "/partitions/taint", "Declare a Live partition's data bad", status=201, role=Role.WRITER)
    def taint(self, request: Annotated[m.TaintRequest, Body()], user: User = ANONYMOUS) -> m.Written: ...

    @operation("POST", "/partitions/observe", "A source partition became available", status=201, role=Role.WRITER)
    def observe(self, request: Annotated[m.ObserveRequest, Body()], user: User = ANONYMOUS) -> m.Written: ...

    @operation("POST", "/job-runs/{job_run_id}/cancel", "Stop a queued or running job run", role=Role.WRITER)
    def cancel_job_run(
        self,
        job_run_id: RunIdPath,
        request: Annotated[m.CancelRequest | None, Body()] = None,
        user: User = ANONYMOUS,
    ) -> m.Written: ...

    @operation(
        "POST", "/retention", "Drop superseded instances older than a number of days (or preview it)", role=Role.ADMIN
    )
    def retention(
        self, request: Annotated[m.RetentionRequest, Body()], user: User = ANONYMOUS
    ) -> m.RetentionReport: ...

    @operation(
        "POST", "/buckets/layout", "Re-shard: split a bucketing namespace into a new number of buckets", role=Role.ADMIN
    )
    def reshard(self, request: Annotated[m.ReshardRequest, Body()], user: User = ANONYMOUS) -> m.Written: ...

    @operation(
        "POST",
        "/sources/{name}/scan",
        "Start a new pass of a source's scan, from its first key",
        status=201,
        role=Role.ADMIN,
    )
    def scan_source(self, name: SourceNamePath, user: User = ANONYMOUS) -> m.ScanRequested: ...

    @operation("POST", "/subscriptions", "Subscribe a webhook to the log's events", status=201, role=Role.ADMIN)
    def create_subscription(
        self, request: Annotated[sm.SubscriptionRequest, Body()], user: User = ANONYMOUS
    ) -> sm.SubscriptionCreated: ...

    @operation("POST", "/subscriptions/{name}/pause", "Stop delivering; offsets and queues stay", role=Role.ADMIN)
    def pause_subscription(self, name: SubscriptionNamePath, user: User = ANONYMOUS) -> sm.SubscriptionWritten: ...

    @operation("POST", "/subscriptions/{name}/resume", "Deliver again from where it paused", role=Role.ADMIN)
    def resume_subscription(self, name: SubscriptionNamePath, user: User = ANONYMOUS) -> sm.SubscriptionWritten: ...

    @operation("DELETE", "/subscriptions/{name}", "Delete a subscription and its queues", role=Role.ADMIN)
    def delete_subscription(self, name: SubscriptionNamePath, user: User = ANONYMOUS) -> sm.SubscriptionWritten: ...

    @operation(
        "POST", "/subscriptions/{name}/shards", "Change a subscription's shard count while it runs", role=Role.ADMIN
    )
    def reshard_subscription(
        self,
        name: SubscriptionNamePath,
        request: Annotated[sm.ReshardSubscriptionRequest, Body()],
        user: User = ANONYMOUS,
    ) -> sm.SubscriptionWritten: ...

    @operation(
        "POST",
        "/subscriptions/{name}/offsets",
        "Rewind or fast-forward the main topic; fast-forward RQ/DLQ",
        role=Role.ADMIN,
    )
    def reset_subscription_offset(
        self, name: SubscriptionNamePath, request: Annotated[sm.OffsetResetRequest, Body()], user: User = ANONYMOUS
    ) -> sm.SubscriptionWritten: ...

    @operation(
        "POST", "/subscriptions/{name}/dlq/replay", "Deliver dead letters again, each group's in order", role=Role.ADMIN
    )
    def replay_dead_letters(
        self, name: SubscriptionNamePath, request: Annotated[sm.DeadLetterRequest, Body()], user: User = ANONYMOUS
    ) -> sm.DeadLettersMoved: ...

    @operation("POST", "/subscriptions/{name}/dlq/purge", "Drop dead letters", role=Role.ADMIN)
    def purge_dead_letters(
        self, name: SubscriptionNamePath, request: Annotated[sm.DeadLetterRequest, Body()], user: User = ANONYMOUS
    ) -> sm.DeadLettersMoved: ...

    # ----------------------------------------------------------------- reads

    @operation("GET", "/wants/{want_id}", "A want, why it waits, and its derivative wants", role=Role.READER)
    def want(self, want_id: WantIdPath, min_seq: MinSeq = None) -> m.WantDetail: ...

    @operation("GET", "/wants", "List wants, oldest first", role=Role.READER)
    def wants(
        self,
        state_filter: WantStateFilter = None,
        ref: Annotated[str | None, Query(max_length=4096, description="Only wants naming this ref.")] = None,
        root: Annotated[str | None, Query(max_length=256, description="Only wants under this root want.")] = None,
        cursor: Cursor = None,
        limit: Limit = 100,
        min_seq: MinSeq = None,
    ) -> m.Page[m.Want]: ...

    @operation("GET", "/partitions", "Canonical instances ordered by ref", role=Role.READER)
    def partitions(
        self,
        prefix: Annotated[str, Query(max_length=4096, description="Only refs starting with this.")] = "",
        state_filter: InstanceStateFilter = None,
        cursor: Cursor = None,
        limit: Limit = 100,
        min_seq: MinSeq = None,
    ) -> m.Page[m.Instance]: ...

    @operation("GET", "/partitions/canonical/{ref:path}", "The current instance of a ref", role=Role.READER)
    def canonical(self, ref: RefPath, as_of_seq: AsOfSeq = None, min_seq: MinSeq = None) -> m.Instance: ...

    @operation("GET", "/partitions/history/{ref:path}", "Every instance of a ref, newest first", role=Role.READER)
    def history(self, ref: RefPath, as_of_seq: AsOfSeq = None, min_seq: MinSeq = None) -> list[m.Instance]: ...

    @operation("GET", "/instances/{uuid}", "One partition instance by UUID", role=Role.READER)
    def instance(self, uuid: UuidPath, as_of_seq: AsOfSeq = None, min_seq: MinSeq = None) -> m.Instance: ...

    @operation("GET", "/instances/{uuid}/lineage", "Upstream and downstream instances to a depth", role=Role.READER)
    def lineage(
        self,
        uuid: UuidPath,
        direction: Annotated[Direction, Query(description="Inputs, consumers, or both.")] = "both",
        depth: Annotated[m.QueryInt, Query(ge=0, le=m.MAX_LINEAGE_DEPTH, description="Hops.")] = 1,
        as_of_seq: AsOfSeq = None,
        min_seq: MinSeq = None,
    ) -> m.Lineage: ...

    @operation("GET", "/job-runs/{job_run_id}", "One job run: what it built and what it read", role=Role.READER)
    def job_run(self, job_run_id: RunIdPath, min_seq: MinSeq = None) -> m.JobRun: ...

    @operation("GET", "/job-runs", "List job runs, oldest first", role=Role.READER)
    def job_runs(
        self,
        state_filter: RunStateFilter = None,
        job: Annotated[str | None, Query(max_length=256, description="Only runs of this job.")] = None,
        cursor: Cursor = None,
        limit: Limit = 100,
        min_seq: MinSeq = None,
    ) -> m.Page[m.JobRun]: ...

    @operation(
        "GET", "/buckets", "How each bucketing namespace is split, and where round-robin stands", role=Role.READER
    )
    def bucket_layouts(self, as_of_seq: AsOfSeq = None, min_seq: MinSeq = None) -> list[m.BucketLayout]: ...

    @operation("GET", "/groups", "Worker groups: each one's epoch, leader and member count", role=Role.READER)
    def groups(self, as_of_seq: AsOfSeq = None, min_seq: MinSeq = None) -> list[m.GroupSummary]: ...

    @operation(
        "GET",
        "/group/{name}",
        "A worker group: its epoch, leader, members, who owns which bucket, heartbeats",
        role=Role.READER,
    )
    def group(
        self,
        name: GroupNamePath,
        member_timeout_s: MemberTimeout = 10,
        as_of_seq: AsOfSeq = None,
        min_seq: MinSeq = None,
    ) -> m.Group: ...

    @operation(
        "GET",
        "/sources",
        "Source datasets: how each is found, and how far its connector's scans have got",
        role=Role.READER,
    )
    def sources(self, as_of_seq: AsOfSeq = None, min_seq: MinSeq = None) -> list[m.Source]: ...

    @operation(
        "GET", "/subscriptions", "Webhook subscriptions: settings, topics, lag, queues, counters", role=Role.ADMIN
    )
    def list_subscriptions(self) -> sm.SubscriptionList: ...

    @operation(
        "GET", "/subscriptions/{name}", "One subscription: settings, topics, lag, queues, counters", role=Role.ADMIN
    )
    def get_subscription(self, name: SubscriptionNamePath) -> sm.Subscription: ...

    @operation("GET", "/subscriptions/{name}/dlq", "A subscription's dead letters, in event order", role=Role.ADMIN)
    def list_dead_letters(
        self,
        name: SubscriptionNamePath,
        after_seq: Annotated[
            m.QueryInt, Query(ge=-1, le=MAX_SEQ, description="Messages of events after this seq (-1: all).")
        ] = -1,
        limit: Limit = 100,
    ) -> sm.DeadLetterList: ...

    @operation("GET", "/events", "The raw event log as JSON, by seq", role=Role.READER)
    def events(
        self,
        after_seq: Annotated[m.QueryInt, Query(ge=0, le=MAX_SEQ, description="Events after this seq.")] = 0,
        limit: Limit = 100,
    ) -> m.Page[m.StoredEvent]: ...

    @operation("POST", "/audit", "Replay the log: head seq, digest, counts, rejected events", role=Role.READER)
    def audit(
        self,
        rejected_limit: Annotated[
            m.QueryInt, Query(alias="rejected", ge=0, le=1_000, description="How many rejected events to list.")
        ] = 100,
        as_of_seq: AsOfSeq = None,
        verify: Annotated[
            m.QueryBool, Query(description="Also replay from seq 0 without snapshots and compare.")
        ] = False,
    ) -> m.Audit: ...

    @operation("GET", "/healthz", "Liveness and how far the served state is", versioned=False, role=None)
    def health(self) -> m.Health: ...


def _operations() -> dict[str, Operation]:
    found: dict[str, Operation] = {}
    for name, function in vars(Client).items():
        marks = getattr(function, "__operation__", None)
        if marks is None:
            continue
        hints = get_type_hints(function, include_extras=True)
        parameters = tuple(
            parameter.replace(annotation=hints[parameter.name])
            for parameter in list(inspect.signature(function).parameters.values())[1:]  # without self
        )
        found[name] = Operation(name=name, parameters=parameters, returns=hints["return"], **marks)
    return found


OPERATIONS: dict[str, Operation] = _operations()
