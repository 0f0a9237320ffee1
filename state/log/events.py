"""Building events for the log: the envelope, sources, ids and timestamps.

Writers (CLI, API, orchestrator, tests) build events here so every event gets an
id and a timestamp the same way. The fold never calls these: randomness and the
clock belong to writers only.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Any

from google.protobuf.message import Message

from partbuild.proto.v1 import events_pb2 as pb

Clock = Callable[[], int]

# Message type name -> the Event.payload oneof field that carries it.
_PAYLOAD_FIELD: dict[str, str] = {
    field.message_type.full_name: field.name
    for field in pb.Event.DESCRIPTOR.oneofs_by_name["payload"].fields
    if field.message_type is not None  # every payload is a message
}


def wall_clock_ms() -> int:
    """Milliseconds since the Unix epoch."""
    return time.time_ns() // 1_000_000


def manual(user: str) -> pb.EventSource:
    return pb.EventSource(manual=pb.ManualSource(user=user))


def from_job_run(job_run_id: str) -> pb.EventSource:
    return pb.EventSource(job_run=pb.JobRunSource(job_run_id=job_run_id))


def system(component: str, worker: str = "") -> pb.EventSource:
    return pb.EventSource(system=pb.SystemSource(component=component, worker=worker))


def envelope(
    payload: Message,
    *,
    source: pb.EventSource | None = None,
    timestamp_ms: int | None = None,
    event_id: str | None = None,
    clock: Clock = wall_clock_ms,
) -> pb.Event:
    """Wrap a payload message (WantCreate, JobRunSuccess, ...) in an Event envelope."""
    field = _PAYLOAD_FIELD.get(payload.DESCRIPTOR.full_name)
    if field is None:
        raise TypeError(f"{payload.DESCRIPTOR.full_name} is not an event payload type")
    fields: dict[str, Any] = {
        "event_id": event_id or uuid.uuid4().hex,
        "timestamp_ms": clock() if timestamp_ms is None else timestamp_ms,
        field: payload,
    }
    if source is not None:
        fields["source"] = source
    return pb.Event(**fields)
