"""Models of an audit (`/api/v1/audit`): a replay's head, digest, counts and rejected events."""

from __future__ import annotations

from pydantic import BaseModel, Field


class RejectedEventOut(BaseModel):
    seq: int
    event_type: str
    reason: str


class AuditOut(BaseModel):
    head_seq: int
    state_seq: int
    digest: str
    counts: dict[str, dict[str, int]]
    rejected_total: int
    rejected: list[RejectedEventOut]
    snapshot_seq: int
    replayed_events: int
    seconds: float
    verified: bool | None = Field(default=None, description="With verify: did a full replay from seq 0 agree?")
    problems: list[str] = Field(default_factory=list)
