"""The `partbuild` command line.

Every query and write works against a server (`--server URL`, env
PARTBUILD_SERVER) or directly against a database (`--db URL`, env PARTBUILD_DB)
through the same `partbuild.api.client.Client` calls, and prints a table by
default or the API's JSON with `--json`.

Exit codes: 0 success; 1 the command ran but failed (verification mismatch,
database or server unreachable); 2 bad input (unknown option, bad value, bad
database URL, unknown want, invalid ref, a step the state does not allow),
always with exactly one line on stderr saying what was wrong. Bad input changes
nothing. A `--graph` file that raises (a bad declaration, an error of its own code) is bad
input too: one line naming the file, the line and the job; `partbuild --debug` (or
PARTBUILD_DEBUG=1) prints the Python traceback before it.

This module holds the root group, its table of commands and `main()`; the commands live in
`partbuild.api.commands`, one module per area, and share `commands.common`. A command's module
is imported only when that command runs (see `COMMANDS`).
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Sequence
from typing import Any

import click

from partbuild.api.errors import ApiError, ClientError

# Every command: name -> (module under partbuild.api.commands, attribute, the first paragraph of its help).
# `--help` lists the commands from here, and a command's module is imported only when that command runs,
# so `partbuild --version` and `--help` import neither SQLAlchemy, FastAPI, pydantic nor Spark.
# A new command is one row here (tests/api/test_cli.py checks each row against the command it names).
COMMANDS: dict[str, tuple[str, str, str]] = {
    "automation": (
        "automation",
        "automation_group",
        "Schedules: when each ticks, paused or not, its last tick and want, its next time (also 'automation "
        "list'); pause, resume or trigger one below.",
    ),
    "bucket": (
        "bucketing",
        "bucket_command",
        "Print the bucket (1..TOTAL) of each DATA in namespace KEY, one line each, in order.",
    ),
    "buckets": (
        "bucketing",
        "buckets_command",
        "How each bucketing namespace is split (fixed by its first sharded worker), and where round-robin stands.",
    ),
    "changes": (
        "changes",
        "changes_command",
        "What changed after seq A up to seq B (default: the head): instances created, states, canonical moves.",
    ),
    "checks": ("checks", "checks_group", "Quality checks of job outputs: run them again on what is already Live."),
    "bulk": (
        "bulk",
        "bulk",
        "Want, retry (the failed), taint or re-check (the Live) a selection of partitions in one request.",
    ),
    "config": ("bucketing", "config_group", "Configuration reference."),
    "db": ("log", "db", "Database schema commands."),
    "deliver": (
        "subscriptions",
        "deliver",
        "Deliver subscriptions' events from this process (its shards; SIGTERM/SIGINT stop it).",
    ),
    "demo": (
        "log",
        "demo",
        "Write a simulated W1 history (wants, dep misses, retries, taints) into an empty log.",
    ),
    "graph": ("jobs", "graph_group", "The served graph of jobs and source datasets."),
    "group": (
        "groups",
        "group_group",
        "Worker groups: orchestrators sharing a namespace's buckets through a leader (docs/worker-group.md).",
    ),
    "jobs": ("jobs", "jobs_group", "Jobs (and source datasets) of the served graph."),
    "lineage": (
        "partitions",
        "lineage_command",
        "Instances an instance was built from (upstream) and built into (downstream); a REF means its current one.",
    ),
    "observe": (
        "partitions",
        "observe",
        "Record that a source partition (one no job builds) is available, or has new data.",
    ),
    "partitions": (
        "partitions",
        "partitions_group",
        "List partitions (their current instances) ordered by ref (also 'partitions list'); subcommands below.",
    ),
    "replay": ("log", "replay", "Replay the event log and print head seq, digest, counts and rejected events."),
    "reshard": (
        "bucketing",
        "reshard_buckets_command",
        "Split a namespace's refs into --total buckets; workers still on the old total stop (their runs are rejected).",
    ),
    "retention": (
        "log",
        "retention",
        "Drop instances superseded more than --retain-days ago, or preview it with --dry-run.",
    ),
    "run": (
        "serving",
        "run",
        "Run the orchestrator: turn wants into job runs on Spark until stopped (SIGTERM/SIGINT).",
    ),
    "runs": ("runs", "runs_group", "List job runs, oldest first (also 'runs list'); subcommands below."),
    "serve": ("serving", "serve", "Serve the HTTP API over the database (one worker; SIGTERM/SIGINT stop it)."),
    "sources": (
        "sources",
        "sources_group",
        "Source datasets: how each is found, its connector, its scan's pass, cursor (redacted), items, partitions "
        "and errors (also 'sources list'); subcommands below.",
    ),
    "subscriptions": (
        "subscriptions",
        "subscriptions_group",
        "Webhook subscriptions: endpoint, format, shards, lag, queues and counters (also 'subscriptions list'); "
        "subcommands below.",
    ),
    "taint": (
        "partitions",
        "taint",
        "Declare a Live partition's data bad (and, transitively, what was built from it).",
    ),
    "tokens": (
        "tokens",
        "tokens_group",
        'API tokens and their roles: reader < writer < admin (README, "Access control").',
    ),
    "up": (
        "serving",
        "up",
        "HTTP API and orchestrator in one process (SQLite + local Spark by default); SIGTERM/SIGINT stop both.",
    ),
    "want": ("wants", "want", "Record a want for one or more partition refs (or for the refs of --file)."),
    "wants": ("wants", "wants_group", "List wants, oldest first (also 'wants list'); subcommands below."),
}


def load_command(name: str) -> click.Command:
    """The command `name` of the table, importing its module now."""
    module, attribute, _ = COMMANDS[name]
    command = getattr(importlib.import_module(f"partbuild.api.commands.{module}"), attribute)
    assert isinstance(command, click.Command)
    return command


class PartbuildGroup(click.Group):
    """Loads each command on first use, lists them from `COMMANDS` without importing them, and turns the
    service's domain errors into exit code 2 and client failures into exit code 1, one line each."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*COMMANDS, *self.commands})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in COMMANDS:
            self.add_command(load_command(cmd_name), cmd_name)
        return self.commands.get(cmd_name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The command list of `--help`, as click would write it, from the table's help texts."""
        names = self.list_commands(ctx)
        limit = formatter.width - 6 - max(len(name) for name in names)
        rows = [
            (name, click.Command(name, help=COMMANDS[name][2]).get_short_help_str(limit))
            if name in COMMANDS and name not in self.commands
            else (name, self.commands[name].get_short_help_str(limit))
            for name in names
        ]
        with formatter.section("Commands"):
            formatter.write_dl(rows)

    def invoke(self, ctx: click.Context) -> Any:
        from pydantic import ValidationError  # pydantic only once a command runs

        from partbuild.api.commands.common import BadInput, CommandFailed

        try:
            return super().invoke(ctx)
        except ApiError as exc:
            raise BadInput(str(exc)) from None
        except ValidationError as exc:  # a request model built from the command line
            from partbuild.api.errors import validation_message

            raise BadInput(validation_message(exc.errors())) from None
        except ClientError as exc:
            raise CommandFailed(str(exc)) from None
        except Exception as exc:
            refusal = _database_refusal(exc)
            if refusal is None:
                raise
            raise CommandFailed(refusal) from None


def _database_refusal(exc: Exception) -> str | None:
    """What to say of a database that refused or failed a command (`--db`): a write-lock bound ended it
    (retry), the database only reads (a hot standby), or its driver's error (a file opened read-only, a full
    disk, a lost connection); None for anything else, a bug whose traceback is printed."""
    import sqlalchemy as sa  # only on an error

    from partbuild.state.db import DatabaseReadOnly, WriteNotDone, driver_message, refused_as_read_only

    if refused_as_read_only(exc):
        return str(DatabaseReadOnly())
    if isinstance(exc, WriteNotDone):
        return str(exc)
    if isinstance(exc, sa.exc.DBAPIError):
        return f"the database failed the command: {driver_message(exc)}"
    return None


@click.group(cls=PartbuildGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="partbuild")
@click.option(
    "--debug",
    is_flag=True,
    envvar="PARTBUILD_DEBUG",
    help="Print the Python traceback behind an error in the graph file too. Env: PARTBUILD_DEBUG=1.",
)
@click.pass_context
def cli(ctx: click.Context, debug: bool) -> None:
    """partbuild: event-sourced partition build orchestrator."""
    from partbuild.api.commands.common import DEBUG_KEY

    ctx.meta[DEBUG_KEY] = debug  # the context's meta is shared with every subcommand's


def main(argv: Sequence[str] | None = None) -> None:
    """Console-script entry point: one line on stderr, exit code 2 for bad input and 1 for failures."""
    args = list(sys.argv[1:] if argv is None else argv)
    # pydantic looks for plugins in every installed package's metadata when it builds its first model: a
    # large part of a `--server` read's start-up, and a client's answers need none. Only there: `serve`, `up`
    # and `run` keep whatever plugins the user installed. Set it (to "") to look anyway.
    if any(arg == "--server" or arg.startswith("--server=") for arg in args):
        os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
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
