"""/api/v1/audit: replay the log for an audit (head seq, digest, counts, rejected events)."""

from partbuild.api.routes.common import operations_router

router = operations_router("audit", tags=["audit"])
