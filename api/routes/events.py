"""/api/v1/events: the raw event log as JSON, paged by seq."""

from partbuild.api.routes.common import operations_router

router = operations_router("events", tags=["events"])
