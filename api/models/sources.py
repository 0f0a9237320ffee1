"""Models of source datasets (`/api/v1/sources`): how each is found, how far its scans have got."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from partbuild.api.models.common import WrittenOut

SourceFoundByName = Literal["locate", "discovery", "both"]


class SourceConnectorOut(BaseModel):
    """The connector a discovery scans: its class and tag (never its configuration)."""

    class_name: str
    tag: str | None = Field(description="The connector type's tag (item ids are derived under it), if it has one.")


class SourceDiscoveryOut(BaseModel):
    """How a source's partitions are discovered: the connector, where readers find them, when complete."""

    connector: SourceConnectorOut
    base_location: str = Field(description="The connector's root as jobs read it.")
    keys: str = Field(description="The partition directory under the root (a pattern).")
    complete_marker: str | None = Field(description="The item that makes a partition complete; null: listed.")
    rescan_every_s: float
    rewant_tainted: bool
    shards: int = Field(description="Up to how many key ranges a pass is split into.")


class SourceScanErrorOut(BaseModel):
    """The last error a scan of the source recorded."""

    message: str
    retryable: bool
    at_ms: int


class ScanKeyRangeOut(BaseModel):
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


class SourceScanOut(BaseModel):
    """How far the scans of a source have got (the fold's record). The cursor is shown redacted."""

    pass_number: int = Field(
        description=(
            "The current (or last) recorded pass; 1 for the first, 0 before any. A pass that found nothing new "
            "(and was not asked for) is not recorded: an idle source's record, and the log, stay as they were."
        )
    )
    pass_done: bool
    # The JSON field keeps its name `shards`: each is a key range of the pass.
    shards: list[ScanKeyRangeOut] = Field(description="The pass's key ranges, each with its own cursor.")
    rescan_requested: bool = Field(description="A scan was asked for: the next pass begins when this one ends.")
    pass_items: int = Field(description="Items listed in this pass so far.")
    pass_partitions: int = Field(description="Complete partitions found in this pass so far.")
    items_total: int
    partitions_total: int
    passes_done: int
    pass_started_ms: int
    last_pass_done_ms: int | None = Field(description="When the latest recorded pass ended; null: none has.")
    last_pass_items: int
    last_pass_partitions: int
    errors_total: int
    last_error: SourceScanErrorOut | None
    updated_seq: int = Field(description="The seq of its latest scan event.")


class SourceOut(BaseModel):
    """A source dataset: how it is found (from the served graph) and how far its scans have got (the log)."""

    name: str
    pattern: str | None = Field(description="Its ref pattern; null when the served graph does not have it.")
    found_by: SourceFoundByName | None = Field(description="null when the served graph does not have it.")
    discovery: SourceDiscoveryOut | None
    scan: SourceScanOut | None = Field(description="null until a scan of it is recorded.")


class ScanRequestedOut(WrittenOut):
    """A scan of a source was asked for: its next pass begins at once, or when the current one ends."""

    source: SourceOut
