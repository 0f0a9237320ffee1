"""Events: the raw event log as JSON, paged by seq."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Protocol

from partbuild.api.models.common import PageOut, QueryInt
from partbuild.api.surface.common import MAX_SEQ, Limit, Query, operation
from partbuild.state.ops.roles import Role

if TYPE_CHECKING:  # its models load when an operation's types are first needed (`Operation`)
    from partbuild.api.models.events import StoredEventOut

TAG = "events"


class EventsApi(Protocol):
    @operation("GET", "/events", "The raw event log as JSON, by seq", role=Role.READER)
    def events(
        self,
        after_seq: Annotated[QueryInt, Query(ge=0, le=MAX_SEQ, description="Events after this seq.")] = 0,
        limit: Limit = 100,
    ) -> PageOut[StoredEventOut]: ...
