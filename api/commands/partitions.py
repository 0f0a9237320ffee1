"""Partition commands: `partitions` (list, show, history, instance), `lineage`, `taint` and `observe`."""

from __future__ import annotations

import uuid
from typing import Any, get_args

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
from partbuild.api.commands.listing import listing_group
from partbuild.api.errors import NotFound
from partbuild.api.models.common import MAX_SAFE_INT
from partbuild.api.models.partitions import (
    MAX_LINEAGE_DEPTH,
    CheckResultName,
    InstanceStateName,
    ObserveRequest,
    SourceVersionRequest,
    TaintRequest,
)
from partbuild.api.surface import Client

graph_option = click.option(
    "--graph", "graph_path", help="With --db: whose jobs' code versions say what is stale (a server uses its own)."
)


def _graph(graph_path: str | None) -> Any:
    return read_graph(graph_path) if graph_path is not None else None


partitions_group = listing_group(
    "partitions",
    "List partitions (their current instances) ordered by ref",
    [
        click.option("--prefix", default="", help="Only refs starting with this."),
        click.option(
            "--state", type=click.Choice(get_args(InstanceStateName)), help="Only current instances in this state."
        ),
        click.option("--stale", is_flag=True, help="Only Live instances built by another code version than now."),
        click.option(
            "--unwanted",
            is_flag=True,
            help="Only waiting instances (missing, upstream_building, up_for_retry) no active want needs.",
        ),
        click.option("--check", help="Only instances whose latest checks include this check (by name)."),
        click.option(
            "--check-result",
            type=click.Choice(get_args(CheckResultName)),
            help="Only instances with a check of this result (of --check, if given).",
        ),
        click.option("--error", help="Only instances whose note (a failure's cause, a taint's reason) holds this."),
        click.option("--made-by", help="Only partitions a want made by this names (as 'wants --made-by')."),
    ],
    lambda client, state, stale, unwanted, check, check_result, error, made_by, **page: client.partitions(
        state_filter=state,
        stale_filter=stale,
        unwanted_filter=unwanted,
        check_filter=check,
        check_result_filter=check_result,
        error_filter=error,
        made_by_filter=made_by,
        **page,
    ),
    render.instances_table,
    "partitions",
)


@partitions_group.command("show")
@target_options
@click.argument("ref")
@as_of_option
@json_option
@graph_option
def partitions_show(target: Target, ref: str, as_of: int | None, as_json: bool, graph_path: str | None) -> None:
    """What readers get for a ref: its Live instance (a stale one, with its successor, while that is built), else
    its current (canonical) instance."""
    with connect(target, graph=_graph(graph_path)) as client:
        instance = client.canonical(ref, as_of)
    render.emit(instance, as_json, lambda: render.instance_grid(instance))


@partitions_group.command("history")
@target_options
@click.argument("ref")
@as_of_option
@json_option
def partitions_history(target: Target, ref: str, as_of: int | None, as_json: bool) -> None:
    """Every instance of a ref, newest first."""
    with connect(target) as client:
        found = client.history(ref, as_of)
    render.emit(found, as_json, lambda: render.history_table(found))


@partitions_group.command("stale")
@target_options
@click.argument("job")
@click.option("--limit", type=click.IntRange(1, 1000), default=100, show_default=True, help="At most this many.")
@as_of_option
@json_option
@graph_option
def partitions_stale(
    target: Target, job: str, limit: int, as_of: int | None, as_json: bool, graph_path: str | None
) -> None:
    """A job's Live instances built by another code version than the served graph's, oldest partitions last."""
    with connect(target, graph=_graph(graph_path)) as client:
        answer = client.stale(job, limit, as_of)
    render.emit(answer, as_json, lambda: render.stale_table(answer))


