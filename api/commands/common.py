"""What the commands share: options, the exit-code errors, and where the data is (`--server` or `--db`)."""

from __future__ import annotations

import dataclasses
import functools
import getpass
import logging
import re
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from partbuild.api.models.common import MAX_PAGE, MAX_SAFE_INT

if TYPE_CHECKING:  # the rest only when a command reads: `--server` needs no SQLAlchemy, `--help` nothing heavy
    from partbuild.api.surface import Client
    from partbuild.orchestrator.graph import Graph
    from partbuild.state.database import Database

DEFAULT_DB = "sqlite:///partbuild.db"
_DIGITS = re.compile(r"[0-9]+", re.ASCII)

db_option = click.option(
    "--db",
    "db_url",
    envvar="PARTBUILD_DB",
    default=DEFAULT_DB,
    show_default=True,
    help="Database URL of the event log (SQLite file or postgresql://...). Env: PARTBUILD_DB.",
)
token_option = click.option(
    "--token",
    envvar="PARTBUILD_TOKEN",
    metavar="TOKEN",
    help="With --server: the API token to send (`partbuild tokens add`). Env: PARTBUILD_TOKEN.",
)
server_option = click.option(
    "--server",
    envvar="PARTBUILD_SERVER",
    metavar="URL",
    help="Talk to this partbuild API (http://host:port) instead of a database. Env: PARTBUILD_SERVER.",
)
json_option = click.option("--json", "as_json", is_flag=True, help="Print the API's JSON instead of a table.")
user_option = click.option("--user", default=getpass.getuser, show_default="current user", help="Who asks.")


class SeqType(click.ParamType):
    """A seq of the log: ASCII digits only (`int()` would also take "+5", " 5" and "1_0"), at most 2^53 - 1."""

    name = "seq"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_SAFE_INT:
            return value
        # At most 16 digits before int(): a very long string would take int() a while, or be refused by it.
        if isinstance(value, str) and len(value) <= 16 and _DIGITS.fullmatch(value) and int(value) <= MAX_SAFE_INT:
            return int(value)
        self.fail(f"{str(value)[:40]!r} is not a seq (an integer from 0 to {MAX_SAFE_INT})", param, ctx)


SEQ = SeqType()
# Every read of the state takes it; a seq after the log's head is bad input (exit 2), like an unknown id.
as_of_option = click.option(
    "--as-of", "as_of", type=SEQ, metavar="SEQ", help="Answer as of this seq of the log (right after that event)."
)
limit_option = click.option(
    "--limit",
    type=click.IntRange(1, MAX_PAGE),
    default=100,
    show_default=True,
    help="Items per page (per request with --all).",
)
all_option = click.option("--all", "follow", is_flag=True, help="Follow cursors to the last page.")
cursor_option = click.option("--cursor", help="Start after this `next_cursor` of an earlier page.")
host_option = click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
port_option = click.option(
    "--port", type=click.IntRange(0, 65535), default=8000, show_default=True, help="Port (0: any free port)."
)
retain_days_option = click.option(
    "--retain-days",
    type=click.IntRange(min=0),
    envvar="PARTBUILD_RETAIN_DAYS",
    help=(
        "Keep this many days of history: drop instances superseded longer ago (checked hourly; default: keep them all)."
    ),
)


class CommandFailed(click.ClickException):
    """The command ran and failed: exit code 1, one line."""


class BadInput(click.ClickException):
    """Input the service or server refused (unknown id, invalid ref, not a valid next step): exit code 2."""

    exit_code = 2


# ----------------------------------------------------------------- where the data is: --server or --db


@dataclasses.dataclass(frozen=True)
class Target:
    """Where a command reads and writes: a server's URL, else a database URL."""

    server: str | None
    db_url: str
    token: str | None = dataclasses.field(default=None, repr=False)  # a secret: never in a message


