"""Audit: replay the log for its head seq, digest, counts and rejected events (optionally verified from seq 0)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Protocol

from partbuild.api.models.common import QueryBool, QueryInt
from partbuild.api.surface.common import AsOfSeq, Query, operation
from partbuild.state.ops.roles import Role

if TYPE_CHECKING:  # its models load when an operation's types are first needed (`Operation`)
    from partbuild.api.models.audit import AuditOut

TAG = "audit"


class AuditApi(Protocol):
    @operation("POST", "/audit", "Replay the log: head seq, digest, counts, rejected events", role=Role.READER)
    def audit(
        self,
        rejected_limit: Annotated[
            QueryInt, Query(alias="rejected", ge=0, le=1_000, description="How many rejected events to list.")
        ] = 100,
        as_of_seq: AsOfSeq = None,
        verify: Annotated[
            QueryBool, Query(description="Also replay from seq 0 without snapshots and compare.")
        ] = False,
    ) -> AuditOut: ...
