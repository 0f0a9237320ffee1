"""Models of automation (`/api/v1/automation`): schedules, their ticks, and pausing them; reactions, what they owe."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from partbuild.api.models.common import StrictRequest, WrittenOut
from partbuild.state.fold.schedules import MAX_REASON_CHARS

RECENT_WANTS = 10
TickKindName = Literal["scheduled", "catch_up", "skipped", "manual"]
CatchUpName = Literal["latest", "all", "none"]


class ScheduleTickOut(BaseModel):
    """A schedule's last tick that stood for one of its times (manual ticks are not: see `last_want_id`)."""

    tick_ms: int = Field(description="The time it stood for, ms since the epoch.")
    at: str = Field(description="The same, ISO 8601 in UTC.")
    kind: TickKindName
    seq: int = Field(description="Where the tick is in the log.")


class ScheduleOut(BaseModel):
    """One schedule: how the served graph declares it, and what the log says of it as of the seq."""

    name: str
    declared: bool = Field(description="The served graph declares it (false: only the log knows it; or no graph).")
    when: str | None = Field(description='When it ticks: "cron 0 2 * * * Europe/Paris", "every 1:00:00".')
    catch_up: CatchUpName | None = Field(description="What becomes of the times that pass while nobody ticks.")
    paused: bool
    pause_reason: str
    ticks: int = Field(description="Ticks the log holds, every kind.")
    missed: int = Field(description="Times given up by the catch-up policy, in all.")
    last_tick: ScheduleTickOut | None
    last_want_id: str | None = Field(description="The want of the last tick (manual ones included) that made one.")
    last_error: str | None = Field(description="Why the last tick wanted nothing: its function failed.")
    next_tick_ms: int | None = Field(
        description="Its next time after the last tick and now: only for the present, for a declared running schedule."
    )
    recent_want_ids: list[str] = Field(
        default_factory=list, description=f"The wants its last ticks made, newest first (at most {RECENT_WANTS})."
    )


ReactionKindName = Literal["on_upstream_change", "on_source_arrival", "on_code_change"]
RECENT_PENDING = 20


class ReactionPendingOut(BaseModel):
    """A firing a reaction owes: noted in the log, it fires when due, after any restart or change of owner."""

    partition_ref: str = Field(description="The job's partition it wants.")
    cause_ref: str
    cause_instance_uuid: str
    previous_instance_uuid: str | None = Field(description="The instance the cause superseded (null: an arrival).")
    cause_seq: int
    due_ms: int = Field(description="When it fires: the cause's time plus the debounce, ms since the epoch.")
    noted_seq: int = Field(description="Where the log noted it.")


class ReactionOut(BaseModel):
    """One reaction (job, kind): how the served graph declares it, and what the log says of it as of the seq."""

    job: str
    kind: ReactionKindName
    declared: bool = Field(description="The served graph declares it (false: only the log knows it; or no graph).")
    debounce_s: float | None = Field(description="Its debounce window, in seconds (declared ones only).")
    fired: int = Field(description="Firings the log holds: wants it made.")
    last_fired_seq: int | None
    last_cause_ref: str | None
    last_cause_instance_uuid: str | None
    last_want_id: str | None
    pending_total: int = Field(description="Firings it owes: pending or debouncing.")
    pending: list[ReactionPendingOut] = Field(description=f"The soonest due of them (at most {RECENT_PENDING}).")
    failed: int = Field(description="Firings that could not fire (its job gone, the reaction dropped, rejected).")
    last_error: str | None


class AutomationOut(BaseModel):
    """Every schedule and reaction of the served graph and of the log, by name."""

    schedules: list[ScheduleOut]
    reactions: list[ReactionOut] = Field(default_factory=list)
    as_of_seq: int = Field(description="The seq it is answered as of: `as_of_seq` when given, else the head.")


class ScheduleControlRequest(StrictRequest):
    reason: str = Field(default="", max_length=MAX_REASON_CHARS)


class ScheduleWrittenOut(WrittenOut):
    """A pause, resume or tick by hand, where it landed, and the schedule after it."""

    schedule: ScheduleOut
    want_id: str | None = Field(default=None, description="A tick by hand: the want it made (null: none).")
