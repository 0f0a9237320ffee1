"""API tokens and the session-signing key (`Database.tokens`): who may call the API, in which role.

A token is `pbt_` + 32 random bytes in url-safe base64. Only its SHA-256 is stored
(a 256-bit random secret cannot be guessed, so no slow password hash is needed);
the token itself is returned once, by `add`, and never again. A token's `name` is
the user recorded on the events it appends, so names are never reused: revoking
keeps the row with its `revoked_ms`.

The per-database session key signs the web UI's session cookies; it is created on
first use, so every process serving the database signs and checks with the same key.
"""

from __future__ import annotations

import hashlib
import re
import secrets
from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.engine import Engine, RowMapping

from partbuild.state.db import begin_write
from partbuild.state.ops.roles import Role
from partbuild.state.schema import api_tokens as table
from partbuild.state.schema import session_keys

TOKEN_PREFIX = "pbt_"
TOKEN_BYTES = 32
# Names travel as the user of events and in log lines: plain, short, printable ASCII.
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.@-]{0,63}")


class TokenExists(ValueError):
    """A token of that name exists (or existed: names are not reused)."""


class UnknownToken(LookupError):
    """No token has that name."""


@dataclass(frozen=True)
class TokenInfo:
    """A token's row, without the token: what `list` shows and a lookup finds."""

    name: str
    role: Role
    created_ms: int
    revoked_ms: int | None

    @property
    def active(self) -> bool:
        return self.revoked_ms is None


def check_token_name(name: str) -> str:
    """`name` when it is a valid token name; ValueError otherwise."""
    if not _NAME.fullmatch(name):
        raise ValueError(
            f"invalid token name {name!r}: 1 to 64 letters, digits, '_', '.', '@' or '-', "
            "starting with a letter or digit"
        )
    return name


def token_hash(token: str) -> str:
    """The stored form of a token: SHA-256, hex."""
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


def new_token() -> str:
    """A fresh random token."""
    return TOKEN_PREFIX + secrets.token_urlsafe(TOKEN_BYTES)


def _info(row: RowMapping) -> TokenInfo:
    revoked = row["revoked_ms"]
    return TokenInfo(row["name"], Role(row["role"]), int(row["created_ms"]), None if revoked is None else int(revoked))


_COLUMNS = (table.c.name, table.c.role, table.c.created_ms, table.c.revoked_ms)


class TokenStore:
    """The `api_tokens` and `session_keys` tables. Every write is its own short transaction."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    def add(self, name: str, role: Role, now_ms: int) -> str:
        """Create a token; returns it (the only time it exists outside its holder's hands)."""
        check_token_name(name)
        token = new_token()
        row = {"name": name, "role": role.value, "token_hash": token_hash(token), "created_ms": now_ms}
        try:
            with begin_write(self._engine) as conn:
                conn.execute(table.insert(), row)
        except sa.exc.IntegrityError:
            raise TokenExists(f"a token named {name!r} exists already (names are never reused)") from None
        return token

    def revoke(self, name: str, now_ms: int) -> bool:
        """Revoke the token `name`; False when it was revoked already; UnknownToken when there is none."""
        with begin_write(self._engine) as conn:
            done = conn.execute(
                sa.update(table).where(table.c.name == name, table.c.revoked_ms.is_(None)).values(revoked_ms=now_ms)
            )
            if done.rowcount:
                return True
            if conn.execute(sa.select(table.c.name).where(table.c.name == name)).first() is None:
                raise UnknownToken(f"no token named {name!r}")
        return False

    def all(self) -> list[TokenInfo]:
        """Every token, revoked or not, by creation (then name)."""
        query = sa.select(*_COLUMNS).order_by(table.c.created_ms, table.c.name)
        with self._engine.connect() as conn:
            return [_info(row) for row in conn.execute(query).mappings()]

    def by_hash(self) -> dict[str, TokenInfo]:
        """Every token by its hash: the whole table in one read, for an in-memory cache of it."""
        with self._engine.connect() as conn:
            rows = conn.execute(sa.select(table.c.token_hash, *_COLUMNS)).mappings().all()
        return {row["token_hash"]: _info(row) for row in rows}

    def find(self, token: str) -> TokenInfo | None:
        """The token's row (active or revoked), by its hash; None for a token never issued here."""
        query = sa.select(*_COLUMNS).where(table.c.token_hash == token_hash(token))
        with self._engine.connect() as conn:
            row = conn.execute(query).mappings().first()
        return None if row is None else _info(row)

    def session_key(self, now_ms: int) -> bytes:
        """The database's session-signing key, created (32 random bytes) by the first caller."""
        query = sa.select(session_keys.c.signing_key).where(session_keys.c.id == 1)
        with self._engine.connect() as conn:
            key = conn.execute(query).scalar_one_or_none()
        if key is None:
            try:
                with begin_write(self._engine) as conn:
                    key = secrets.token_hex(32)
                    conn.execute(session_keys.insert(), {"id": 1, "signing_key": key, "created_ms": now_ms})
            except sa.exc.IntegrityError:  # another process created it first: use theirs
                with self._engine.connect() as conn:
                    key = conn.execute(query).scalar_one()
        return bytes.fromhex(key)
