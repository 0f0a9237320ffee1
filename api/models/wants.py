"""Models of wants (`/api/v1/wants`): create one or a batch, validate a batch, list, one with its tree."""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, Field, WithJsonSchema

from partbuild.api.models.common import (
    ID_PATTERN,
    MAX_COMMENT,
    InstanceStateName,
    NonNegative,
    Ref,
    StrictRequest,
    WrittenOut,
)
from partbuild.state.rules.refs import CONTROL_CHARACTERS

MAX_BATCH_REFS = 10_000
# Words that follow /wants/ in a route of their own: a want with such an id could never be read at
# /wants/{want_id} (a fixed path wins over a templated one, in the document and in the server).
RESERVED_WANT_IDS = ("batch",)


def _unreserved(want_id: str) -> str:
    if want_id in RESERVED_WANT_IDS:
        raise ValueError(f"want id {want_id!r} is reserved: /wants/{want_id} is a route of its own")
    return want_id


WantId = Annotated[
    str,
    Field(
        pattern=ID_PATTERN,
        examples=["backfill-2026-01"],
        json_schema_extra={"not": {"enum": list(RESERVED_WANT_IDS)}},
    ),
    AfterValidator(_unreserved),
]
# Who made a want (a want's `made_by`, and the filter of lists): KIND:NAME, each kind naming what below says;
# a filter may give the KIND alone, for every want of that kind.
MADE_BY_KINDS = {
    "user": "a person asked for it (the user, or the token's name, the API recorded)",
    "schedule": "a schedule's tick (the schedule's name), a tick asked for by hand included",
    "reaction": "a reaction's firing (the job the reaction is declared on)",
    "derived": "a derivative want the orchestrator made for a want's refs' inputs (the parent want's id)",
    "system": "any other writer, as the log records it (the component)",
}
MAX_MADE_BY = 300
MADE_BY_PATTERN = f"^({'|'.join(MADE_BY_KINDS)})(:[^{CONTROL_CHARACTERS}]+)?$"


def made_by_problem(value: str) -> str | None:
    """Why `value` is no `made_by` filter (KIND or KIND:NAME), in one line; None if it is one."""
    kind, colon, name = value.partition(":")
    if kind not in MADE_BY_KINDS:
        return f"made_by must be one of {', '.join(MADE_BY_KINDS)}, optionally followed by :NAME; got {value[:40]!r}"
    if colon and not name:
        return f"made_by {value[:40]!r} has a colon but no name after it"
    if len(value) > MAX_MADE_BY or not re.fullmatch(MADE_BY_PATTERN, value):
        return f"made_by's name is at most {MAX_MADE_BY} characters and holds no control characters"
    return None


def _valid_made_by(value: str) -> str:
    problem = made_by_problem(value)
    if problem:
        raise ValueError(problem)
    return value


# The pattern is documented (so a client, and schemathesis, knows the kinds); `_valid_made_by` says what is wrong.
MadeBy = Annotated[
    str,
    AfterValidator(_valid_made_by),
    WithJsonSchema(
        {"type": "string", "pattern": MADE_BY_PATTERN, "maxLength": MAX_MADE_BY, "examples": ["user:ann", "schedule"]}
    ),
]
WantStateName = Literal[
    "idle", "building", "upstream_building", "successful", "failed", "upstream_failed", "canceled", "expired"
]


class WantRequest(StrictRequest):
    """Ask for partitions to be built (one want, one or more refs)."""

    # No max_length here: the service counts a request's refs in all and answers 413 over MAX_BATCH_REFS.
    # uniqueItems is documented only: the service names the refs given twice.
    refs: list[Ref] = Field(min_length=1, json_schema_extra={"uniqueItems": True})
    want_id: WantId | None = Field(default=None, description="Default: a new random id.")
    data_timestamp_ms: NonNegative | None = Field(default=None, description="Default: now.")
    ttl_seconds: NonNegative = Field(default=0, description="Give up after data_timestamp + ttl; 0 never.")
    sla_seconds: NonNegative = Field(default=0, description="Expected Live by data_timestamp + sla; 0 none.")
    comment: str = Field(default="", max_length=MAX_COMMENT)


