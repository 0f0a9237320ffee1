"""Want commands: `want` records wants; `wants` lists, shows and cancels them."""

from __future__ import annotations

import datetime as dt
from typing import IO, TYPE_CHECKING, get_args

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
from partbuild.api.commands.listing import add_cancel_command, listing_group
from partbuild.api.models.common import MAX_SAFE_INT
from partbuild.api.models.wants import MAX_BATCH_REFS, WantRequest, WantStateName, made_by_problem
from partbuild.state.rules.refs import ref_problem

if TYPE_CHECKING:
    from partbuild.orchestrator.graph import Graph


@click.command()
@target_options
@click.argument("refs", nargs=-1)
@click.option(
    "--file",
    "refs_file",
    type=click.File("r", encoding="utf-8"),
    help="Read refs from FILE, one a line ('-': stdin): one want naming them all (at most 10,000 refs).",
)
@click.option(
    "--want-per-ref",
    is_flag=True,
    help="With --file: one want per ref instead, sent in requests of 10,000 refs (any number of refs).",
)
@click.option("--one-want", is_flag=True, hidden=True)  # the default since --want-per-ref; kept for old scripts
@click.option("--graph", "graph_path", help="With --db: refuse refs that no job or source of this graph produces.")
@click.option("--want-id", help="Id of the want (default: a new random id).")
@click.option("--comment", default="", help="Why the data is wanted.")
@click.option(
    "--ttl", type=click.IntRange(0, MAX_SAFE_INT), default=0, help="Give up after this many seconds (0: never)."
)
@click.option("--sla", type=click.IntRange(0, MAX_SAFE_INT), default=0, help="Expected Live within this many seconds.")
@click.option("--data-timestamp", type=click.DateTime(), help="The moment the data describes (UTC; default now).")
@user_option
@json_option
def want(
    target: Target,
    refs: tuple[str, ...],
    refs_file: IO[str] | None,
    want_per_ref: bool,
    one_want: bool,
    graph_path: str | None,
    want_id: str | None,
    comment: str,
    ttl: int,
    sla: int,
    data_timestamp: dt.datetime | None,
    user: str,
    as_json: bool,
) -> None:
    """Record a want for one or more partition refs (or for the refs of --file)."""
    if want_per_ref and (refs_file is None or one_want):
        raise click.UsageError("--want-per-ref goes with --file, and not with --one-want")
    wanted = _refs_from(refs, refs_file)
    graph = read_graph(graph_path) if graph_path is not None else None
    if graph is not None and target.server is None:
        _check_producible(graph, wanted)  # all refs before the first request: bad input changes nothing
    groups = _groups(wanted, want_per_ref=want_per_ref, want_id=want_id, from_file=refs_file is not None)
    timestamp_ms = None
    if data_timestamp is not None:
        timestamp_ms = int(data_timestamp.replace(tzinfo=dt.UTC).timestamp() * 1000)
    requests = [
        WantRequest(
            refs=group,
            want_id=want_id,
            data_timestamp_ms=timestamp_ms,
            ttl_seconds=ttl,
            sla_seconds=sla,
            comment=comment,
        )
        for group in groups
    ]
    from partbuild.api.client import create_wants_chunked  # here: `wants --server` need not import it

    bar = render.progress_bar("wanting", show=len(wanted) > MAX_BATCH_REFS)
    with connect(target, must_exist=False, graph=graph) as client, bar:
        task = bar.add_task("wanting", total=len(wanted))
        created = create_wants_chunked(client, requests, user, on_sent=lambda refs: bar.advance(task, refs))
    if refs_file is None:
        only = created.wants[0]
        render.emit(only, as_json, lambda: f"want {only.want_id} for {len(wanted)} ref(s) recorded at seq {only.seq}")
    else:
        render.emit(
            created,
            as_json,
            lambda: (
                f"{len(created.wants):,} want(s) for {len(wanted):,} ref(s) recorded "
                f"at seqs {created.first_seq}..{created.last_seq}"
            ),
        )


def _groups(wanted: list[str], *, want_per_ref: bool, want_id: str | None, from_file: bool) -> list[list[str]]:
    """The refs of each want to record: all in one, or one want per ref."""
    if want_per_ref and want_id is not None:
        raise click.BadParameter(
            "names one want; --want-per-ref makes many with generated ids", param_hint="'--want-id'"
        )
    if not want_per_ref and len(wanted) > MAX_BATCH_REFS:
        hint = " (--want-per-ref makes one want per ref)" if from_file else ""
        raise click.BadParameter(f"a single want names at most {MAX_BATCH_REFS:,} refs{hint}", param_hint="'REFS'")
    return [[ref] for ref in wanted] if want_per_ref else [list(wanted)]


def _refs_from(args: tuple[str, ...], source: IO[str] | None) -> list[str]:
    """The refs of the command line or of the file, each valid and listed once."""
    if bool(args) == (source is not None):
        raise click.UsageError("give refs as arguments or --file FILE, one of the two")
    if source is None:
        where = [(ref, "REFS") for ref in args]
    else:
        # Surrounding whitespace (and blank lines) in a file are layout, not part of a ref.
        where = [(line.strip(), f"line {n}") for n, line in enumerate(source, 1) if line.strip()]
        if not where:
            raise click.BadParameter("no refs in the file", param_hint="'--file'")
    seen: set[str] = set()
    for ref, place in where:
        problem = ref_problem(ref)
        if problem:
            raise click.BadParameter(f"{problem}: {ref!r}", param_hint=f"'{place}'")
        if ref in seen:
            raise click.BadParameter(f"{ref!r} is listed more than once", param_hint=f"'{place}'")
        seen.add(ref)
    return [ref for ref, _ in where]


def _check_producible(graph: Graph, refs: list[str]) -> None:
    from partbuild.orchestrator.graph import GraphError

    for ref in refs:
        try:
            graph.resolve(ref)
        except GraphError as exc:
            raise click.BadParameter(str(exc), param_hint="'REFS'") from None


def _made_by(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """A `--made-by` filter as the API takes it; a usage error (exit 2, one line) for an unknown kind."""
    problem = made_by_problem(value) if value is not None else None
    if problem:
        raise click.BadParameter(problem, ctx, param)
    return value


wants_group = listing_group(
    "wants",
    "List wants, oldest first",
    [
        click.option("--state", type=click.Choice(get_args(WantStateName)), help="Only wants in this state."),
        click.option("--ref", help="Only wants naming this ref."),
        click.option("--root", help="Only wants under this root want (derivative wants included)."),
        click.option(
            "--made-by",
            callback=_made_by,
            metavar="KIND[:NAME]",
            help="Only wants made by: user[:NAME] (a person, by user or token name), schedule[:NAME], "
            "reaction[:JOB], derived[:PARENT] or system[:COMPONENT].",
        ),
    ],
    lambda client, state, **page: client.wants(state_filter=state, **page),
    render.wants_table,
    "wants",
)


@wants_group.command("show")
@target_options
@click.argument("want_id")
@as_of_option
@json_option
def wants_show(target: Target, want_id: str, as_of: int | None, as_json: bool) -> None:
    """A want, where each of its refs stands and what it waits for, and its derivative wants."""
    with connect(target) as client:
        detail = client.want(want_id, as_of_seq=as_of)
    render.emit(detail, as_json, lambda: render.want_detail(detail))


add_cancel_command(
    wants_group,
    "want",
    lambda client, want_id, request, user: client.cancel_want(want_id, request, user),
    "Cancel a want and its active derivative wants.",
)
