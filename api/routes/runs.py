"""/api/v1/job-runs, /api/v1/events and /api/v1/audit: what ran, the raw log, replay for audit."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from partbuild.api import models as m
from partbuild.api.routes.common import ERRORS, AsOfSeq, Cursor, Limit, MinSeq, ServiceDep

router = APIRouter(responses=ERRORS)


@router.get("/job-runs", tags=["job runs"], summary="List job runs, oldest first")
def list_job_runs(
    service: ServiceDep,
    state: m.JobRunStateName | None = None,
    job: Annotated[str | None, Query(max_length=256)] = None,
    cursor: Cursor = None,
    limit: Limit = 100,
    min_seq: MinSeq = None,
) -> m.Page[m.JobRun]:
    return service.job_runs(state_filter=state, job=job, cursor=cursor, limit=limit, min_seq=min_seq)


@router.get("/job-runs/{job_run_id}", tags=["job runs"], summary="One job run")
def get_job_run(job_run_id: str, service: ServiceDep, min_seq: MinSeq = None) -> m.JobRun:
    return service.job_run(job_run_id, min_seq)


@router.get("/events", tags=["events"], summary="The raw event log as JSON, by seq")
def events(
    service: ServiceDep,
    after_seq: Annotated[int, Query(ge=0, le=2**62)] = 0,
    limit: Limit = 100,
) -> m.Page[m.StoredEvent]:
    return service.events(after_seq, limit)


@router.post("/audit", tags=["audit"], summary="Replay the log: head seq, digest, counts, rejected events")
def audit(
    service: ServiceDep,
    rejected: Annotated[int, Query(ge=0, le=1_000)] = 100,
    as_of_seq: AsOfSeq = None,
    verify: Annotated[bool, Query(description="Also replay from seq 0 without snapshots and compare.")] = False,
) -> m.Audit:
    return service.audit(rejected, as_of_seq, verify)
