"""The automation tables of the CLI (`partbuild automation`): schedules, then reactions."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from partbuild.api.render import MAX_CELL, _table, one_line, when

if TYPE_CHECKING:
    from partbuild.api.models.automation import AutomationOut, ReactionOut, ScheduleOut


def schedules_table(schedules: list[ScheduleOut]) -> Table:
    """One row a schedule: when it ticks, running or paused, its ticks, the last one and its want, the next."""
    table = _table("SCHEDULE", "WHEN", "CATCH-UP", "STATE", "TICKS", "MISSED", "LAST TICK", "LAST WANT", "NEXT")
    for schedule in schedules:
        reason = one_line(schedule.pause_reason, MAX_CELL // 3)  # a state column: kept short, never narrowed
        state = Text(f"paused: {reason}" if reason else "paused", style="yellow")
        if not schedule.paused:
            state = Text("running", style="green")
        last = schedule.last_tick
        last_text = f"{last.at} ({last.kind})" if last is not None else "-"
        want = Text(schedule.last_want_id or "-")
        if schedule.last_error:
            want = Text(schedule.last_error, style="red")
        table.add_row(
            Text(schedule.name),
            Text(schedule.when or "(log only)"),
            schedule.catch_up or "-",
            state,
            f"{schedule.ticks:,}",
            f"{schedule.missed:,}",
            last_text,
            want,
            when(schedule.next_tick_ms),
        )
    return table


def reactions_table(reactions: list[ReactionOut]) -> Table:
    """One row a reaction: its debounce, its firings and the last one's cause, what it owes, its last error."""
    table = _table("JOB", "REACTION", "DEBOUNCE", "FIRED", "LAST CAUSE", "PENDING", "NEXT DUE", "FAILED", "ERROR")
    for reaction in reactions:
        debounce = f"{reaction.debounce_s:g} s" if reaction.debounce_s is not None else "(log only)"
        soonest = reaction.pending[0].due_ms if reaction.pending else None
        table.add_row(
            Text(reaction.job),
            reaction.kind,
            debounce,
            f"{reaction.fired:,}",
            Text(reaction.last_cause_ref or "-"),
            Text(f"{reaction.pending_total:,}", style="yellow" if reaction.pending_total else ""),
            when(soonest),
            f"{reaction.failed:,}",
            Text(one_line(reaction.last_error or "-", MAX_CELL), style="red" if reaction.last_error else ""),
        )
    return table


def automation_view(automation: AutomationOut) -> RenderableType:
    """The schedules' table, then the reactions' (when there are any)."""
    shown: list[RenderableType] = [schedules_table(automation.schedules)]
    if automation.reactions:
        shown.append(reactions_table(automation.reactions))
    return Group(*shown)
