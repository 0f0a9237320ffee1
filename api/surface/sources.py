"""Source datasets: how each is found, how far its connector's scans have got (cursors redacted); start a pass."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Protocol

from partbuild.api.surface.common import ANONYMOUS, AsOfSeq, MinSeq, Path, User, operation
from partbuild.state.ops.roles import Role

if TYPE_CHECKING:  # its models load when an operation's types are first needed (`Operation`)
    from partbuild.api.models.sources import ScanRequestedOut, SourceOut

TAG = "sources"
SourceNamePath = Annotated[str, Path(description="A source dataset's name.", examples=("raw_clicks",))]


class SourcesApi(Protocol):
    @operation(
        "GET",
        "/sources",
        "Source datasets: how each is found, and how far its connector's scans have got",
        role=Role.READER,
    )
    def sources(self, as_of_seq: AsOfSeq = None, min_seq: MinSeq = None) -> list[SourceOut]: ...

    @operation(
        "POST",
        "/sources/{name}/scan",
        "Start a new pass of a source's scan, from its first key",
        status=201,
        role=Role.ADMIN,
    )
    def scan_source(self, name: SourceNamePath, user: User = ANONYMOUS) -> ScanRequestedOut: ...
