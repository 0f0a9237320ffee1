"""Alembic environment for the partbuild event store.

Invoked by `partbuild.state.migrate` with an open connection (already inside a
write transaction) in `config.attributes["connection"]`, or by plain Alembic with
`sqlalchemy.url` set in the config.
"""

from __future__ import annotations

from alembic import context
from sqlalchemy.engine import Connection

from partbuild.state.db import begin_write, create_engine_for, lock_for_migration, normalize_url
from partbuild.state.schema import metadata


def _configure_and_run(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=metadata,
        # SQLite cannot ALTER most things; batch mode recreates tables instead.
        render_as_batch=connection.dialect.name == "sqlite",
    )
    # Inside the caller's transaction this adds none of its own, so the whole
    # upgrade commits or rolls back as one.
    with context.begin_transaction():
        context.run_migrations()


def _run_offline(url: str) -> None:
    """Emit the upgrade as SQL text (`alembic upgrade --sql`), touching no database."""
    context.configure(url=normalize_url(url), target_metadata=metadata, literal_binds=True)
    with context.begin_transaction():
        context.run_migrations()


def _run() -> None:
    config = context.config
    connection = config.attributes.get("connection")
    if connection is not None:
        _configure_and_run(connection)
        return
    url = config.get_main_option("sqlalchemy.url")
    if not url:
        raise RuntimeError("no database: pass config.attributes['connection'] or set sqlalchemy.url")
    if context.is_offline_mode():
        _run_offline(url)
        return
    engine = create_engine_for(url)
    try:
        with begin_write(engine) as conn:
            lock_for_migration(conn)
            _configure_and_run(conn)
    finally:
        engine.dispose()


_run()
