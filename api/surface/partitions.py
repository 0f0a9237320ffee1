"""Partitions and their instances: canonical instances, history, taint, observe, lineage, retention.

Refs contain slashes, so ref routes end in `{ref:path}` behind a fixed word
(`canonical`, `history`) that no ref can be confused with.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Literal, Protocol

from partbuild.api.models.common import PageOut, QueryInt, WrittenOut
from partbuild.api.surface.common import ANONYMOUS, AsOfSeq, Body, Cursor, Limit, MinSeq, Path, Query, User, operation
from partbuild.state.ops.roles import Role

if TYPE_CHECKING:  # its models load when an operation's types are first needed (`Operation`)
    from partbuild.api.models.partitions import (
        MAX_LINEAGE_DEPTH,
        ChecksRequestedOut,
        ChecksRunRequest,
        InstanceOut,
        InstanceStateName,
        LineageOut,
        MadeBy,
        ObserveRequest,
        RetentionReportOut,
        RetentionRequest,
        StaleOut,
        TaintRequest,
    )

TAG = "partitions"
UuidPath = Annotated[str, Path(description="A partition instance's UUID.")]
RefPath = Annotated[str, Path(description="A partition ref; its slashes stay slashes.")]
Direction = Literal["upstream", "downstream", "both"]

StaleFilter = Annotated[
    bool,
    Query(alias="stale", description="Only Live instances built by another code version than the served graph's."),
]
UnwantedFilter = Annotated[
    bool,
    Query(
        alias="unwanted",
        description="Only waiting instances (missing, upstream_building, up_for_retry) no active want needs: "
        "their wants expired or were canceled.",
    ),
]

CheckFilter = Annotated[
    str | None,
    Query(
        alias="check",
        min_length=1,
        max_length=256,
        description="Only instances whose latest checks include this check (with `check_result`: with that result).",
    ),
]
CheckResultFilter = Annotated[  # models.partitions.CheckResultName's values: a surface loads no models at start-up
    Literal["passed", "warning", "failed", "errored"] | None,
    Query(
        alias="check_result",
        description="Only instances whose latest checks have a check with this result (of `check`, if given).",
    ),
]
ErrorFilter = Annotated[
    str | None,
    Query(
        alias="error",
        min_length=1,
        max_length=1_000,
        description="Only instances whose note (a failure's root cause, a taint's reason) holds this text, any case.",
    ),
]


class PartitionsApi(Protocol):
    @operation("GET", "/partitions", "Canonical instances ordered by ref", role=Role.READER)
    def partitions(
        self,
        prefix: Annotated[str, Query(max_length=4096, description="Only refs starting with this.")] = "",
        state_filter: Annotated[
            InstanceStateName | None, Query(alias="state", description="Only current instances in this state.")
        ] = None,
        stale_filter: StaleFilter = False,
        unwanted_filter: UnwantedFilter = False,
        check_filter: CheckFilter = None,
        check_result_filter: CheckResultFilter = None,
        error_filter: ErrorFilter = None,
        made_by_filter: Annotated[
            MadeBy | None,
            Query(
                alias="made_by",
                description="Only partitions a want names that was made by: user[:NAME], schedule[:NAME], "
                "reaction[:JOB], derived[:PARENT] or system[:COMPONENT] (as `GET /wants?made_by=`).",
            ),
        ] = None,
        cursor: Cursor = None,
        limit: Limit = 100,
        as_of_seq: AsOfSeq = None,
        min_seq: MinSeq = None,
    ) -> PageOut[InstanceOut]: ...

    @operation("GET", "/partitions/canonical/{ref:path}", "The current instance of a ref", role=Role.READER)
    def canonical(self, ref: RefPath, as_of_seq: AsOfSeq = None, min_seq: MinSeq = None) -> InstanceOut: ...

    @operation("GET", "/partitions/history/{ref:path}", "Every instance of a ref, newest first", role=Role.READER)
    def history(self, ref: RefPath, as_of_seq: AsOfSeq = None, min_seq: MinSeq = None) -> list[InstanceOut]: ...

    @operation("POST", "/partitions/taint", "Declare a Live partition's data bad", status=201, role=Role.WRITER)
    def taint(self, request: Annotated[TaintRequest, Body()], user: User = ANONYMOUS) -> WrittenOut: ...

    @operation("POST", "/partitions/observe", "A source partition became available", status=201, role=Role.WRITER)
    def observe(self, request: Annotated[ObserveRequest, Body()], user: User = ANONYMOUS) -> WrittenOut: ...

    @operation("GET", "/instances/{uuid}", "One partition instance by UUID", role=Role.READER)
    def instance(self, uuid: UuidPath, as_of_seq: AsOfSeq = None, min_seq: MinSeq = None) -> InstanceOut: ...

    @operation(
        "POST",
        "/instances/{uuid}/checks",
        "Run the job's checks again on a Live instance; a blocking failure taints it",
        status=202,
        role=Role.WRITER,
    )
    def request_checks(
        self,
        uuid: UuidPath,
        request: Annotated[ChecksRunRequest | None, Body()] = None,
        user: User = ANONYMOUS,
    ) -> ChecksRequestedOut: ...

    @operation("GET", "/instances/{uuid}/lineage", "Upstream and downstream instances to a depth", role=Role.READER)
    def lineage(
        self,
        uuid: UuidPath,
        direction: Annotated[Direction, Query(description="Inputs, consumers, or both.")] = "both",
        depth: Annotated[QueryInt, Query(ge=0, le=MAX_LINEAGE_DEPTH, description="Hops.")] = 1,
        as_of_seq: AsOfSeq = None,
        min_seq: MinSeq = None,
    ) -> LineageOut: ...

    @operation(
        "POST", "/retention", "Drop instances superseded over a number of days ago (or preview it)", role=Role.ADMIN
    )
    def retention(self, request: Annotated[RetentionRequest, Body()], user: User = ANONYMOUS) -> RetentionReportOut: ...

    @operation(
        "GET",
        "/jobs/{job}/stale",
        "A job's Live instances built by another code version than the served graph's, oldest partitions last",
        role=Role.READER,
    )
    def stale(
        self,
        job: Annotated[str, Path(max_length=256, description="A job's label in the served graph.")],
        limit: Limit = 100,
        as_of_seq: AsOfSeq = None,
        min_seq: MinSeq = None,
    ) -> StaleOut: ...
