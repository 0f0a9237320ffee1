"""Worker-group commands: `group verify` (the invariants of every group, proved over the whole log)."""

from __future__ import annotations

from collections.abc import Iterator

import click

from partbuild.api import render
from partbuild.api.commands.common import CommandFailed, db_option, open_log
from partbuild.state.group_verify import verify_report
from partbuild.state.replay import Progress
from partbuild.state.store import EventLog

SHOWN_PROBLEMS = 20


@click.group("group")
def group_group() -> None:
    """Worker groups: orchestrators sharing a namespace's buckets through a leader (docs/worker-group.md)."""


@group_group.command("verify")
@db_option
def verify_command(db_url: str) -> None:
    """Replay the log and prove the group invariants at every seq.

    At most one owner per bucket, survivors keep their buckets across epochs,
    task messages change only their sender's state, and every accepted fenced
    decision was made by the owner of its partitions' buckets. Exit 0 with a
    summary when they hold; exit 1 listing the first problems when not.
    """
    with open_log(db_url, must_exist=True) as log:
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
