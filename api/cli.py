"""The `partbuild` command line.

Every query and write works against a server (`--server URL`, env
PARTBUILD_SERVER) or directly against a database (`--db URL`, env PARTBUILD_DB)
through the same `partbuild.api.client.Client` calls, and prints a table by
default or the API's JSON with `--json`.

Exit codes: 0 success; 1 the command ran but failed (verification mismatch,
database or server unreachable); 2 bad input (unknown option, bad value, bad
database URL, unknown want, invalid ref, a step the state does not allow),
always with exactly one line on stderr saying what was wrong. Bad input changes
nothing.

This module holds the root group and `main()`; the commands live in
`partbuild.api.commands`, one module per area, and share `commands.common`.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

import click
from pydantic import ValidationError

from partbuild.api.commands import (
    automation,
    bucketing,
    changes,
    checks,
    groups,
    jobs,
    log,
    partitions,
    runs,
    serving,
    sources,
    subscriptions,
    tokens,
    wants,
)
from partbuild.api.commands.common import BadInput, CommandFailed
from partbuild.api.errors import ApiError, ClientError, validation_message


class PartbuildGroup(click.Group):
    """Turns the service's domain errors into exit code 2 and client failures into exit code 1, one line each."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except ApiError as exc:
            raise BadInput(str(exc)) from None
        except ValidationError as exc:  # a request model built from the command line
            raise BadInput(validation_message(exc.errors())) from None
        except ClientError as exc:
            raise CommandFailed(str(exc)) from None


@click.group(cls=PartbuildGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="partbuild")
def cli() -> None:
    """partbuild: event-sourced partition build orchestrator."""


for command in (
    log.db,
    log.replay,
    log.demo,
    log.retention,
    wants.want,
    wants.wants_group,
    partitions.partitions_group,
    partitions.lineage_command,
    partitions.taint,
    partitions.observe,
    checks.checks_group,
    runs.runs_group,
    changes.changes_command,
    serving.serve,
    serving.up,
    serving.run,
    bucketing.bucket_command,
    bucketing.buckets_command,
    bucketing.reshard_buckets_command,
    bucketing.config_group,
    groups.group_group,
    sources.sources_group,
    automation.automation_group,
    subscriptions.subscriptions_group,
    subscriptions.deliver,
    tokens.tokens_group,
    jobs.graph_group,
    jobs.jobs_group,
):
    cli.add_command(command)


def main(argv: Sequence[str] | None = None) -> None:
    """Console-script entry point: one line on stderr, exit code 2 for bad input and 1 for failures."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args:
        click.echo(cli.get_help(click.Context(cli, info_name="partbuild")))
        sys.exit(0)
    try:
        code = cli.main(args=args, prog_name="partbuild", standalone_mode=False)
    except click.ClickException as exc:
        # One line, whatever a server's detail or a graph error contains.
        message = " ".join(exc.format_message().splitlines())
        click.echo(f"partbuild: error: {message}", err=True)
        sys.exit(exc.exit_code)
    except click.Abort:
        click.echo("partbuild: aborted", err=True)
        sys.exit(130)
    sys.exit(code if isinstance(code, int) else 0)