def target_options(command: Callable[..., None]) -> Callable[..., None]:
    """Add --server, --db and --token to a command, which then receives them as one `target`."""

    @server_option
    @db_option
    @token_option
    @functools.wraps(command)
    def wrapper(*args: Any, server: str | None, db_url: str, token: str | None, **kwargs: Any) -> None:
        ctx = click.get_current_context()
        on_line = click.core.ParameterSource.COMMANDLINE
        db_given = ctx.get_parameter_source("db_url") == on_line
        if server and db_given and ctx.get_parameter_source("server") == on_line:
            raise click.UsageError("give either --server or --db, not both")
        if db_given:  # --db on the command line overrides PARTBUILD_SERVER
            server = None
        if server is not None and not server.startswith(("http://", "https://")):
            raise click.BadParameter(f"{server!r} is not an http:// or https:// URL", param_hint="'--server'")
        return command(*args, target=Target(server, db_url, token), **kwargs)

    return wrapper


@contextmanager
def connect(target: Target, *, must_exist: bool = True, graph: Graph | None = None) -> Iterator[Client]:
    """A client for `target`: HTTP to the server, or a service in this process over the database."""
    if target.server is not None:
        from partbuild.api.client import HttpClient

        if graph is not None:
            raise click.BadParameter(
                "applies only with --db; a server checks refs against its own graph", param_hint="'--graph'"
            )
        with HttpClient(target.server, token=target.token) as client:
            yield client
        return
    from partbuild.api import render
    from partbuild.api.service import Service

    with open_database(target.db_url, must_exist=must_exist) as db:
        if db.log.head() >= render.PROGRESS_THRESHOLD and render.err_console.is_terminal:
            with render.err_console.status("reading the log"):
                service = Service(db, graph=graph)
        else:
            service = Service(db, graph=graph)
        yield service  # the service is the in-process client


def sqlite_path(db_url: str) -> Path | None:
    """The file of a SQLite URL; None for other databases and in-memory SQLite."""
    import sqlalchemy as sa

    url = sa.make_url(db_url)
    if url.get_backend_name() != "sqlite" or not url.database or url.database == ":memory:":
        return None
    return Path(url.database)


def open_database(db_url: str, *, must_exist: bool) -> Database:
    """Open the database (its log and operational stores), turning every way this can fail into one clear line."""
    import sqlalchemy as sa

    from partbuild.state.database import Database
    from partbuild.state.db import WriteBoundSettingError
    from partbuild.state.migrate import SchemaNotReady

    try:
        path = sqlite_path(db_url)
    except sa.exc.ArgumentError:
        raise click.BadParameter(f"{db_url!r} is not a database URL", param_hint="'--db'") from None
    if must_exist and path is not None and not path.exists():
        raise click.BadParameter(f"no database at {path} (create one with 'partbuild demo')", param_hint="'--db'")
    try:
        return Database.open(db_url)
    except SchemaNotReady as exc:
        raise CommandFailed(str(exc)) from None
    except WriteBoundSettingError as exc:  # a setting of the environment, not of --db
        raise click.UsageError(str(exc)) from None
    except (sa.exc.NoSuchModuleError, ValueError) as exc:
        raise click.BadParameter(f"{db_url!r}: unsupported database ({exc})", param_hint="'--db'") from None
    except sa.exc.OperationalError as exc:
        raise CommandFailed(f"cannot open database {db_url}: {exc.orig}") from None


DEBUG_KEY = "partbuild.debug"  # in the click context's meta: set by `partbuild --debug` (api/cli.py)


def debugging() -> bool:
    """Whether `--debug` (or PARTBUILD_DEBUG=1) asked for tracebacks with the one-line errors."""
    ctx = click.get_current_context(silent=True)
    return bool(ctx is not None and ctx.meta.get(DEBUG_KEY))


def read_graph(path: str) -> Graph:
    """The graph of a `--graph` file; else one line and exit code 2 (with `--debug`, the traceback first).

    No file, or none defining a graph: a bad `--graph` value. Anything the file's code raised (a bad
    declaration, an error of its own): `graph file F, line N: job 'J': what was wrong` (orchestrator/declarations.py).
    """
    from partbuild.orchestrator.graph import GraphError, GraphFileError, load_graph

    try:
        return load_graph(path)
    except GraphFileError as exc:
        if debugging() and exc.__cause__ is not None:
            click.echo("".join(traceback.format_exception(exc.__cause__)).rstrip(), err=True)
        raise BadInput(str(exc)) from None
    except GraphError as exc:
        raise click.BadParameter(str(exc), param_hint="'--graph'") from None


def configure_logging() -> None:
    """Log lines for the long-running commands (`serve`, `run`, `up`, `deliver`), without libraries' chatter."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for noisy in ("alembic", "py4j"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
