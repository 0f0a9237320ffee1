"""Schedules (issue 25): ScheduleTick and ScheduleControl, the side table `schedules`, want causes.

A schedule is declared in the graph (orchestrator/automation/schedules.py); the log
holds what it did. Each tick is one `ScheduleTick` carrying the one want it created
(if any), so the want and its cause land together or not at all. The fold's rules:

- scheduled, catch-up and skipped ticks of a schedule come in increasing `tick_ms`:
  a tick at or before the schedule's last one is a copy (a second orchestrator, a
  restart that evaluated the same time) and is rejected, so no time ticks twice;
- a paused schedule takes no scheduled or catch-up tick; a manual tick (asked for by
  hand) is taken paused or not and leaves the last tick where it was;
- a skipped tick carries no want; the others' want is checked as a WantCreate would be
  (a user's want: no parent), and its id must be the tick's (`tick_want_id`).

`BuildState.schedules` holds, per schedule that ever ticked or was paused, one plain
tuple (`ScheduleRow`); its versions are kept for reads as of a seq (history.py
VERSIONED). `BuildState.want_causes` says, for each want a tick created, why it exists
("schedule nightly ticked at 2026-01-02T00:00:00Z"): set with the want, never changed,
so a read as of any seq at which the want exists finds it as it was. Both are `Items`
sections of the digest: empty in every older log, they hash nothing there.
"""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING, Literal, NamedTuple

from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.fold.validation import id_problem, short
from partbuild.state.fold.wants import WantCreatePlan, apply_want_create, check_want_create

if TYPE_CHECKING:
    from partbuild.state.fold.build_state import BuildState

MAX_REASON_CHARS = 1024
TickKindName = Literal["scheduled", "catch_up", "skipped", "manual"]
KIND_NAMES: dict[int, TickKindName] = {
    pb.TICK_KIND_SCHEDULED: "scheduled",
    pb.TICK_KIND_CATCH_UP: "catch_up",
    pb.TICK_KIND_SKIPPED: "skipped",
    pb.TICK_KIND_MANUAL: "manual",
}


class ScheduleRow(NamedTuple):
    """What the log says of one schedule (plain values: digested as a tuple, pickled as a version)."""

    paused: bool = False
    pause_reason: str = ""
    last_tick_ms: int = 0  # the last scheduled, catch-up or skipped tick's time (0: none yet)
    last_tick_seq: int = 0
    last_kind: TickKindName | Literal[""] = ""
    last_want_id: str = ""  # the last tick's want, manual ones included ("" if it wanted nothing)
    ticks: int = 0  # ticks taken, every kind
    missed: int = 0  # times given up by the catch-up policy, in all (a skipped tick's own time included)
    last_error: str = ""  # the last tick's error, if its want function failed


def tick_time_text(tick_ms: int) -> str:
    """A tick's time as the ids and causes show it: UTC, to the second (or the millisecond, if it has one)."""
    moment = dt.datetime.fromtimestamp(tick_ms / 1000, tz=dt.UTC)
    spec = "milliseconds" if tick_ms % 1000 else "seconds"
    return moment.isoformat(timespec=spec).replace("+00:00", "Z")


def tick_want_id(schedule: str, tick_ms: int, kind: pb.TickKind) -> str:
    """The id of the want a tick creates: the same from every writer, so the tick's copy collides."""
    manual = "manual:" if kind == pb.TICK_KIND_MANUAL else ""
    return f"schedule:{schedule}:{manual}{tick_time_text(tick_ms)}"


def tick_cause(schedule: str, tick_ms: int, kind: pb.TickKind) -> str:
    """Why a tick's want exists, in words."""
    how = {pb.TICK_KIND_CATCH_UP: " (caught up)", pb.TICK_KIND_MANUAL: " (by hand)"}.get(kind, "")
    return f"schedule {schedule} ticked at {tick_time_text(tick_ms)}{how}"


TickPlan = tuple[ScheduleRow, WantCreatePlan | None, str]  # (the schedule's new row, its want's plan, cause)


def check_schedule_tick(state: BuildState, seq: int, msg: pb.ScheduleTick, event: pb.Event) -> str | TickPlan:
    """Validate a tick against the schedule's row; check its want as a WantCreate."""
    name, tick_ms, kind = msg.schedule, msg.tick_ms, msg.kind
    problem = id_problem("schedule", name)
    if problem:
        return problem
    if kind not in KIND_NAMES:
        return f"tick kind {kind} is not one of scheduled, catch_up, skipped, manual"
    if tick_ms <= 0 or msg.missed < 0:
        return "tick_ms must be positive and missed not negative"
    if len(msg.error) > MAX_REASON_CHARS:
        return f"a tick's error is at most {MAX_REASON_CHARS} characters"
    row = state.schedules.get(name) or ScheduleRow()
    manual = kind == pb.TICK_KIND_MANUAL
    if not manual:
        if row.paused:
            return f"schedule {short(name)} is paused"
        if tick_ms <= row.last_tick_ms:
            return f"schedule {short(name)} already ticked at {tick_time_text(row.last_tick_ms)}"
    has_want = msg.HasField("want")
    if has_want and (kind == pb.TICK_KIND_SKIPPED or msg.error):
        return "a skipped tick, or one with an error, creates no want"
    want_plan: WantCreatePlan | None = None
    want_id = ""
    if has_want:
        want = msg.want
        want_id = want.want_id
        if want_id != (expected := tick_want_id(name, tick_ms, kind)):
            return f"a tick's want is named {short(expected)}, not {short(want_id)}"
        if want.parent_want_id or want.root_want_id or want.HasField("fence"):
            return "a tick's want is a want of its own: no parent, root or fence"
        checked = check_want_create(state, seq, want, event)
        if isinstance(checked, str):
            return checked
        want_plan = checked
    # A manual tick leaves the last tick where it was.
    last = (row.last_tick_ms, row.last_tick_seq, row.last_kind) if manual else (tick_ms, seq, KIND_NAMES[kind])
    new_row = row._replace(
        last_want_id=want_id,
        last_error=msg.error,
        ticks=row.ticks + 1,
        missed=row.missed + msg.missed + (kind == pb.TICK_KIND_SKIPPED),
        last_tick_ms=last[0],
        last_tick_seq=last[1],
        last_kind=last[2],
    )
    return new_row, want_plan, tick_cause(name, tick_ms, kind)


def apply_schedule_tick(state: BuildState, seq: int, plan: TickPlan, event: pb.Event) -> None:
    row, want_plan, cause = plan
    state.schedules[event.schedule_tick.schedule] = row
    if want_plan is not None:
        apply_want_create(state, seq, want_plan, event)
        state.want_causes[want_plan[0].want_id] = cause


def check_schedule_control(state: BuildState, seq: int, msg: pb.ScheduleControl, event: pb.Event) -> str | ScheduleRow:
    """Pause a running schedule or resume a paused one; anything else is a mistake worth saying."""
    problem = id_problem("schedule", msg.schedule)
    if problem:
        return problem
    if len(msg.reason) > MAX_REASON_CHARS:
        return f"a reason is at most {MAX_REASON_CHARS} characters"
    row = state.schedules.get(msg.schedule) or ScheduleRow()
    if row.paused == msg.paused:
        return f"schedule {short(msg.schedule)} is already {'paused' if row.paused else 'running'}"
    return row._replace(paused=msg.paused, pause_reason=msg.reason if msg.paused else "")


def apply_schedule_control(state: BuildState, seq: int, row: ScheduleRow, event: pb.Event) -> None:
    state.schedules[event.schedule_control.schedule] = row
