"""/api/v1/partitions and /api/v1/instances: canonical instances, history, taint, observe, lineage.

Refs contain slashes, so ref routes end in `{ref:path}` behind a fixed word
(`canonical`, `history`) that no ref can be confused with.
"""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Query

from partbuild.api import models as m
from partbuild.api.routes.common import ERRORS, AsOfSeq, Cursor, Limit, MinSeq, ServiceDep, UserDep

router = APIRouter(tags=["partitions"], responses=ERRORS)


@router.get("/partitions", summary="Canonical instances ordered by ref")
def list_partitions(
    service: ServiceDep,
    prefix: Annotated[str, Query(max_length=4096)] = "",
    state: m.InstanceStateName | None = None,
    cursor: Cursor = None,
    limit: Limit = 100,
    min_seq: MinSeq = None,
) -> m.Page[m.Instance]:
    return service.partitions(prefix=prefix, state_filter=state, cursor=cursor, limit=limit, min_seq=min_seq)


@router.get("/partitions/canonical/{ref:path}", summary="The current instance of a ref")
def canonical(ref: str, service: ServiceDep, as_of_seq: AsOfSeq = None, min_seq: MinSeq = None) -> m.Instance:
    return service.canonical(ref, as_of_seq, min_seq)


@router.get("/partitions/history/{ref:path}", summary="Every instance of a ref, newest first")
def history(ref: str, service: ServiceDep, as_of_seq: AsOfSeq = None, min_seq: MinSeq = None) -> list[m.Instance]:
    return service.history(ref, as_of_seq, min_seq)


@router.post("/partitions/taint", status_code=201, summary="Declare a Live partition's data bad")
def taint(request: m.TaintRequest, service: ServiceDep, user: UserDep) -> m.Written:
    return service.taint(request, user)


@router.post("/partitions/observe", status_code=201, summary="A source partition became available")
def observe(request: m.ObserveRequest, service: ServiceDep, user: UserDep) -> m.Written:
    return service.observe(request, user)


@router.get("/instances/{uuid}", summary="One partition instance by UUID")
def instance(uuid: str, service: ServiceDep, as_of_seq: AsOfSeq = None, min_seq: MinSeq = None) -> m.Instance:
    return service.instance(uuid, as_of_seq, min_seq)


@router.get("/instances/{uuid}/lineage", summary="Upstream and downstream instances to a depth")
def lineage(
    uuid: str,
    service: ServiceDep,
    direction: Literal["upstream", "downstream", "both"] = "both",
    depth: Annotated[int, Query(ge=0, le=m.MAX_LINEAGE_DEPTH)] = 1,
    as_of_seq: AsOfSeq = None,
    min_seq: MinSeq = None,
) -> m.Lineage:
    return service.lineage(uuid, direction=direction, depth=depth, as_of_seq=as_of_seq, min_seq=min_seq)
