"""A small driver for writing fold tests as stories: append events, then look at the state."""

from __future__ import annotations

from typing import Any

from google.protobuf.message import Message

from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.fold.build_state import BuildState
from partbuild.state.fold.records import Instance, InstanceState, WantState
from partbuild.state.log.events import envelope, from_job_run, manual


class Story:
    """Feeds events to a strict BuildState with consecutive seqs and a ticking clock."""

    def __init__(self, start_ms: int = 1_000_000) -> None:
        self.state = BuildState(strict=True)
        self.clock_ms = start_ms
        self.events: list[pb.Event] = []

    def apply(self, payload: Message, *, source: pb.EventSource | None = None, advance_ms: int = 1_000) -> str | None:
        """Append one event; returns the rejection reason or None."""
        self.clock_ms += advance_ms
        event = envelope(payload, source=source, timestamp_ms=self.clock_ms)
        self.events.append(event)
        return self.state.apply(len(self.events), event)

    def ok(self, payload: Message, **kwargs: object) -> None:
        """Append an event that must be applied."""
        reason = self.apply(payload, **kwargs)  # type: ignore[arg-type]
        assert reason is None, f"unexpectedly rejected: {reason}"

    def rejected(self, payload: Message, contains: str) -> str:
        """Append an event that must be rejected with a reason containing `contains`."""
        reason = self.apply(payload)
        assert reason is not None, "expected a rejection"
        assert contains in reason, reason
        return reason

    # --- shorthands for the common events
    def want(self, want_id: str, *refs: str, **fields: object) -> None:
        self.ok(pb.WantCreate(want_id=want_id, partition_refs=list(refs), **fields), source=manual("test"))

    def derivative(self, want_id: str, parent: str, run_id: str, *refs: str) -> None:
        self.ok(
            pb.WantCreate(want_id=want_id, partition_refs=list(refs), parent_want_id=parent),
            source=from_job_run(run_id),
        )

    def buffer(self, run_id: str, *refs: str, label: str = "job") -> list[str]:
        uuids = [self.uuid(ref) for ref in refs]
        self.ok(pb.JobRunBuffer(job_run_id=run_id, job_label=label, instance_uuids=uuids))
        return uuids

    def succeed(self, run_id: str, inputs: list[str] | None = None) -> None:
        self.ok(pb.JobRunSuccess(job_run_id=run_id, input_instance_uuids=inputs or []))

    def missing(self, run_id: str, *refs: str) -> None:
        self.ok(pb.JobRunMissingDeps(job_run_id=run_id, missing_refs=list(refs)))

    def fail(self, run_id: str, *, permanent: bool, message: str = "boom") -> None:
        error_class = pb.ERROR_CLASS_PERMANENT if permanent else pb.ERROR_CLASS_RETRYABLE
        self.ok(pb.JobRunFailure(job_run_id=run_id, error_class=error_class, message=message))

    def observe(self, ref: str, location: str = "") -> None:
        self.ok(pb.PartitionObserved(partition_ref=ref, location=location or f"/data/{ref}"))

    def build(self, run_id: str, ref: str, inputs: list[str] | None = None) -> str:
        """Buffer and succeed a run for one ref; returns the instance UUID built."""
        (uuid,) = self.buffer(run_id, ref)
        self.succeed(run_id, inputs)
        return uuid

    # --- reads
    def uuid(self, ref: str) -> str:
        return self.state.canonical[ref]

    def instance(self, ref: str) -> Instance:
        return self.state.instances[self.state.canonical[ref]]

    def istate(self, ref: str) -> InstanceState:
        return self.instance(ref).state

    def wstate(self, want_id: str) -> WantState:
        return self.state.wants[want_id].state


def subscription(name: str = "hooks", **fields: Any) -> pb.SubscriptionCreate:
    """A valid SubscriptionCreate (12 partitions everywhere, 2 shards), with `fields` changed."""
    values: dict[str, Any] = {
        "name": name,
        "endpoint": "https://hooks.example.com/pb",
        "ordering": "partition_ref",
        "format": "partbuild",
        "retry": pb.RetryPolicy(max_attempts=3, backoff_initial_ms=10, backoff_max_ms=100, timeout_ms=1000),
        "shard_count": 2,
        "main_partitions": 12,
        "rq_partitions": 12,
        "dlq_partitions": 12,
        "secret_digest": "ab" * 16,
    }
    values.update(fields)
    return pb.SubscriptionCreate(**values)
