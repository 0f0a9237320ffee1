"""/healthz, /metrics and /api/v1/buckets: how far the served state is, Prometheus metrics, bucket layouts."""

from fastapi import Depends, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from partbuild.api.auth import require
from partbuild.api.routes.common import ServiceDep, operations_router
from partbuild.state.ops.tokens import Role

router = operations_router("health", "bucket_layouts", "reshard", tags=["operations"])


# Metrics name jobs, sources and subscriptions: a reader's token (Prometheus sends it as a bearer token).
@router.get(
    "/metrics",
    summary="Prometheus metrics",
    response_class=Response,
    dependencies=[Depends(require(Role.READER, "GET /metrics"))],
)
def metrics(service: ServiceDep) -> Response:
    return Response(generate_latest(service.registry), media_type=CONTENT_TYPE_LATEST)
