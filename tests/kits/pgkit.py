"""The test PostgreSQL server: its admin engine, and a fresh schema per test selected through the URL.

`PARTBUILD_TEST_PG_URL` (default `postgresql+psycopg://127.0.0.1:5432/test`) names the server. Each
schema is selected through `search_path` in the URL's connection options, so tables and Alembic's
`alembic_version` land there and child processes given the URL string see the same schema. The
fixtures over these (`pg_server`, `db_url`) live in tests/conftest.py.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
import sqlalchemy as sa

from partbuild.state.db import normalize_url

DEFAULT_PG_URL = "postgresql+psycopg://127.0.0.1:5432/test"


def pg_base_url() -> str:
    """The URL of the test server (no schema selected)."""
    return os.environ.get("PARTBUILD_TEST_PG_URL", DEFAULT_PG_URL)


@dataclass(frozen=True)
class PgServer:
    """The test PostgreSQL server: an autocommit admin engine, or why there is none."""

    engine: sa.Engine | None
    unreachable: str = ""


def postgres_url(server: PgServer) -> Iterator[str]:
    """Yield the URL of a fresh schema on `server` (skip when it is unreachable); drop the schema after."""
    if server.engine is None:
        pytest.skip(f"{server.unreachable}; set PARTBUILD_TEST_PG_URL, or PARTBUILD_REQUIRE_POSTGRES=1 to fail")
    schema = f"pbtest_{secrets.token_hex(6)}"
    with server.engine.connect() as conn:
        conn.execute(sa.text(f"CREATE SCHEMA {schema}"))
    url = normalize_url(pg_base_url()).update_query_dict({"options": f"-csearch_path={schema}"})
    try:
        yield url.render_as_string(hide_password=False)
    finally:
        with server.engine.connect() as conn:
            # A leaked idle-in-transaction connection must fail the teardown, not hang it.
            conn.execute(sa.text("SET lock_timeout = '10s'"))
            conn.execute(sa.text(f"DROP SCHEMA {schema} CASCADE"))


def read_only_url(url: str) -> str:
    """`url` with every session read-only by default: what a hot standby refuses, a server on it is refused."""
    parsed = normalize_url(url)
    options = f"{parsed.query.get('options', '')} -cdefault_transaction_read_only=on".strip()
    return parsed.update_query_dict({"options": options}).render_as_string(hide_password=False)
