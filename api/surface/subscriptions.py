"""Subscriptions: webhook subscriptions of the log's events, their shards, offsets and dead letters."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Protocol

from partbuild.api.models.common import QueryInt
from partbuild.api.surface.common import ANONYMOUS, MAX_SEQ, AsOfSeq, Body, Limit, MinSeq, Path, Query, User, operation
from partbuild.state.ops.roles import Role

if TYPE_CHECKING:  # its models load when an operation's types are first needed (`Operation`)
    from partbuild.api.models.subscriptions import (
        DeadLetterListOut,
        DeadLetterRequest,
        DeadLettersMovedOut,
        OffsetResetRequest,
        ReshardSubscriptionRequest,
        SubscriptionCreatedOut,
        SubscriptionDetailOut,
        SubscriptionListOut,
        SubscriptionRequest,
        SubscriptionWrittenOut,
    )

TAG = "subscriptions"
SubscriptionNamePath = Annotated[str, Path(description="A subscription's name.", examples=("alerts",))]


class SubscriptionsApi(Protocol):
    @operation("POST", "/subscriptions", "Subscribe a webhook to the log's events", status=201, role=Role.ADMIN)
    def create_subscription(
        self, request: Annotated[SubscriptionRequest, Body()], user: User = ANONYMOUS
    ) -> SubscriptionCreatedOut: ...

    @operation(
        "GET", "/subscriptions", "Webhook subscriptions: settings, topics, lag, queues, counters", role=Role.ADMIN
    )
    def list_subscriptions(self, as_of_seq: AsOfSeq = None, min_seq: MinSeq = None) -> SubscriptionListOut: ...

    @operation(
        "GET", "/subscriptions/{name}", "One subscription: settings, topics, lag, queues, counters", role=Role.ADMIN
    )
    def get_subscription(
        self, name: SubscriptionNamePath, as_of_seq: AsOfSeq = None, min_seq: MinSeq = None
    ) -> SubscriptionDetailOut: ...

    @operation("POST", "/subscriptions/{name}/pause", "Stop delivering; offsets and queues stay", role=Role.ADMIN)
    def pause_subscription(self, name: SubscriptionNamePath, user: User = ANONYMOUS) -> SubscriptionWrittenOut: ...

    @operation("POST", "/subscriptions/{name}/resume", "Deliver again from where it paused", role=Role.ADMIN)
    def resume_subscription(self, name: SubscriptionNamePath, user: User = ANONYMOUS) -> SubscriptionWrittenOut: ...

    @operation("DELETE", "/subscriptions/{name}", "Delete a subscription and its queues", role=Role.ADMIN)
    def delete_subscription(self, name: SubscriptionNamePath, user: User = ANONYMOUS) -> SubscriptionWrittenOut: ...

    @operation(
        "POST", "/subscriptions/{name}/shards", "Change a subscription's shard count while it runs", role=Role.ADMIN
    )
    def reshard_subscription(
        self,
        name: SubscriptionNamePath,
        request: Annotated[ReshardSubscriptionRequest, Body()],
        user: User = ANONYMOUS,
    ) -> SubscriptionWrittenOut: ...

    @operation(
        "POST",
        "/subscriptions/{name}/offsets",
        "Rewind or fast-forward the main topic; fast-forward RQ/DLQ",
        role=Role.ADMIN,
    )
    def reset_subscription_offset(
        self, name: SubscriptionNamePath, request: Annotated[OffsetResetRequest, Body()], user: User = ANONYMOUS
    ) -> SubscriptionWrittenOut: ...

    @operation("GET", "/subscriptions/{name}/dlq", "A subscription's dead letters, in event order", role=Role.ADMIN)
    def list_dead_letters(
        self,
        name: SubscriptionNamePath,
        after_seq: Annotated[
            QueryInt, Query(ge=-1, le=MAX_SEQ, description="Messages of events after this seq (-1: all).")
        ] = -1,
        limit: Limit = 100,
    ) -> DeadLetterListOut: ...

    @operation(
        "POST", "/subscriptions/{name}/dlq/replay", "Deliver dead letters again, each group's in order", role=Role.ADMIN
    )
    def replay_dead_letters(
        self, name: SubscriptionNamePath, request: Annotated[DeadLetterRequest, Body()], user: User = ANONYMOUS
    ) -> DeadLettersMovedOut: ...

    @operation("POST", "/subscriptions/{name}/dlq/purge", "Drop dead letters", role=Role.ADMIN)
    def purge_dead_letters(
        self, name: SubscriptionNamePath, request: Annotated[DeadLetterRequest, Body()], user: User = ANONYMOUS
    ) -> DeadLettersMovedOut: ...
