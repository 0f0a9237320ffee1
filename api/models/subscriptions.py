"""Models of subscriptions (`/api/v1/subscriptions`): settings, topics, lag, offsets, dead letters."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic.json_schema import SkipJsonSchema

from partbuild.api.models.common import MAX_SAFE_INT, JsonInt, NonNegative, StrictRequest, WrittenOut
from partbuild.state.fold.registry import EVENT_TYPES
from partbuild.state.fold.subscription_records import (
    FORMATS,
    MAX_ATTEMPTS,
    MAX_BACKOFF_MS,
    MAX_ENDPOINT_CHARS,
    MAX_FILTER_CHARS,
    MAX_FILTER_ENTRIES,
    MAX_TIMEOUT_MS,
    MIN_TIMEOUT_MS,
    ORDERINGS,
    QueueName,
)
from partbuild.state.rules.topics import MAX_PARTITIONS

SUBSCRIPTION_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"
OrderingName = Literal[ORDERINGS]  # type: ignore[valid-type]
FormatName = Literal[FORMATS]  # type: ignore[valid-type]
StatusName = Literal["active", "paused", "deleted"]
EventTypeName = Literal[EVENT_TYPES]  # type: ignore[valid-type]
FilterText = Annotated[str, Field(min_length=1, max_length=MAX_FILTER_CHARS)]
Count = Annotated[int, Field(ge=1, le=MAX_PARTITIONS), JsonInt]


class SubscriptionFilterRequest(StrictRequest):
    """Which events a subscription delivers; empty fields do not filter."""

    event_types: list[EventTypeName] = Field(
        default_factory=list,
        max_length=MAX_FILTER_ENTRIES,
        description="Event types; empty: every build event (wants, job runs, taints, observations).",
    )
    ref_prefixes: list[FilterText] = Field(default_factory=list, max_length=MAX_FILTER_ENTRIES)
    ref_patterns: list[FilterText] = Field(
        default_factory=list, max_length=MAX_FILTER_ENTRIES, description="Shell-style patterns: *, ?, [..]."
    )
    job: str = Field(default="", max_length=MAX_FILTER_CHARS, description="Only job-run events of this job.")
    root_want: str = Field(default="", max_length=MAX_FILTER_CHARS, description="Only messages serving this root want.")


class RetryPolicyRequest(StrictRequest):
    """How failed deliveries are retried before they are dead-lettered."""

    max_attempts: Annotated[int, Field(ge=1, le=MAX_ATTEMPTS), JsonInt] = 8
    backoff_initial_ms: Annotated[int, Field(ge=1, le=MAX_BACKOFF_MS), JsonInt] = 500
    backoff_max_ms: Annotated[int, Field(ge=1, le=MAX_BACKOFF_MS), JsonInt] = 60_000
    max_age_ms: Annotated[int, Field(ge=0, le=MAX_SAFE_INT), JsonInt] = 0
    timeout_ms: Annotated[int, Field(ge=MIN_TIMEOUT_MS, le=MAX_TIMEOUT_MS), JsonInt] = 10_000


class SubscriptionRequest(StrictRequest):
    """A new subscription."""

    name: str = Field(pattern=SUBSCRIPTION_NAME_PATTERN, examples=["alerts"])
    endpoint: str = Field(min_length=1, max_length=MAX_ENDPOINT_CHARS, examples=["https://hooks.example.com/pb"])
    filter: SubscriptionFilterRequest = Field(default_factory=SubscriptionFilterRequest)
    ordering: OrderingName = "partition_ref"
    format: FormatName = "partbuild"
    retry: RetryPolicyRequest = Field(default_factory=RetryPolicyRequest)
    shard_count: Count = 1
    main_partitions: Count = 12
    rq_partitions: Count = 12
    dlq_partitions: Count = 12
    secret: str | None = Field(
        None,
        min_length=24,
        max_length=200,
        pattern=r"^whsec_[A-Za-z0-9+/=]+$",
        description="The signing secret (`whsec_` + base64 of 24 to 64 bytes); omitted: one is made and returned once.",
    )
    start_after_seq: NonNegative | None = Field(
        None, description="Deliver the events after this seq (0: the whole log); omitted: only new events."
    )


class ReshardSubscriptionRequest(StrictRequest):
    """A new shard count, and the partition counts the topics grow to (0: as needed)."""

    shard_count: Count
    main_partitions: Annotated[int, Field(ge=0, le=MAX_PARTITIONS), JsonInt] = 0
    rq_partitions: Annotated[int, Field(ge=0, le=MAX_PARTITIONS), JsonInt] = 0
    dlq_partitions: Annotated[int, Field(ge=0, le=MAX_PARTITIONS), JsonInt] = 0


class OffsetResetRequest(StrictRequest):
    """Move a queue's read offset: to a seq, or to the last event recorded before a time (exactly one)."""

    model_config = ConfigDict(
        extra="forbid",
        strict=True,
        json_schema_extra={"oneOf": [{"required": ["to_seq"]}, {"required": ["to_time_ms"]}]},
    )

    queue: QueueName = "main"
    # Not nullable: a request names the one it means (the document's oneOf), never both.
    to_seq: NonNegative | SkipJsonSchema[None] = None
    to_time_ms: NonNegative | SkipJsonSchema[None] = Field(None, description="Milliseconds since the epoch.")

    @field_validator("to_seq", "to_time_ms", mode="before")
    @classmethod
    def _not_null(cls, value: object) -> object:
        if value is None:  # only a value given is checked: leaving a field out is how it is absent
            raise ValueError("leave the field out instead of null")
        return value

    @model_validator(mode="after")
    def _exactly_one_target(self) -> OffsetResetRequest:
        if (self.to_seq is None) == (self.to_time_ms is None):
            raise ValueError("give exactly one of to_seq and to_time_ms")
        return self


