"""`partbuild changes A [B]`: what changed after seq A up to seq B (default: the head)."""

from __future__ import annotations

import click

from partbuild.api import render
from partbuild.api.commands.common import (
    SEQ,
    Target,
    all_option,
    connect,
    cursor_option,
    json_option,
    limit_option,
    target_options,
)
from partbuild.api.commands.listing import collect


@click.command("changes")
@target_options
@click.argument("from_seq", type=SEQ, metavar="A")
@click.argument("to_seq", type=SEQ, metavar="[B]", required=False)
@limit_option
@all_option
@cursor_option
@json_option
def changes_command(
    target: Target, from_seq: int, to_seq: int | None, limit: int, follow: bool, cursor: str | None, as_json: bool
) -> None:
    """What changed after seq A up to seq B (default: the head): instances created, states, canonical moves."""
    with connect(target) as client:
        first = client.changes(from_seq, to_seq, cursor, limit)
        upto = first.as_of_seq  # every further page up to the same seq
        page = collect(lambda after: client.changes(from_seq, upto, after, limit), cursor, follow, first)
    render.emit_page(page, as_json, render.changes_table, f"changes after seq {from_seq} up to seq {page.as_of_seq}")
