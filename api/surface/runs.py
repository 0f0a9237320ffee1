"""Job runs: list, one run (what it built and what it read), its log lines, cancel."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Protocol

from partbuild.api.models.common import CancelRequest, PageOut, QueryFloat, QueryInt, WrittenOut
from partbuild.api.surface.common import (
    ANONYMOUS,
    MAX_SEQ,
    AsOfSeq,
    Body,
    Cursor,
    Limit,
    MinSeq,
    Path,
    Query,
    User,
    operation,
)
from partbuild.state.ops.roles import Role

if TYPE_CHECKING:  # its models load when an operation's types are first needed (`Operation`)
    from partbuild.api.models.runs import JobRunDetailOut, JobRunOut, JobRunStateName, RunLogsOut

TAG = "job runs"
RunIdPath = Annotated[str, Path(description="A job run's id.")]
MAX_LOG_PAGE = 5000
MAX_FOLLOW_S = 30.0


class RunsApi(Protocol):
    @operation("GET", "/job-runs", "List job runs, oldest first", role=Role.READER)
    def job_runs(
        self,
        state_filter: Annotated[
            JobRunStateName | None, Query(alias="state", description="Only job runs in this state.")
        ] = None,
        job: Annotated[str | None, Query(max_length=256, description="Only runs of this job.")] = None,
        cursor: Cursor = None,
        limit: Limit = 100,
        as_of_seq: AsOfSeq = None,
        min_seq: MinSeq = None,
    ) -> PageOut[JobRunOut]: ...

    @operation("GET", "/job-runs/{job_run_id}", "One job run: what it built and what it read", role=Role.READER)
    def job_run(self, job_run_id: RunIdPath, as_of_seq: AsOfSeq = None, min_seq: MinSeq = None) -> JobRunDetailOut: ...

    @operation(
        "GET",
        "/job-runs/{job_run_id}/logs",
        "A job run's log lines, paged; `follow` waits for new ones",
        role=Role.READER,
    )
    def job_run_logs(
        self,
        job_run_id: RunIdPath,
        after: Annotated[
            QueryInt, Query(ge=0, le=MAX_SEQ, description="Only lines numbered above this (`next_after`).")
        ] = 0,
        limit: Annotated[QueryInt, Query(ge=1, le=MAX_LOG_PAGE, description="Lines per page.")] = 1000,
        follow: Annotated[
            QueryFloat,
            Query(ge=0, le=MAX_FOLLOW_S, description="Seconds to wait for a line while the run is active (0: none)."),
        ] = 0.0,
    ) -> RunLogsOut: ...

    @operation("POST", "/job-runs/{job_run_id}/cancel", "Stop a queued or running job run", role=Role.WRITER)
    def cancel_job_run(
        self,
        job_run_id: RunIdPath,
        request: Annotated[CancelRequest | None, Body()] = None,
        user: User = ANONYMOUS,
    ) -> WrittenOut: ...
