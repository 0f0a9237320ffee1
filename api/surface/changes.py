"""Changes: what changed between two seqs of the log (instances created, state changes, canonical moves)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Protocol

from partbuild.api.models.common import PageOut, QueryInt
from partbuild.api.surface.common import MAX_SEQ, Cursor, Limit, MinSeq, Query, operation
from partbuild.state.ops.roles import Role

if TYPE_CHECKING:  # its models load when an operation's types are first needed (`Operation`)
    from partbuild.api.models.changes import ChangeOut

TAG = "changes"


class ChangesApi(Protocol):
    @operation("GET", "/changes", "What changed after one seq up to another, by seq", role=Role.READER)
    def changes(
        self,
        from_seq: Annotated[QueryInt, Query(ge=0, le=MAX_SEQ, description="Changes after this seq.")],
        to_seq: Annotated[
            QueryInt | None, Query(ge=1, le=MAX_SEQ, description="Changes up to this seq (default: the head).")
        ] = None,
        cursor: Cursor = None,
        limit: Limit = 100,
        min_seq: MinSeq = None,
    ) -> PageOut[ChangeOut]: ...
