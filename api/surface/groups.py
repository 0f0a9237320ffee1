"""Worker groups: each one's epoch, leader, members, who owns which bucket, heartbeats."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Protocol

from partbuild.api.models.common import QueryFloat
from partbuild.api.surface.common import AsOfSeq, MinSeq, Path, Query, operation
from partbuild.state.ops.roles import Role

if TYPE_CHECKING:  # its models load when an operation's types are first needed (`Operation`)
    from partbuild.api.models.groups import MAX_MEMBER_TIMEOUT_S, GroupOut, GroupSummaryOut

TAG = "worker groups"
GroupNamePath = Annotated[str, Path(description="A worker group's name.", examples=("workers",))]


class GroupsApi(Protocol):
    @operation("GET", "/groups", "Worker groups: each one's epoch, leader and member count", role=Role.READER)
    def groups(self, as_of_seq: AsOfSeq = None, min_seq: MinSeq = None) -> list[GroupSummaryOut]: ...

    @operation(
        "GET",
        "/group/{name}",
        "A worker group: its epoch, leader, members, who owns which bucket, heartbeats",
        role=Role.READER,
    )
    def group(
        self,
        name: GroupNamePath,
        member_timeout_s: Annotated[
            QueryFloat,
            Query(
                gt=0,
                le=MAX_MEMBER_TIMEOUT_S,
                description=(
                    "Seconds since its last heartbeat after which a member counts as dead (as `run --member-timeout`)."
                ),
            ),
        ] = 10,
        as_of_seq: AsOfSeq = None,
        min_seq: MinSeq = None,
    ) -> GroupOut: ...
