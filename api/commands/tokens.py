"""API tokens: `tokens add NAME --role ROLE` (prints the token once), `tokens list`, `tokens revoke NAME`.

Tokens live in the database (`Database.tokens`), so these commands take `--db` only: whoever
can open the database can do anything already. Also the rule `serve` and `up` follow
before they listen: open access (no tokens) only on a loopback address, unless `--insecure`.
"""

from __future__ import annotations

import time

import click
from rich.table import Table

from partbuild.api import render
from partbuild.api.commands.common import BadInput, db_option, json_option, open_database
from partbuild.state.database import Database
from partbuild.state.ops.tokens import Role, TokenExists, UnknownToken

ROLE_NAMES = [role.value for role in Role]

insecure_option = click.option(
    "--insecure",
    is_flag=True,
    help="Serve a database without tokens (open access) on a non-loopback address: anyone who reaches it may write.",
)


def refuse_open_access(host: str, insecure: bool, db: Database) -> None:
    """Exit 2 when `host` is not loopback and access would be open (no tokens), unless `insecure`."""
    from partbuild.api.auth import is_loopback  # here: `run` imports this module, and auth imports FastAPI

    if insecure or is_loopback(host) or db.tokens.all():
        return
    raise BadInput(
        f"refusing open access on non-loopback address {host}: the database has no API token "
        "(create one with 'partbuild tokens add NAME --role admin', or pass --insecure to serve without)"
    )


def _now_ms() -> int:
    return int(time.time() * 1000)


@click.group("tokens")
def tokens_group() -> None:
    """API tokens and their roles: reader < writer < admin (README, "Access control")."""


@tokens_group.command("add")
@click.argument("name")
@click.option("--role", "role_name", required=True, metavar="|".join(ROLE_NAMES), help="What the token may do.")
@db_option
def tokens_add(name: str, role_name: str, db_url: str) -> None:
    """Create a token named NAME (the user its writes record) and print it: it is shown only once."""
    try:
        role = Role.parse(role_name)
    except ValueError as exc:
        raise BadInput(str(exc)) from None
    with open_database(db_url, must_exist=False) as db:
        try:
            token = db.tokens.add(name, role, _now_ms())
        except (TokenExists, ValueError) as exc:
            raise BadInput(str(exc)) from None
    click.echo(token)
    click.echo(
        f"token {name!r} ({role.value}) created; it is shown only once: keep it (e.g. PARTBUILD_TOKEN)", err=True
    )


@tokens_group.command("list")
@db_option
@json_option
def tokens_list(db_url: str, as_json: bool) -> None:
    """Every token: name, role, when created and revoked (never the token or its hash)."""
    with open_database(db_url, must_exist=True) as db:
        tokens = db.tokens.all()
    if not tokens and not as_json:
        click.echo("no token: the API is open to anyone who can reach it (loopback only, unless --insecure)")
        return
    rows = [
        {"name": t.name, "role": t.role.value, "created_ms": t.created_ms, "revoked_ms": t.revoked_ms} for t in tokens
    ]

    def table() -> Table:
        shown = Table("NAME", "ROLE", "CREATED", "REVOKED", header_style="bold", pad_edge=False, box=None)
        for t in tokens:
            shown.add_row(t.name, t.role.value, render.when(t.created_ms), render.when(t.revoked_ms))
        return shown

    render.emit(rows, as_json, table)


@tokens_group.command("revoke")
@click.argument("name")
@db_option
def tokens_revoke(name: str, db_url: str) -> None:
    """Revoke the token NAME: it and its web sessions stop working within a second."""
    with open_database(db_url, must_exist=True) as db:
        try:
            revoked = db.tokens.revoke(name, _now_ms())
        except UnknownToken as exc:
            raise BadInput(str(exc.args[0])) from None
    click.echo(f"token {name!r} revoked" if revoked else f"token {name!r} was revoked already")
