"""Models of bulk actions (`/api/v1/bulk`): one action on a selection of partitions, in one request."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from partbuild.api.models.common import MAX_COMMENT, InstanceStateName, Ref, StrictRequest
from partbuild.api.models.wants import WantId
from partbuild.state.rules.refs import MAX_REF_BYTES

MAX_BULK_REFS = 100_000  # refs one bulk action may act on: more is a 413, and nothing is recorded
SAMPLE = 20
BulkActionName = Literal["want", "retry", "taint", "recheck"]


class RefsSelectionRequest(StrictRequest):
    """These refs."""

    # No max_length: the service counts them and answers 413 over MAX_BULK_REFS; uniqueItems is documented only.
    refs: list[Ref] = Field(
        min_length=1, description=f"At most {MAX_BULK_REFS:,}, each once.", json_schema_extra={"uniqueItems": True}
    )


class PrefixSelectionRequest(StrictRequest):
    """Every ref under a prefix (as canonical now), in a state, stale: the filters of `GET /partitions`."""

    ref_prefix: str = Field(max_length=MAX_REF_BYTES, description="Every ref that starts with it ('': all).")
    state: InstanceStateName | None = Field(default=None, description="Only those whose canonical instance is in it.")
    stale: bool = Field(default=False, description="Only Live instances built by another code version.")


BulkSelection = RefsSelectionRequest | PrefixSelectionRequest


class BulkRequest(StrictRequest):
    """One action on a selection: `want` them, `retry` the failed ones (a want of those), `taint` the Live ones
    (one event each, one append), or `recheck` the Live ones (a checks request each, one append)."""

    action: BulkActionName
    selection: BulkSelection
    reason: str = Field(default="", max_length=MAX_COMMENT, description="The want's comment, or the taint's reason.")
    want_id: WantId | None = Field(default=None, description="want/retry: the want's id (default: a new one).")
    dry_run: bool = Field(default=False, description="Say what it would act on; record nothing.")


class BulkOut(BaseModel):
    """What a bulk action acted on (or would: `dry_run`)."""

    action: BulkActionName
    selected: int = Field(description="Partitions the selection named.")
    acted_on: int = Field(description="Those the action applies to (retry: failed; taint, recheck: Live).")
    refs: list[str] = Field(description=f"The first {SAMPLE} of them, by ref.")
    dry_run: bool
    first_seq: int | None = Field(description="Where its events landed (null: a dry run, or nothing to do).")
    last_seq: int | None
    want_id: str | None = Field(description="want/retry: the one want it made.")
