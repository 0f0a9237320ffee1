"""The served graph's commands: `graph show` (jobs, sources, their dependencies and partition counts, with each
job's declared checks and reactions, stale counts and the graph's schedules; without a graph, what the log knows)
and `jobs summary NAME` (a job's or source's partitions by state). Heavy modules are imported inside them."""

from __future__ import annotations

from typing import Any

import click

from partbuild.api.commands.common import Target, as_of_option, connect, json_option, read_graph, target_options

graph_file_option = click.option("--graph", "graph_path", help="With --db: the graph file (a server uses its own).")


@click.group("graph")
def graph_group() -> None:
    """The served graph of jobs and source datasets."""


@graph_group.command("show")
@target_options
@graph_file_option
@as_of_option
@json_option
def graph_show(target: Target, graph_path: str | None, as_of: int | None, as_json: bool) -> None:
    """Jobs and sources with their partition counts by state, and which reads which."""
    from partbuild.api import render

    graph = read_graph(graph_path) if graph_path is not None else None
    with connect(target, graph=graph) as client:
        found = client.job_graph(as_of)
    render.emit(found, as_json, lambda: "\n".join([render.job_graph_text(found), *declarations_text(found)]))


@click.group("jobs")
def jobs_group() -> None:
    """Jobs (and source datasets) of the served graph."""


@jobs_group.command("summary")
@click.argument("name")
@target_options
@graph_file_option
@as_of_option
@json_option
def jobs_summary(name: str, target: Target, graph_path: str | None, as_of: int | None, as_json: bool) -> None:
    """How many of NAME's known partitions are in each state (NAME: a job's label or a source's name)."""
    from partbuild.api import render

    graph = read_graph(graph_path) if graph_path is not None else None
    with connect(target, graph=graph) as client:
        found = client.partitions_summary(name, as_of)
    render.emit(found, as_json, lambda: render.summary_text(found))


def declarations_text(found: Any) -> list[str]:
    """The lines `graph show` adds under the graph: stale counts, checks, reactions, schedules, the graph's origin."""
    lines = [f"stale: {node.name} {node.stale}" for node in found.nodes if node.stale]
    for check in found.checks:
        kind = "blocking" if check.blocking else "warning only"
        lines.append(f"check: {check.job}: {check.name} ({kind}{', retryable' if check.retryable else ''})")
    for reaction in found.reactions:
        lines.append(f"reaction: {reaction.job}: {reaction.kind} (debounce {reaction.debounce_ms / 1000:g} s)")
    for schedule in found.schedules:
        wants = f", last wanted {', '.join(schedule.last_want_jobs)}" if schedule.last_want_jobs else ""
        paused = ", paused" if schedule.paused else ""
        lines.append(f"schedule: {schedule.name} ({schedule.when or 'not in the graph'}{paused}{wants})")
    if not found.graph_served:
        lines.append("(no graph is served: jobs, sources and edges are what the log's runs show)")
    return lines
