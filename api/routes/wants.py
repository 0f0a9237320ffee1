"""/api/v1/wants: create (one or a batch), list, get with its derivative tree, cancel."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Body, Query

from partbuild.api import models as m
from partbuild.api.routes.common import ERRORS, Cursor, Limit, MinSeq, ServiceDep, UserDep

router = APIRouter(prefix="/wants", tags=["wants"], responses=ERRORS)


@router.post("", status_code=201, summary="Want partitions built")
async def create_want(request: m.WantRequest, service: ServiceDep, user: UserDep) -> m.WantCreated:
    # Runs on the event loop, not in a worker thread: a single want is a sub-millisecond append
    # that writers take turns at anyway, and the hand-off to a thread cost more than the write.
    return service.create_wants([request], user).wants[0]


@router.post("/batch", status_code=201, summary="Many wants in one atomic append (backfills)")
def create_wants(request: m.WantBatchRequest, service: ServiceDep, user: UserDep) -> m.WantBatchCreated:
    return service.create_wants(request.wants, user)


@router.post("/batch/validate", summary="Check a batch as /wants/batch would, recording nothing")
def validate_wants(request: m.WantBatchRequest, service: ServiceDep) -> m.Validated:
    return service.validate_wants(request.wants)


@router.get("", summary="List wants, oldest first")
def list_wants(
    service: ServiceDep,
    state: m.WantStateName | None = None,
    ref: Annotated[str | None, Query(max_length=4096, description="Only wants naming this ref.")] = None,
    root: Annotated[str | None, Query(max_length=256, description="Only wants under this root want.")] = None,
    cursor: Cursor = None,
    limit: Limit = 100,
    min_seq: MinSeq = None,
) -> m.Page[m.Want]:
    return service.wants(state_filter=state, ref=ref, root=root, cursor=cursor, limit=limit, min_seq=min_seq)


@router.get("/{want_id}", summary="A want, why it waits, and its derivative wants")
def get_want(want_id: str, service: ServiceDep, min_seq: MinSeq = None) -> m.WantDetail:
    return service.want(want_id, min_seq)


@router.post("/{want_id}/cancel", summary="Cancel a want (and its active derivative wants)")
def cancel_want(
    want_id: str,
    service: ServiceDep,
    user: UserDep,
    request: Annotated[m.CancelRequest | None, Body()] = None,
) -> m.Written:
    return service.cancel_want(want_id, request.reason if request else "", user)