@partitions_group.command("instance")
@target_options
@click.argument("instance_uuid", metavar="UUID")
@as_of_option
@json_option
@graph_option
def partitions_instance(
    target: Target, instance_uuid: str, as_of: int | None, as_json: bool, graph_path: str | None
) -> None:
    """One partition instance by UUID (current or superseded)."""
    with connect(target, graph=_graph(graph_path)) as client:
        instance = client.instance(instance_uuid, as_of)
    render.emit(instance, as_json, lambda: render.instance_grid(instance))


@click.command("lineage")
@target_options
@click.argument("uuid_or_ref")
@click.option("--direction", type=click.Choice(["upstream", "downstream", "both"]), default="both", show_default=True)
@click.option("--depth", type=click.IntRange(0, MAX_LINEAGE_DEPTH), default=1, show_default=True, help="Hops.")
@as_of_option
@json_option
def lineage_command(
    target: Target, uuid_or_ref: str, direction: Any, depth: int, as_of: int | None, as_json: bool
) -> None:
    """Instances an instance was built from (upstream) and built into (downstream); a REF means its current one."""
    with connect(target) as client:
        root = instance_uuid_of(client, uuid_or_ref, as_of)
        found = client.lineage(root, direction=direction, depth=depth, as_of_seq=as_of)
    render.emit(found, as_json, lambda: render.lineage_tree(found, direction))


def instance_uuid_of(client: Client, uuid_or_ref: str, as_of: int | None) -> str:
    """The argument itself if it is an instance's UUID, else the UUID of the ref's canonical instance."""
    try:
        uuid.UUID(uuid_or_ref)
    except ValueError:
        return client.canonical(uuid_or_ref, as_of).uuid
    try:
        return client.instance(uuid_or_ref, as_of).uuid
    except NotFound:
        pass  # a ref may look like a UUID too
    try:
        return client.canonical(uuid_or_ref, as_of).uuid
    except NotFound:
        raise NotFound(f"no partition instance or ref {uuid_or_ref!r}") from None


@click.command()
@target_options
@click.argument("ref")
@click.option("--reason", default="", help="Why the data is bad (recorded in the log).")
@click.option("--only-this-ref", is_flag=True, help="Do not taint the Live partitions built from it.")
@user_option
@json_option
def taint(target: Target, ref: str, reason: str, only_this_ref: bool, user: str, as_json: bool) -> None:
    """Declare a Live partition's data bad (and, transitively, what was built from it)."""
    request = TaintRequest(ref=ref, reason=reason, only_this_ref=only_this_ref)
    with connect(target) as client:
        written = client.taint(request, user)
    render.emit(written, as_json, lambda: f"{ref} tainted at seq {written.seq}")


@click.command()
@target_options
@click.argument("ref")
@click.option("--location", required=True, help="Where the data is (path or URI).")
@click.option("--rows", type=click.IntRange(0, MAX_SAFE_INT), default=0, help="Row count, if known.")
@click.option("--bytes", "size", type=click.IntRange(0, MAX_SAFE_INT), default=0, help="Size in bytes, if known.")
@click.option(
    "--version",
    "version",
    help="The data's version (observing it again with another one taints what was built from it).",
)
@click.option("--strong", is_flag=True, help="The version identifies the bytes (an ETag, a content hash).")
@click.option("--graph", "graph_path", help="With --db: refuse refs that a job of this graph builds.")
@user_option
@json_option
def observe(
    target: Target,
    ref: str,
    location: str,
    rows: int,
    size: int,
    version: str | None,
    strong: bool,
    graph_path: str | None,
    user: str,
    as_json: bool,
) -> None:
    """Record that a source partition (one no job builds) is available, or has new data."""
    if strong and version is None:
        raise click.UsageError("--strong needs --version")
    source_version = SourceVersionRequest(value=version, strong=strong) if version is not None else None
    request = ObserveRequest(ref=ref, location=location, row_count=rows, bytes=size, version=source_version)
    graph = read_graph(graph_path) if graph_path is not None else None
    with connect(target, must_exist=False, graph=graph) as client:
        written = client.observe(request, user)
    render.emit(written, as_json, lambda: f"{ref} observed at {location}, seq {written.seq}")
