"""Source dataset commands: `sources` lists them (how each is found, how far its scans have got, the
cursor redacted), `sources scan NAME` asks for a new pass of a source's scan now."""

from __future__ import annotations

from typing import Any

import click

from partbuild.api import render, render_operations
from partbuild.api.commands.common import (
    Target,
    as_of_option,
    connect,
    json_option,
    read_graph,
    target_options,
    user_option,
)

_COMMANDLINE = click.core.ParameterSource.COMMANDLINE
graph_option = click.option(
    "--graph", "graph_path", help="With --db: also list this graph's source datasets (a server uses its own)."
)


def _list(target: Target, graph_path: str | None, as_of: int | None, as_json: bool) -> None:
    graph = read_graph(graph_path) if graph_path is not None else None
    with connect(target, graph=graph) as client:
        sources = client.sources(as_of)
    if not sources and not as_json:
        click.echo("no source dataset")
        return
    render.emit(sources, as_json, lambda: render_operations.sources_table(sources))


@click.group("sources", invoke_without_command=True)
@target_options
@graph_option
@as_of_option
@json_option
@click.pass_context
def sources_group(ctx: click.Context, /, **listing: Any) -> None:
    """Source datasets: how each is found, its connector, its scan's pass, cursor (redacted), items,
    partitions and errors (also 'sources list'); subcommands below."""
    if ctx.invoked_subcommand is None:
        _list(**listing)
        return
    given = [p.opts[0] for p in ctx.command.params if ctx.get_parameter_source(p.name or "") is _COMMANDLINE]
    if given:  # `partbuild sources --json scan X` would silently ignore --json
        raise click.UsageError(
            f"{', '.join(given)} before a subcommand: listing options go with 'partbuild sources list', "
            "a subcommand's options after its name"
        )


@sources_group.command("list")
@target_options
@graph_option
@as_of_option
@json_option
def sources_list(target: Target, graph_path: str | None, as_of: int | None, as_json: bool) -> None:
    """Source datasets: how each is found, its connector, and how far its scans have got."""
    _list(target, graph_path, as_of, as_json)


@sources_group.command("scan")
@click.argument("name")
@target_options
@graph_option
@user_option
@json_option
def sources_scan(target: Target, name: str, graph_path: str | None, user: str, as_json: bool) -> None:
    """Scan NAME again now: its next pass begins at once, or as soon as the current one ends."""
    graph = read_graph(graph_path) if graph_path is not None else None
    with connect(target, graph=graph) as client:
        requested = client.scan_source(name, user)
    scan = requested.source.scan
    running = scan is not None and scan.pass_number > 0 and not scan.pass_done
    after = f"after pass {scan.pass_number} ends" if running and scan is not None else "now"
    render.emit(
        requested, as_json, lambda: f"source {name}: a new pass asked for at seq {requested.seq}; it begins {after}"
    )
