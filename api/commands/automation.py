"""Automation commands: `automation` lists the schedules (when each ticks, paused or not, its last and next
tick), `automation pause|resume NAME` and `automation trigger NAME` (a tick by hand, now)."""

from __future__ import annotations

from typing import Any

import click

from partbuild.api import render
from partbuild.api.commands.common import (
    Target,
    as_of_option,
    connect,
    json_option,
    read_graph,
    target_options,
    user_option,
)
from partbuild.api.models.automation import ScheduleControlRequest, ScheduleWrittenOut
from partbuild.api.render_automation import automation_view

_COMMANDLINE = click.core.ParameterSource.COMMANDLINE
graph_option = click.option(
    "--graph", "graph_path", help="With --db: this graph's schedules (a server uses its own; trigger needs one)."
)


def _list(target: Target, graph_path: str | None, as_of: int | None, as_json: bool) -> None:
    graph = read_graph(graph_path) if graph_path is not None else None
    with connect(target, graph=graph) as client:
        automation = client.automation(as_of)
    if not automation.schedules and not as_json:
        click.echo("no schedule")
        return
    render.emit(automation, as_json, lambda: automation_view(automation))


@click.group("automation", invoke_without_command=True)
@target_options
@graph_option
@as_of_option
@json_option
@click.pass_context
def automation_group(ctx: click.Context, /, **listing: Any) -> None:
    """Schedules: when each ticks, paused or not, its last tick and want, its next time (also
    'automation list'); pause, resume or trigger one below."""
    if ctx.invoked_subcommand is None:
        _list(**listing)
        return
    given = [p.opts[0] for p in ctx.command.params if ctx.get_parameter_source(p.name or "") is _COMMANDLINE]
    if given:  # `partbuild automation --json pause X` would silently ignore --json
        raise click.UsageError(
            f"{', '.join(given)} before a subcommand: listing options go with 'partbuild automation list', "
            "a subcommand's options after its name"
        )


@automation_group.command("list")
@target_options
@graph_option
@as_of_option
@json_option
def automation_list(target: Target, graph_path: str | None, as_of: int | None, as_json: bool) -> None:
    """Schedules: when each ticks, paused or not, its last and next tick."""
    _list(target, graph_path, as_of, as_json)


def _done(written: ScheduleWrittenOut, as_json: bool, what: str) -> None:
    render.emit(written, as_json, lambda: f"schedule {written.schedule.name}: {what} at seq {written.seq}")


@automation_group.command("pause")
@click.argument("name")
@click.option("--reason", default="", help="Why (shown with the schedule).")
@target_options
@graph_option
@user_option
@json_option
def automation_pause(target: Target, name: str, reason: str, graph_path: str | None, user: str, as_json: bool) -> None:
    """Pause NAME: its times pass without ticks until it is resumed."""
    graph = read_graph(graph_path) if graph_path is not None else None
    with connect(target, graph=graph) as client:
        written = client.pause_schedule(name, ScheduleControlRequest(reason=reason), user)
    _done(written, as_json, "paused")


@automation_group.command("resume")
@click.argument("name")
@target_options
@graph_option
@user_option
@json_option
def automation_resume(target: Target, name: str, graph_path: str | None, user: str, as_json: bool) -> None:
    """Resume NAME: its catch-up policy says what becomes of the times it missed."""
    graph = read_graph(graph_path) if graph_path is not None else None
    with connect(target, graph=graph) as client:
        written = client.resume_schedule(name, user)
    _done(written, as_json, "resumed")


@automation_group.command("trigger")
@click.argument("name")
@target_options
@graph_option
@user_option
@json_option
def automation_trigger(target: Target, name: str, graph_path: str | None, user: str, as_json: bool) -> None:
    """Tick NAME now, by hand: the want its function makes of the present time."""
    graph = read_graph(graph_path) if graph_path is not None else None
    with connect(target, graph=graph) as client:
        written = client.trigger_schedule(name, user)
    _done(written, as_json, f"ticked by hand, want {written.want_id or '(none: it wanted nothing)'}")
