"""Models of job runs (`/api/v1/job-runs`)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from partbuild.api.models.partitions import CheckResultOut

JobRunStateName = Literal["queued", "running", "succeeded", "failed", "dep_miss", "canceled"]


class InstanceChecksOut(BaseModel):
    """The checks a run's outcome recorded on one of its output instances (issue 24)."""

    instance_uuid: str
    ref: str | None = Field(description="None when retention dropped the instance since.")
    checks: list[CheckResultOut]


class JobRunOut(BaseModel):
    job_run_id: str
    job_label: str
    state: JobRunStateName
    instance_uuids: list[str]
    refs: list[str]
    created_seq: int
    updated_seq: int
    created_ms: int
    updated_ms: int
    last_heartbeat_ms: int
    attempt: int = Field(description="1 for a partition's first run, 2 for its first retry, ...")
    inputs: list[str]
    error_class: str | None
    error_message: str | None
    retry_after_ms: int
    missing_refs: list[str]
    cancel_reason: str | None
    checks: list[InstanceChecksOut] = Field(
        default_factory=list,
        description="The checks its outcome recorded, per output instance checked (empty: none, or no outcome yet).",
    )
    failed_outputs: list[str] = Field(
        default_factory=list,
        description="A succeeded run's outputs that failed on their own (their own error or check): the others went "
        "Live. Each instance's note says why.",
    )
    split: bool = Field(
        default=False,
        description="It failed as a whole with several outputs: each was retried in a run of its own.",
    )


class JobRunDetailOut(JobRunOut):
    """One job run as of a seq."""

    as_of_seq: int = Field(description="The seq it is answered as of: `as_of_seq` when given, else the head.")


class RunLogLineOut(BaseModel):
    """One line a job run logged (redacted when it was written)."""

    line_no: int = Field(description="Counts from 1 within the run: pass the last one as `after` for the next page.")
    time_ms: int
    level: str = Field(description="The logging level name: DEBUG, INFO, WARNING, ERROR, CRITICAL.")
    text: str


class RunLogsOut(BaseModel):
    """A page of a job run's log lines."""

    job_run_id: str
    lines: list[RunLogLineOut]
    next_after: int = Field(description="The `after` of the next page: the last line number given (or `after`).")
    active: bool = Field(description="Whether the run was queued or running when read: more lines may come.")
