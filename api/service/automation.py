"""Automation: the served graph's schedules and reactions with what the log says of them; pausing, resuming,
ticking by hand.

A pause or resume is a `ScheduleControl` the fold judges (a schedule already paused
cannot be paused again). A tick by hand is the `ScheduleTick` an orchestrator would
append, of kind manual, at the service's clock: it needs the schedule's want function,
so only a service with the graph can make one. Its want is named after that time, so
a second click in the same millisecond is the same tick, refused by the fold.
"""

from __future__ import annotations

from partbuild.api.errors import Conflict, InvalidInput, NotFound
from partbuild.api.models.automation import (
    RECENT_WANTS,
    AutomationOut,
    ScheduleControlRequest,
    ScheduleOut,
    ScheduleTickOut,
    ScheduleWrittenOut,
)
from partbuild.api.service.base import ServiceBase
from partbuild.api.service.reactions_view import reactions_out
from partbuild.api.surface import ANONYMOUS
from partbuild.orchestrator.graph import Graph
from partbuild.orchestrator.schedules import DueTick, Schedule
from partbuild.orchestrator.ticks import tick_event
from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.fold.schedules import ScheduleRow, tick_time_text
from partbuild.state.fold.view import StateView
from partbuild.state.log.events import manual

MAX_WALKED = 100_000


class AutomationService(ServiceBase):
    """Reads of schedules; pause, resume and tick by hand."""

    def automation(self, as_of_seq: int | None = None, min_seq: int | None = None) -> AutomationOut:
        """The served graph's schedules and every schedule the log knows, by name."""
        declared = self.graph.schedules if self.graph is not None else {}
        with self._reading(min_seq, as_of_seq) as state:
            present = as_of_seq is None or as_of_seq >= self.reads.head_seq
            now = self.clock() if present else None
            names = sorted({*declared, *state.schedules})
            recent = recent_wants(state, set(names))
            return AutomationOut(
                schedules=[
                    schedule_out(name, declared.get(name), state.schedules.get(name), now, recent.get(name, []))
                    for name in names
                ],
                reactions=reactions_out(self.graph, state.reactions, state.reaction_pending),
                as_of_seq=state.head_seq,
            )

    def pause_schedule(
        self, name: str, request: ScheduleControlRequest | None = None, user: str = ANONYMOUS
    ) -> ScheduleWrittenOut:
        """Pause `name`: from now its times pass without ticks."""
        reason = request.reason if request is not None else ""
        return self._control_schedule(name, pb.ScheduleControl(schedule=name, paused=True, reason=reason), user)

    def resume_schedule(self, name: str, user: str = ANONYMOUS) -> ScheduleWrittenOut:
        """Resume `name`: its catch-up policy decides what becomes of the times it missed."""
        return self._control_schedule(name, pb.ScheduleControl(schedule=name, paused=False), user)

    def trigger_schedule(self, name: str, user: str = ANONYMOUS) -> ScheduleWrittenOut:
        """Tick `name` now, by hand: the want its function makes of the present time."""
        graph, schedule = self._declared_schedule(name)
        now = self.clock()
        event = tick_event(schedule, graph, DueTick(now, pb.TICK_KIND_MANUAL), now, manual(user))
        if event.schedule_tick.error:
            raise InvalidInput(f"schedule {name!r}: {event.schedule_tick.error}")
        seq = self._write(self._checked(event.schedule_tick, user))[0]
        want_id = event.schedule_tick.want.want_id if event.schedule_tick.HasField("want") else None
        return self._schedule_written(name, seq, want_id)

    def _control_schedule(self, name: str, control: pb.ScheduleControl, user: str) -> ScheduleWrittenOut:
        self._known_schedule(name)
        seq = self._write(self._checked(control, user))[0]
        return self._schedule_written(name, seq)

    def _schedule_written(self, name: str, seq: int, want_id: str | None = None) -> ScheduleWrittenOut:
        declared = self.graph.schedules.get(name) if self.graph is not None else None
        self.reads.read_at_least(seq)  # a store's reads (a working set's) wait for what was written
        with self.reads.read() as state:
            schedule = schedule_out(name, declared, state.schedules.get(name), self.clock())
        return ScheduleWrittenOut(seq=seq, schedule=schedule, want_id=want_id)

    def _declared_schedule(self, name: str) -> tuple[Graph, Schedule]:
        """The served graph and its schedule `name`."""
        graph = self.graph
        if graph is None:
            raise Conflict("this service has no graph, so no schedule's want function: serve it with --graph")
        schedule = graph.schedules.get(name)
        if schedule is None:
            raise NotFound(f"no schedule {name!r} in the served graph")
        return graph, schedule

    def _known_schedule(self, name: str) -> None:
        """NotFound unless the served graph declares `name` or the log knows it (pausing a typo helps nobody)."""
        if self.graph is not None and name in self.graph.schedules:
            return
        with self.reads.read() as state:
            if name in state.schedules:
                return
        where = "the served graph nor the log has" if self.graph is not None else "the log has (and no graph is served)"
        raise NotFound(f"no schedule {name!r}: neither {where} one of that name")


def recent_wants(state: StateView, names: set[str]) -> dict[str, list[str]]:
    """The wants each schedule's last ticks made, newest first: a walk back over the automation-made wants.

    `want_causes` holds a key per want automation made, in creation order; the walk stops once every
    schedule has its RECENT_WANTS, or after MAX_WALKED keys (a schedule silent for that long shows fewer).
    Wants made after the state's seq are passed over (as of a seq, `state.wants` does not hold them).
    """
    found: dict[str, list[str]] = {name: [] for name in names}
    wants = state.wants
    for walked, want_id in enumerate(reversed(state.want_causes)):
        if walked >= MAX_WALKED or all(len(ids) >= RECENT_WANTS for ids in found.values()):
            break
        if not want_id.startswith("schedule:") or want_id not in wants:
            continue
        ids = found.get(want_id.split(":", 2)[1])
        if ids is not None and len(ids) < RECENT_WANTS:
            ids.append(want_id)
    return found


def schedule_out(
    name: str,
    declared: Schedule | None,
    row: ScheduleRow | None,
    now_ms: int | None,
    recent_want_ids: list[str] | None = None,
) -> ScheduleOut:
    """A schedule as the API shows it; `now_ms` only for the present (a next tick of the past means nothing)."""
    row = row or ScheduleRow()
    last = None
    if row.last_tick_ms and row.last_kind:  # set together, by every tick but a manual one
        last = ScheduleTickOut(
            tick_ms=row.last_tick_ms, at=tick_time_text(row.last_tick_ms), kind=row.last_kind, seq=row.last_tick_seq
        )
    next_tick = None
    if declared is not None and now_ms is not None and not row.paused:
        next_tick = declared.next_after(max(now_ms, row.last_tick_ms))
    return ScheduleOut(
        name=name,
        declared=declared is not None,
        when=declared.describe if declared is not None else None,
        catch_up=declared.catch_up.value if declared is not None else None,
        paused=row.paused,
        pause_reason=row.pause_reason,
        ticks=row.ticks,
        missed=row.missed,
        last_tick=last,
        last_want_id=row.last_want_id or None,
        last_error=row.last_error or None,
        next_tick_ms=next_tick,
        recent_want_ids=recent_want_ids or [],
    )
