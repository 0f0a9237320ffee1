"""Job run commands: `runs` lists them, `runs show` shows one, `runs cancel` stops one."""

from __future__ import annotations

from typing import get_args

import click

from partbuild.api import render
from partbuild.api.commands.common import Target, as_of_option, connect, json_option, target_options
from partbuild.api.commands.listing import add_cancel_command, listing_group
from partbuild.api.models.common import MAX_SAFE_INT
from partbuild.api.models.runs import JobRunStateName

runs_group = listing_group(
    "runs",
    "List job runs, oldest first",
    [
        click.option("--state", type=click.Choice(get_args(JobRunStateName)), help="Only job runs in this state."),
        click.option("--job", help="Only runs of this job (its label)."),
    ],
    lambda client, state, **page: client.job_runs(state_filter=state, **page),
    render.runs_table,
    "job runs",
)


@runs_group.command("show")
@target_options
@click.argument("run_id")
@as_of_option
@json_option
def runs_show(target: Target, run_id: str, as_of: int | None, as_json: bool) -> None:
    """One job run: its job, state, partitions, inputs and error."""
    with connect(target) as client:
        run = client.job_run(run_id, as_of_seq=as_of)
    render.emit(run, as_json, lambda: render.run_grid(run))


add_cancel_command(
    runs_group,
    "job run",
    lambda client, run_id, request, user: client.cancel_job_run(run_id, request, user),
    "Stop a queued or running job run: its Spark jobs are cancelled, its partitions built again later.",
)


@runs_group.command("logs")
@target_options
@click.argument("run_id")
@click.option("--follow", "-f", is_flag=True, help="Keep printing new lines until the run ends.")
@click.option(
    "--after",
    type=click.IntRange(0, MAX_SAFE_INT),
    default=0,
    show_default=True,
    help="Only lines numbered above this.",
)
@json_option
def runs_logs(target: Target, run_id: str, follow: bool, after: int, as_json: bool) -> None:
    """A job run's log lines (redacted); --json prints one JSON object per line (JSON Lines)."""
    from partbuild.api.render import run_log_line  # here, not at import: the CLI starts fast

    page_size = 1000
    with connect(target) as client:
        while True:
            page = client.job_run_logs(run_id, after=after, limit=page_size, follow=FOLLOW_WAIT_S if follow else 0.0)
            for line in page.lines:
                click.echo(line.model_dump_json() if as_json else run_log_line(line))
            after = page.next_after
            if len(page.lines) == page_size:
                continue  # a full page: more lines are there now
            if not follow or not page.active:
                return


FOLLOW_WAIT_S = 10.0  # each request of `runs logs --follow` waits this long for a line at most
