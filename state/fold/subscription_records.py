"""Webhook subscriptions as the fold knows them: their record and the rules their settings follow.

A subscription delivers the log's events to an HTTP endpoint (docs/subscriptions.md).
Its configuration and every operator change to it are events; this module holds
what the fold keeps of them (`Subscription`, the record of `BuildState.subscriptions`:
settings, status, the layouts of its main topic, retry queue (RQ) and dead-letter
queue (DLQ), the resets to apply, keyed `name@created_seq`) and the pure validation
of their settings. `FORMATS` is the one list of payload formats. The event types a
filter may name are the members of `Event.payload` (`EVENT_TYPES`, the registry's rows), and the default
filter is the fixed `BUILD_EVENT_TYPES`. Where deliveries stand (offsets,
the RQ and the DLQ) is not here: it changes with every delivery and lives in the
database (`state/ops/deliveries.py`), beside the offsets that move past it.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.fold.records import _Record
from partbuild.state.rules.topics import CompositeTopic

NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
ORDERINGS = ("partition_ref", "job_run", "root_want")
# The payload formats a subscription may ask for: api/webhook_payloads.py renders each.
FORMATS = ("partbuild", "cloudevents", "openlineage")
MAX_FILTER_ENTRIES = 64
MAX_FILTER_CHARS = 512
MAX_ENDPOINT_CHARS = 2048
MAX_ATTEMPTS = 100
MAX_BACKOFF_MS = 24 * 3600 * 1000
MIN_TIMEOUT_MS, MAX_TIMEOUT_MS = 100, 300_000
QueueName = Literal["main", "rq", "dlq"]
QUEUES: dict[pb.SubscriptionQueue, QueueName] = {
    pb.SUBSCRIPTION_QUEUE_MAIN: "main",
    pb.SUBSCRIPTION_QUEUE_RQ: "rq",
    pb.SUBSCRIPTION_QUEUE_DLQ: "dlq",
}
StatusName = Literal["active", "paused", "deleted"]


# Every event type: the members of `Event.payload`, in order (the registry has a row for each; its test checks).
EVENT_TYPES: tuple[str, ...] = tuple(field.name for field in pb.Event.DESCRIPTOR.oneofs_by_name["payload"].fields)
# What a subscription made without event types gets, each time its create event is folded: the events about
# wants, partitions and job runs, fixed for good. A type added here would change what existing subscriptions
# receive and the digests of the logs that hold one.
BUILD_EVENT_TYPES: tuple[str, ...] = (
    "want_create",
    "want_cancel",
    "job_run_buffer",
    "job_run_success",
    "job_run_failure",
    "job_run_cancel",
    "job_run_missing_deps",
    "partition_taint",
    "partition_observed",
)


class Subscription(_Record):
    """One subscription: its settings, its topics' layouts, its status and the resets to apply."""

    __slots__ = (
        "backoff_initial_ms",
        "backoff_max_ms",
        "created_ms",
        "created_seq",
        "dlq",
        "dlq_floor",
        "endpoint",
        "event_types",
        "format",
        "job",
        "main",
        "max_age_ms",
        "max_attempts",
        "name",
        "ordering",
        "ref_patterns",
        "ref_prefixes",
        "resets",
        "root_want",
        "rq",
        "rq_floor",
        "secret_digest",
        "shard_count",
        "start_after_seq",
        "status",
        "timeout_ms",
        "updated_ms",
        "updated_seq",
    )

    def __init__(self, seq: int, created_ms: int, msg: pb.SubscriptionCreate) -> None:
        self.name = msg.name
        self.created_seq = seq
        self.created_ms = created_ms
        self.endpoint = msg.endpoint
        self.event_types = tuple(msg.filter.event_types) or BUILD_EVENT_TYPES
        self.ref_prefixes = tuple(msg.filter.ref_prefixes)
        self.ref_patterns = tuple(msg.filter.ref_patterns)
        self.job = msg.filter.job
        self.root_want = msg.filter.root_want
        self.ordering = msg.ordering
        self.format = msg.format
        retry = msg.retry
        self.max_attempts = retry.max_attempts
        self.backoff_initial_ms = retry.backoff_initial_ms
        self.backoff_max_ms = retry.backoff_max_ms
        self.max_age_ms = retry.max_age_ms
        self.timeout_ms = retry.timeout_ms
        self.shard_count = msg.shard_count
        self.start_after_seq = msg.start_after_seq if msg.HasField("start_after_seq") else seq
        self.main = CompositeTopic.create(msg.main_partitions, start_seq=self.start_after_seq + 1)
        self.rq = CompositeTopic.create(msg.rq_partitions)
        self.dlq = CompositeTopic.create(msg.dlq_partitions)
        self.secret_digest = msg.secret_digest
        self.status: StatusName = "active"
        # (seq of the reset event, queue name, to_seq), in log order: delivery applies each once.
        self.resets: tuple[tuple[int, str, int], ...] = ()
        self.rq_floor = self.dlq_floor = 0  # the highest fast-forward of each internal queue
        self.updated_seq = seq
        self.updated_ms = created_ms

    @property
    def key(self) -> str:
        """The id of this incarnation of the name: the database rows of its deliveries are keyed by it."""
        return f"{self.name}@{self.created_seq}"

    def main_topic_index(self, seq: int) -> int:
        """The main storage topic an event at `seq` was produced to (the first for events before the subscription)."""
        return self.main.topic_index_at_seq(max(seq, self.main.storage_topics[0].start_seq))

    def queue(self, name: str) -> CompositeTopic:
        return {"main": self.main, "rq": self.rq, "dlq": self.dlq}[name]

    def digest_values(self) -> tuple[Any, ...]:
        """Every field, for the state digest (topics as their repr)."""
        return tuple(repr(value) if isinstance(value, CompositeTopic) else value for value in self.__getstate__())


