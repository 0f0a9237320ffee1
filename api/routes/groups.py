"""/api/v1/groups and /api/v1/group/{name}: worker groups, their epochs, members, bucket ownership, heartbeats."""

from partbuild.api.routes.common import operations_router

router = operations_router("groups", "group", tags=["worker groups"])
