"""Worker-group commands: `group list` and `group show` (epochs, members, ownership, heartbeats; through the
API client, so with --db or --server), `group verify` (the invariants of every group, over the whole log)."""

from __future__ import annotations

from collections.abc import Iterator

import click

from partbuild.api import render, render_operations
from partbuild.api.commands.common import (
    CommandFailed,
    Target,
    as_of_option,
    connect,
    db_option,
    json_option,
    open_database,
    target_options,
)
from partbuild.api.models.groups import MAX_MEMBER_TIMEOUT_S
from partbuild.state.log.group_verify import verify_report
from partbuild.state.log.replay import Progress
from partbuild.state.log.store import EventLog

SHOWN_PROBLEMS = 20


@click.group("group")
def group_group() -> None:
    """Worker groups: orchestrators sharing a namespace's buckets through a leader (docs/worker-group.md)."""


@group_group.command("list")
@target_options
@as_of_option
@json_option
def group_list(target: Target, as_of: int | None, as_json: bool) -> None:
    """Every worker group: its epoch, leader, member count and buckets being handed off."""
    with connect(target) as client:
        groups = client.groups(as_of)
    if not groups and not as_json:
        click.echo("no worker group")
        return
    render.emit(groups, as_json, lambda: render_operations.groups_table(groups))


@group_group.command("show")
@click.argument("name")
@target_options
@as_of_option
@click.option(
    "--member-timeout",
    "member_timeout_s",
    type=click.FloatRange(min=0, max=MAX_MEMBER_TIMEOUT_S, min_open=True),
    default=10.0,
    show_default=True,
    metavar="SECONDS",
    help="A member whose last heartbeat is older than this is shown dead.",
)
@json_option
def group_show(target: Target, name: str, as_of: int | None, member_timeout_s: float, as_json: bool) -> None:
    """A worker group: epoch, leader, and each member's buckets (owned, shared) and load as of the seq
    (--as-of: any seq of the log), with its host, pid and last heartbeat now (heartbeats have no history)."""
    with connect(target) as client:
        group = client.group(name, member_timeout_s, as_of)
    render.emit(group, as_json, lambda: render_operations.group_detail(group))


@group_group.command("verify")
@db_option
def group_verify(db_url: str) -> None:
    """Replay the log and prove the group invariants at every seq.

    At most one owner per bucket, survivors keep their buckets across epochs,
    task messages change only their sender's state, and every accepted fenced
    decision was made by the owner of its partitions' buckets. Exit 0 with a
    summary when they hold; exit 1 listing the first problems when not.
    """
    with open_database(db_url, must_exist=True) as db:
        log = db.log
        head = log.head()
        with render.progress("verifying", 0, head) as progress:
            report = verify_report(_payloads(log, progress))
    if not report.problems:
        click.echo(f"group invariants hold at every seq up to {head}: {report.summary()}")
        return
    for problem in report.problems[:SHOWN_PROBLEMS]:
        click.echo(str(problem))
    more = len(report.problems) - SHOWN_PROBLEMS
    if more > 0:
        click.echo(f"... and {more} more")
    raise CommandFailed(f"{len(report.problems)} group invariant problems in {report.events} events")


def _payloads(log: EventLog, progress: Progress | None) -> Iterator[tuple[int, bytes]]:
    """(seq, payload) pairs of the log, telling `progress` (a bar on a terminal) every 20,000."""
    for seq, payload in log.iter_payloads():
        if progress is not None and seq % 20_000 == 0:
            progress(seq)
        yield seq, payload
