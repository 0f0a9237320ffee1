"""/api/v1/wants: create (one or a batch), validate a batch, list, get with its derivative tree, cancel."""

from partbuild.api.routes.common import operations_router

router = operations_router(
    "create_want", "create_wants", "validate_wants", "wants", "want", "cancel_want", tags=["wants"]
)
