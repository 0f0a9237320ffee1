"""The served graph's commands: `graph show` (jobs, sources, their dependencies and partition counts) and
`jobs summary NAME` (a job's or source's partitions by state). Heavy modules are imported inside them."""

from __future__ import annotations

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
    render.emit(found, as_json, lambda: render.job_graph_text(found))


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
