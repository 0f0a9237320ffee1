"""/healthz, /metrics and /api/v1/buckets: how far the served state is, Prometheus metrics, bucket layouts."""

from fastapi import Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from partbuild.api.routes.common import ServiceDep, operations_router

router = operations_router("health", "bucket_layouts", "reshard", tags=["operations"])


@router.get("/metrics", summary="Prometheus metrics", response_class=Response)
def metrics(service: ServiceDep) -> Response:
    return Response(generate_latest(service.registry), media_type=CONTENT_TYPE_LATEST)
