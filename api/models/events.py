"""Models of the raw event log (`/api/v1/events`)."""

from __future__ import annotations

from pydantic import BaseModel


class StoredEventOut(BaseModel):
    seq: int
    event_id: str
    event_type: str
    recorded_at_ms: int
    event: dict[str, object]
