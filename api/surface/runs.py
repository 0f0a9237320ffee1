"""Job runs: list, one run (what it built and what it read), cancel."""

from __future__ import annotations

from typing import Annotated, Protocol

from fastapi import Body, Path, Query

from partbuild.api.models.common import CancelRequest, PageOut, WrittenOut
from partbuild.api.models.runs import JobRunDetailOut, JobRunOut, JobRunStateName
from partbuild.api.surface.common import ANONYMOUS, AsOfSeq, Cursor, Limit, MinSeq, User, operation
from partbuild.state.ops.roles import Role

TAG = "job runs"
RunIdPath = Annotated[str, Path(description="A job run's id.")]
RunStateFilter = Annotated[JobRunStateName | None, Query(alias="state", description="Only job runs in this state.")]


class RunsApi(Protocol):
    @operation("GET", "/job-runs", "List job runs, oldest first", role=Role.READER)
    def job_runs(
        self,
        state_filter: RunStateFilter = None,
        job: Annotated[str | None, Query(max_length=256, description="Only runs of this job.")] = None,
        cursor: Cursor = None,
        limit: Limit = 100,
        as_of_seq: AsOfSeq = None,
        min_seq: MinSeq = None,
    ) -> PageOut[JobRunOut]: ...

    @operation("GET", "/job-runs/{job_run_id}", "One job run: what it built and what it read", role=Role.READER)
    def job_run(self, job_run_id: RunIdPath, as_of_seq: AsOfSeq = None, min_seq: MinSeq = None) -> JobRunDetailOut: ...

    @operation("POST", "/job-runs/{job_run_id}/cancel", "Stop a queued or running job run", role=Role.WRITER)
    def cancel_job_run(
        self,
        job_run_id: RunIdPath,
        request: Annotated[CancelRequest | None, Body()] = None,
        user: User = ANONYMOUS,
    ) -> WrittenOut: ...
