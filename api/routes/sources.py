"""/api/v1/sources: source datasets, how each is found, their scans' progress (cursor redacted); start a pass."""

from partbuild.api.routes.common import operations_router

router = operations_router("sources", "scan_source", tags=["sources"])
