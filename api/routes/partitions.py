"""/api/v1/partitions and /api/v1/instances: canonical instances, history, taint, observe, lineage, retention.

Refs contain slashes, so ref routes end in `{ref:path}` behind a fixed word
(`canonical`, `history`) that no ref can be confused with.
"""

from partbuild.api.routes.common import operations_router

router = operations_router(
    "partitions", "canonical", "history", "taint", "observe", "instance", "lineage", "retention", tags=["partitions"]
)
