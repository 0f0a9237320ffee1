"""`partbuild bulk`: one action on a selection of partitions, in one request (`POST /api/v1/bulk`)."""

from __future__ import annotations

from typing import IO, get_args

import click

from partbuild.api import render
from partbuild.api.commands.common import Target, connect, json_option, target_options, user_option
from partbuild.api.models.bulk import (
    BulkActionName,
    BulkOut,
    BulkRequest,
    BulkSelection,
    PrefixSelectionRequest,
    RefsSelectionRequest,
)
from partbuild.api.models.common import InstanceStateName


@click.command()
@target_options
@click.argument("action", type=click.Choice(get_args(BulkActionName)))
@click.option("--ref-prefix", help="Every partition whose ref starts with this ('' : all).")
@click.option(
    "--refs-file",
    type=click.File("r", encoding="utf-8"),
    help="These refs instead, one a line ('-': stdin).",
)
@click.option("--state", type=click.Choice(get_args(InstanceStateName)), help="Only partitions in this state.")
@click.option("--stale", is_flag=True, help="Only Live partitions built by another code version.")
@click.option("--reason", default="", help="The want's comment, or the taint's reason.")
@click.option("--want-id", help="want/retry: the want's id (default: a new one).")
@click.option("--dry-run", is_flag=True, help="Say what it would act on; record nothing.")
@user_option
@json_option
def bulk(
    target: Target,
    action: str,
    ref_prefix: str | None,
    refs_file: IO[str] | None,
    state: str | None,
    stale: bool,
    reason: str,
    want_id: str | None,
    dry_run: bool,
    user: str,
    as_json: bool,
) -> None:
    """Want, retry (the failed), taint or re-check (the Live) a selection of partitions in one request."""
    if (ref_prefix is None) == (refs_file is None):
        raise click.UsageError("give --ref-prefix or --refs-file")
    selection: BulkSelection
    if refs_file is not None:
        selection = RefsSelectionRequest(refs=[line.strip() for line in refs_file if line.strip()])
    else:
        selection = PrefixSelectionRequest(ref_prefix=ref_prefix, state=state, stale=stale)  # type: ignore[arg-type]
    request = BulkRequest(action=action, selection=selection, reason=reason, want_id=want_id, dry_run=dry_run)  # type: ignore[arg-type]
    with connect(target) as client:
        done = client.bulk(request, user)
    render.emit(done, as_json, lambda: said(done))


def said(done: BulkOut) -> str:
    """One line: what it acted on (or would), and where that landed."""
    shown = ", ".join(done.refs) + (", ..." if done.acted_on > len(done.refs) else "")
    head = f"{done.action}: {done.acted_on:,} of {done.selected:,} selected partitions"
    if done.dry_run:
        return f"{head} (a dry run: nothing recorded){': ' + shown if shown else ''}"
    if done.first_seq is None:
        return f"{head}: nothing to do"
    want = f", want {done.want_id}" if done.want_id else ""
    return f"{head}: {shown}{want}, seqs {done.first_seq}-{done.last_seq}"
