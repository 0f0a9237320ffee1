"""/api/v1/subscriptions: webhook subscriptions, their shards, offsets and dead letters."""

from partbuild.api.routes.common import operations_router

router = operations_router(
    "create_subscription",
    "list_subscriptions",
    "get_subscription",
    "pause_subscription",
    "resume_subscription",
    "delete_subscription",
    "reshard_subscription",
    "reset_subscription_offset",
    "list_dead_letters",
    "replay_dead_letters",
    "purge_dead_letters",
    tags=["subscriptions"],
)