class DeadLetterRequest(StrictRequest):
    """Which dead letters to replay or purge: one group's, or all."""

    group: str | None = Field(None, min_length=1, max_length=MAX_FILTER_CHARS)


class StorageTopicOut(BaseModel):
    partitions: int
    k: int
    start_seq: int


class CompositeTopicOut(BaseModel):
    storage_topics: list[StorageTopicOut]
    produce_pointer: int


class SubscriptionOut(BaseModel):
    """A subscription: its settings, topics and where its deliveries stand (the secret never shows).

    Read as of a seq, its settings are as they were then; where its deliveries stand (lag, queues,
    counters) is always now: deliveries are kept beside the log, not in it.
    """

    name: str
    status: StatusName
    endpoint: str
    filter: SubscriptionFilterRequest
    ordering: OrderingName
    format: FormatName
    retry: RetryPolicyRequest
    shard_count: int
    main_topic: CompositeTopicOut
    rq_topic: CompositeTopicOut
    dlq_topic: CompositeTopicOut
    secret_digest: str
    created_seq: int
    start_after_seq: int
    lag_events: int = Field(description="Events of the log not yet handled by every shard (a gauge).")
    lag_seconds: float = Field(description="How long the oldest unhandled event has waited (a gauge).")
    rq_messages: int = Field(description="Messages in the retry queue now, waiting for another attempt (a gauge).")
    dlq_messages: int = Field(
        description="Messages in the dead-letter queue now; replay and purge take them out (a gauge)."
    )
    delivered: int = Field(
        description="Messages the receiver accepted with a 2xx answer, at the first attempt or a retry "
        "(a total since the subscription was created)."
    )
    retried: int = Field(
        description="Failed delivery attempts after which the message stayed queued for another attempt: "
        "a retryable failure with attempts and age left (a total; one message failing twice counts 2)."
    )
    dead_lettered: int = Field(
        description="Messages put in the dead-letter queue: a failed ordering key's head and every message "
        "moved or queued behind it, each once (a total: replay and purge do not lower it). Totals kept by "
        "versions before this counted one per failed head."
    )


class SubscriptionListOut(BaseModel):
    subscriptions: list[SubscriptionOut]
    as_of_seq: int = Field(description="The seq the settings are as of: `as_of_seq` when given, else the head.")


class SubscriptionDetailOut(SubscriptionOut):
    """One subscription; its settings as of a seq."""

    as_of_seq: int = Field(description="The seq the settings are as of: `as_of_seq` when given, else the head.")


class SubscriptionCreatedOut(WrittenOut):
    subscription: SubscriptionOut
    secret: str | None = Field(description="The signing secret made for it: shown this once. Null if you gave one.")


class SubscriptionWrittenOut(WrittenOut):
    subscription: SubscriptionOut


class DeadLetterOut(BaseModel):
    """A message in the dead-letter queue."""

    message_id: str
    group: str
    seq: int
    event_type: str | None
    attempts: int
    last_status: int
    last_error: str
    first_failed_ms: int
    topic: int
    partition: int
    offset: int


class DeadLetterListOut(BaseModel):
    messages: list[DeadLetterOut]
    next_after_seq: int | None = Field(description="Pass as `after_seq` for the next page; null: the last page.")


class DeadLettersMovedOut(BaseModel):
    subscription: str
    moved: int
