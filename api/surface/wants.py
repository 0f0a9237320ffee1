"""Wants: create one or a batch, validate a batch, list, one with its derivative tree, cancel."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Protocol

from partbuild.api.models.common import CancelRequest, PageOut, WrittenOut
from partbuild.api.surface.common import ANONYMOUS, AsOfSeq, Body, Cursor, Limit, MinSeq, Path, Query, User, operation
from partbuild.state.ops.roles import Role

if TYPE_CHECKING:  # its models load when an operation's types are first needed (`Operation`)
    from partbuild.api.models.wants import (
        MadeBy,
        ValidatedOut,
        WantBatchCreatedOut,
        WantBatchRequest,
        WantCreatedOut,
        WantDetailOut,
        WantOut,
        WantRequest,
        WantStateName,
    )

TAG = "wants"
WantIdPath = Annotated[str, Path(description="A want's id.")]


class WantsApi(Protocol):
    @operation("POST", "/wants", "Want partitions built", status=201, inline=True, role=Role.WRITER)
    def create_want(self, request: Annotated[WantRequest, Body()], user: User = ANONYMOUS) -> WantCreatedOut: ...

    @operation("POST", "/wants/batch", "Many wants in one atomic append (backfills)", status=201, role=Role.WRITER)
    def create_wants(
        self, request: Annotated[WantBatchRequest, Body()], user: User = ANONYMOUS
    ) -> WantBatchCreatedOut: ...

    @operation(
        "POST", "/wants/batch/validate", "Check a batch as /wants/batch would, recording nothing", role=Role.WRITER
    )
    def validate_wants(self, request: Annotated[WantBatchRequest, Body()]) -> ValidatedOut: ...

    @operation("GET", "/wants", "List wants, oldest first", role=Role.READER)
    def wants(
        self,
        state_filter: Annotated[
            WantStateName | None, Query(alias="state", description="Only wants in this state.")
        ] = None,
        ref: Annotated[str | None, Query(max_length=4096, description="Only wants naming this ref.")] = None,
        root: Annotated[str | None, Query(max_length=256, description="Only wants under this root want.")] = None,
        made_by: Annotated[
            MadeBy | None,
            Query(
                description="Only wants made by: user[:NAME] (a person; NAME: the user or token), "
                "schedule[:NAME], reaction[:JOB], derived[:PARENT] or system[:COMPONENT].",
                examples=("user:ann", "schedule", "reaction:daily_clicks"),
            ),
        ] = None,
        cursor: Cursor = None,
        limit: Limit = 100,
        as_of_seq: AsOfSeq = None,
        min_seq: MinSeq = None,
    ) -> PageOut[WantOut]: ...

    @operation("GET", "/wants/{want_id}", "A want, why it waits, and its derivative wants", role=Role.READER)
    def want(self, want_id: WantIdPath, as_of_seq: AsOfSeq = None, min_seq: MinSeq = None) -> WantDetailOut: ...

    @operation("POST", "/wants/{want_id}/cancel", "Cancel a want (and its active derivative wants)", role=Role.WRITER)
    def cancel_want(
        self,
        want_id: WantIdPath,
        request: Annotated[CancelRequest | None, Body()] = None,
        user: User = ANONYMOUS,
    ) -> WrittenOut: ...
