"""Paged listing groups (`wants`, `partitions`, `runs`): list when called bare, hold subcommands."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import click

from partbuild.api import render
from partbuild.api.commands.common import (
    Target,
    all_option,
    as_of_option,
    connect,
    cursor_option,
    json_option,
    limit_option,
    target_options,
    user_option,
)
from partbuild.api.models.common import CancelRequest, PageOut, WrittenOut

_COMMANDLINE = click.core.ParameterSource.COMMANDLINE
Option = Callable[[Callable[..., Any]], Callable[..., Any]]


def collect(
    fetch: Callable[[str | None], PageOut[Any]], cursor: str | None, follow: bool, first: PageOut[Any] | None = None
) -> PageOut[Any]:
    """One page from `cursor` (`first`, when already fetched), or with `follow` every page from there (a counter
    on a terminal)."""
    page = first if first is not None else fetch(cursor)
    if not follow or page.next_cursor is None:
        return page
    items = list(page.items)
    with render.counter("fetching") as advance:
        while page.next_cursor is not None:
            page = fetch(page.next_cursor)
            items.extend(page.items)
            advance(len(items))
    return page.model_copy(update={"items": items, "next_cursor": None})


def _with_options(function: Callable[..., Any], options: Sequence[Option]) -> Callable[..., Any]:
    for option in reversed(options):
        function = option(function)
    return function


def listing_group(
    name: str,
    summary: str,
    filters: list[Option],
    fetch: Callable[..., PageOut[Any]],
    table: Callable[[list[Any]], Any],
    noun: str,
) -> click.Group:
    """A group that lists when called bare (or as `NAME list`); subcommands are added to it.

    `fetch(client, cursor=..., limit=..., as_of_seq=..., **filters)` reads one page; with `--as-of`, every
    page of `--all` is as of that seq.
    """
    options = [target_options, *filters, limit_option, all_option, cursor_option, as_of_option, json_option]

    def list_items(
        target: Target, limit: int, follow: bool, cursor: str | None, as_of: int | None, as_json: bool, **chosen: Any
    ) -> None:
        with connect(target) as client:
            page = collect(
                lambda after: fetch(client, cursor=after, limit=limit, as_of_seq=as_of, **chosen), cursor, follow
            )
        render.emit_page(page, as_json, table, noun, as_of)

    @click.pass_context
    def group(ctx: click.Context, /, **listing: Any) -> None:
        if ctx.invoked_subcommand is None:
            list_items(**listing)
        else:  # `partbuild wants --limit 5 show X` would silently ignore --limit
            given = [p.opts[0] for p in ctx.command.params if ctx.get_parameter_source(p.name or "") is _COMMANDLINE]
            if given:
                raise click.UsageError(
                    f"{', '.join(given)} before a subcommand: listing options go with 'partbuild {name} list', "
                    "a subcommand's options after its name"
                )

    help_text = f"{summary} (also '{name} list'); subcommands below."
    listing = click.group(name, invoke_without_command=True, help=help_text)(_with_options(group, options))
    listing.command("list", help=f"{summary}.")(_with_options(list_items, options))
    return listing


def add_cancel_command(
    group: click.Group, noun: str, cancel: Callable[[Any, str, CancelRequest, str], WrittenOut], summary: str
) -> None:
    """`NAME cancel ID [--reason R]`: `cancel(client, id, request, user)` records it."""

    def cancel_item(target: Target, item_id: str, reason: str, user: str, as_json: bool) -> None:
        with connect(target) as client:
            written = cancel(client, item_id, CancelRequest(reason=reason), user)
        render.emit(written, as_json, lambda: f"{noun} {item_id} canceled at seq {written.seq}")

    options = [
        target_options,
        click.argument("item_id", metavar="ID"),
        click.option("--reason", default="", help="Why (recorded in the log)."),
        user_option,
        json_option,
    ]
    group.command("cancel", help=summary)(_with_options(cancel_item, options))