def endpoint_problem(url: str) -> str | None:
    """Why an endpoint URL cannot be delivered to, or None. Credentials in it are refused: the
    URL is shown by the API and the log, so a secret belongs in the signing secret, not here."""
    if not url or len(url) > MAX_ENDPOINT_CHARS:
        return f"an endpoint is a URL of 1 to {MAX_ENDPOINT_CHARS} characters"
    match = re.fullmatch(r"(https?)://([^/?#]+)([/?#].*)?", url)
    if match is None or any(not ch.isprintable() or ch.isspace() for ch in url):
        return "an endpoint is an http:// or https:// URL without spaces"
    if "@" in match.group(2):
        return "an endpoint URL must not carry credentials (user:password@); sign with the subscription's secret"
    return None


def filter_problem(flt: pb.SubscriptionFilter) -> str | None:
    """Why a filter is invalid, or None."""
    known = EVENT_TYPES
    for event_type in flt.event_types:
        if event_type not in known:
            return f"unknown event type {event_type[:80]!r}; known: {', '.join(known)}"
    for what, values in (("event types", flt.event_types), ("ref prefixes", flt.ref_prefixes)):
        if len(values) > MAX_FILTER_ENTRIES:
            return f"a filter has at most {MAX_FILTER_ENTRIES} {what}"
    if len(flt.ref_patterns) > MAX_FILTER_ENTRIES:
        return f"a filter has at most {MAX_FILTER_ENTRIES} ref patterns"
    for value in (*flt.ref_prefixes, *flt.ref_patterns, flt.job, flt.root_want):
        if len(value) > MAX_FILTER_CHARS:
            return f"a filter value is at most {MAX_FILTER_CHARS} characters"
    if any(not value for value in (*flt.ref_prefixes, *flt.ref_patterns)):
        return "a ref prefix or pattern is not empty"
    return None


def retry_problem(retry: pb.RetryPolicy) -> str | None:
    """Why a retry policy is invalid, or None."""
    if not 1 <= retry.max_attempts <= MAX_ATTEMPTS:
        return f"max_attempts is 1 to {MAX_ATTEMPTS}"
    if not 1 <= retry.backoff_initial_ms <= retry.backoff_max_ms <= MAX_BACKOFF_MS:
        return f"backoff is 1 <= backoff_initial_ms <= backoff_max_ms <= {MAX_BACKOFF_MS}"
    if retry.max_age_ms < 0:
        return "max_age_ms is not negative (0: no limit)"
    if not MIN_TIMEOUT_MS <= retry.timeout_ms <= MAX_TIMEOUT_MS:
        return f"timeout_ms is {MIN_TIMEOUT_MS} to {MAX_TIMEOUT_MS}"
    return None
