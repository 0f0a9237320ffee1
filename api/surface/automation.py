"""Automation: the schedules of the served graph and of the log, their last and next ticks; pause, resume, trigger."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Protocol

from partbuild.api.surface.common import ANONYMOUS, AsOfSeq, Body, MinSeq, Path, User, operation
from partbuild.state.ops.roles import Role

if TYPE_CHECKING:  # its models load when an operation's types are first needed (`Operation`)
    from partbuild.api.models.automation import AutomationOut, ScheduleControlRequest, ScheduleWrittenOut

TAG = "automation"
ScheduleNamePath = Annotated[str, Path(description="A schedule's name.", examples=("nightly",))]


class AutomationApi(Protocol):
    @operation(
        "GET",
        "/automation",
        "Schedules: when each ticks, whether it is paused, its last tick and (of the present) its next",
        role=Role.READER,
    )
    def automation(self, as_of_seq: AsOfSeq = None, min_seq: MinSeq = None) -> AutomationOut: ...

    @operation(
        "POST",
        "/automation/schedules/{name}/pause",
        "Pause a schedule: its times pass without ticks until it is resumed",
        role=Role.WRITER,
    )
    def pause_schedule(
        self,
        name: ScheduleNamePath,
        request: Annotated[ScheduleControlRequest | None, Body()] = None,
        user: User = ANONYMOUS,
    ) -> ScheduleWrittenOut: ...

    @operation(
        "POST",
        "/automation/schedules/{name}/resume",
        "Resume a paused schedule: its catch-up policy says what becomes of the times it missed",
        role=Role.WRITER,
    )
    def resume_schedule(self, name: ScheduleNamePath, user: User = ANONYMOUS) -> ScheduleWrittenOut: ...

    @operation(
        "POST",
        "/automation/schedules/{name}/trigger",
        "Tick a schedule now, by hand: its want for the present time (its times are left as they were)",
        status=201,
        role=Role.WRITER,
    )
    def trigger_schedule(self, name: ScheduleNamePath, user: User = ANONYMOUS) -> ScheduleWrittenOut: ...