class WantBatchRequest(StrictRequest):
    """Many wants in one append (backfills): at most 10,000 refs in all."""

    wants: list[WantRequest] = Field(min_length=1)


class WantCreatedOut(WrittenOut):
    want_id: str
    state: WantStateName


class WantBatchCreatedOut(BaseModel):
    first_seq: int
    last_seq: int
    wants: list[WantCreatedOut]


class ValidatedOut(BaseModel):
    """A batch that `create` would accept now (a concurrent writer may still take an id first)."""

    wants: int
    refs: int


class WantOut(BaseModel):
    want_id: str
    refs: list[str]
    state: WantStateName
    created_seq: int
    updated_seq: int
    created_ms: int
    data_timestamp_ms: int
    ttl_seconds: int
    sla_seconds: int
    expires_at_ms: int | None
    sla_deadline_ms: int | None
    sla_breached: bool
    comment: str
    source: str
    made_by: str = Field(
        description="Who made it, as `made_by` filters: user:NAME, schedule:NAME, reaction:JOB, derived:PARENT or "
        "system:COMPONENT."
    )
    parent_want_id: str | None
    root_want_id: str
    children: list[str]
    satisfied_by: list[str]
    cancel_reason: str | None


class RefStatusOut(BaseModel):
    """Where one ref of a want stands, and what it waits for."""

    ref: str
    instance_uuid: str | None
    state: InstanceStateName | None
    waiting_on: list[RefStatusOut] = Field(default_factory=list, description="Upstream refs not Live yet.")


class WantTreeOut(BaseModel):
    want_id: str
    state: WantStateName
    refs: list[str]
    children: list[WantTreeOut]


MAX_WANT_RUNS = 100
MAX_WANT_FAILURES = 20


class WantFailureOut(BaseModel):
    """A partition whose failure failed a want: the instance of one of its refs, or the upstream partition
    that instance waited for and that really failed."""

    ref: str
    instance_uuid: str
    state: InstanceStateName = Field(
        description="failed; upstream_failed only where the partition it waited for is no longer known (retention)."
    )
    reason: str | None = Field(description="Its note: the failed run's error message, or why it failed.")
    check: str | None = Field(
        description="The check that kept it from going Live (a failed blocking check, or one that errored), "
        "if the run that failed it recorded checks; null: none."
    )
    via: str | None = Field(
        description="The want's ref that failed upstream because of it; null: it is one of the want's refs."
    )


class WantDetailOut(WantOut):
    """A want as of a seq: its fields, where each of its refs stands, and its derivative wants."""

    refs_status: list[RefStatusOut]
    tree: WantTreeOut
    progress: dict[str, int] = Field(
        default_factory=dict,
        description=(
            "How many of its refs' canonical instances are in each state (a backfill's progress); 'none': no instance."
        ),
    )
    runs: list[str] = Field(
        default_factory=list,
        description=(
            f"The job runs that built (or are building) its refs' canonical instances, newest first "
            f"(at most {MAX_WANT_RUNS})."
        ),
    )
    cause: str | None = Field(
        default=None,
        description='Why automation made it ("schedule nightly ticked at 2026-01-02T02:00:00Z"); null: asked for.',
    )
    failures: list[WantFailureOut] = Field(
        default_factory=list,
        description=(
            f"Why a failed or upstream_failed want failed: each partition that failed it, with its error and "
            f"failing check (at most {MAX_WANT_FAILURES}, its refs in order); empty for a want in any other state."
        ),
    )
    as_of_seq: int = Field(description="The seq it is answered as of: `as_of_seq` when given, else the head.")
