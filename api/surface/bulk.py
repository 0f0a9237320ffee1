"""Bulk actions: one action (want, retry, taint, recheck) on a selection of partitions, in one request."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Protocol

from partbuild.api.surface.common import ANONYMOUS, Body, User, operation
from partbuild.state.ops.roles import Role

if TYPE_CHECKING:  # its models load when an operation's types are first needed (`Operation`)
    from partbuild.api.models.bulk import BulkOut, BulkRequest

TAG = "bulk"


class BulkApi(Protocol):
    @operation(
        "POST",
        "/bulk",
        "Want, retry, taint or re-check a selection of partitions in one request (dry_run: count them)",
        status=201,
        role=Role.WRITER,
    )
    def bulk(self, request: Annotated[BulkRequest, Body()], user: User = ANONYMOUS) -> BulkOut: ...
