"""Models of what changed between two seqs (`/api/v1/changes`)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from partbuild.api.models.common import InstanceStateName
from partbuild.api.models.runs import JobRunStateName
from partbuild.api.models.wants import WantStateName

ChangeKind = Literal["instance_created", "instance_state", "want_state", "job_run_state", "canonical_moved"]
StateName = InstanceStateName | WantStateName | JobRunStateName


class ChangeOut(BaseModel):
    """One change at `seq`: from the state as of `seq - 1` to the state as of `seq`."""

    seq: int
    kind: ChangeKind
    id: str = Field(description="The instance's UUID, the want's or job run's id; the ref for canonical_moved.")
    ref: str | None = Field(description="The partition ref, for instance_created, instance_state, canonical_moved.")
    from_state: StateName | None = Field(
        default=None, description="The state before (null: it was created at this seq); not for canonical_moved."
    )
    to_state: StateName | None = Field(default=None, description="The state after; not for canonical_moved.")
    from_uuid: str | None = Field(
        default=None, description="canonical_moved: the ref's canonical instance before (null: it had none)."
    )
    to_uuid: str | None = Field(default=None, description="canonical_moved: the ref's new canonical instance.")
