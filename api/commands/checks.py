"""Check commands: `checks run REF|UUID` runs a job's checks again on a Live instance (issue 24).

The command records a request (`POST /instances/{uuid}/checks`); an orchestrator runs the job's
current checks and records the results, tainting the instance (and what was built from it) on a
blocking failure. `--wait SECONDS` follows the instance until the request is answered and prints
its checks and state.
"""

from __future__ import annotations

import time

import click

from partbuild.api import render
from partbuild.api.commands.common import CommandFailed, Target, connect, json_option, target_options, user_option
from partbuild.api.commands.partitions import instance_uuid_of
from partbuild.api.models.partitions import ChecksRequestedOut, ChecksRunRequest, InstanceOut
from partbuild.api.surface import Client

POLL_S = 0.2
MAX_WAIT_S = 86_400.0


@click.group("checks")
def checks_group() -> None:
    """Quality checks of job outputs: run them again on what is already Live."""


@checks_group.command("run")
@click.argument("ref_or_uuid", metavar="REF|UUID")
@click.option("--comment", default="", help="Why (recorded with the request).")
@click.option(
    "--wait",
    "wait_s",
    type=click.FloatRange(min=0, max=MAX_WAIT_S),
    default=None,
    metavar="SECONDS",
    help="Wait up to this long for an orchestrator to answer, then print the results (exit 1 if none did).",
)
@target_options
@user_option
@json_option
def checks_run(target: Target, ref_or_uuid: str, comment: str, wait_s: float | None, user: str, as_json: bool) -> None:
    """Run the job's checks again on REF's canonical instance (or the instance UUID); a blocking failure taints it."""
    request = ChecksRunRequest(comment=comment)
    with connect(target) as client:
        uuid = instance_uuid_of(client, ref_or_uuid, None)
        requested = client.request_checks(uuid, request, user)
        if wait_s is None:
            render.emit(requested, as_json, lambda: render.checks_requested_text(requested))
            return
        answered = _answered(client, requested, wait_s)
    render.emit(answered, as_json, lambda: render.checks_answered_text(requested, answered))


def _answered(client: Client, requested: ChecksRequestedOut, wait_s: float) -> InstanceOut:
    """The instance once the request is answered; CommandFailed after `wait_s` seconds without an answer."""
    deadline = time.monotonic() + wait_s
    while True:
        # Read at least up to the log's head: a --db service folds only what a read asks it to.
        head = max(client.health().head_seq, requested.seq)
        instance = client.instance(requested.instance_uuid, None, head)
        if any(r.request_id == requested.request_id and r.answered_seq for r in instance.checks_requests):
            return instance
        if time.monotonic() >= deadline:
            raise CommandFailed(
                f"checks request {requested.request_id} was not answered within {wait_s:g} s "
                "(is an orchestrator running with this graph?)"
            )
        time.sleep(POLL_S)
