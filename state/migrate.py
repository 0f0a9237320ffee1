"""Bring a database's schema to the revision this code expects (Alembic, programmatically).

`open_migrated_engine` opens a database and checks its schema: by default SQLite
upgrades itself, PostgreSQL must be upgraded on purpose (`partbuild db upgrade`).
Concurrent upgrades are serialized (`state.db.lock_for_migration`).
"""

from __future__ import annotations

import functools
from importlib.resources import files
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy.engine import Engine

from partbuild.state.db import backend, begin_write, create_engine_for, lock_for_migration


class SchemaNotReady(RuntimeError):
    """The database schema is not at the revision this code needs."""


def _migrations_dir() -> Path:
    # The installed package's own directory, so a wheel finds its migrations
    # without an alembic.ini or a source checkout.
    return Path(str(files("partbuild.migrations")))


def alembic_config(url: str | None = None) -> Config:
    """An Alembic config for partbuild's migrations, optionally naming a database URL."""
    config = Config()
    config.set_main_option("script_location", str(_migrations_dir()))
    if url is not None:
        # Config values are interpolated ConfigParser strings: a literal % must be doubled
        # (URL-encoded query options such as `options=-csearch_path%3D...` have them).
        config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return config


@functools.cache
def _script_directory() -> ScriptDirectory:
    return ScriptDirectory.from_config(alembic_config())


def head_revision() -> str:
    """The newest revision shipped with this code."""
    head = _script_directory().get_current_head()
    if head is None:
        raise RuntimeError(f"no Alembic revisions found in {_migrations_dir()}")
    return head


def _known_revisions() -> set[str]:
    return {script.revision for script in _script_directory().walk_revisions()}


def current_revision(engine: Engine) -> str | None:
    """The revision recorded in the database, None for an empty database."""
    with engine.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()


def upgrade(url_or_engine: str | Engine, revision: str = "head") -> None:
    """Upgrade the schema to `revision`; a no-op costing one query when already at head."""
    engine = create_engine_for(url_or_engine) if isinstance(url_or_engine, str) else url_or_engine
    try:
        if revision in ("head", head_revision()) and current_revision(engine) == head_revision():
            return
        # One write transaction for the whole upgrade, with the migration lock held,
        # so processes starting together on a fresh database migrate it once.
        with begin_write(engine) as conn:
            lock_for_migration(conn)
            config = alembic_config()
            config.attributes["connection"] = conn
            command.upgrade(config, revision)
    finally:
        if engine is not url_or_engine:
            engine.dispose()


def ensure_schema(engine: Engine, auto_upgrade: bool) -> None:
    """Make sure the schema is at head: upgrade it, or explain how to."""
    current = current_revision(engine)
    head = head_revision()
    if current == head:
        return
    if current is not None and current not in _known_revisions():
        raise SchemaNotReady(
            f"database schema is at revision {current}, which this version of partbuild does not "
            f"know (expected {head}): was it upgraded by a newer partbuild?"
        )
    if not auto_upgrade:
        url = engine.url.render_as_string(hide_password=True)
        raise SchemaNotReady(
            f"database schema is at revision {current or '(none)'}, expected {head}: "
            f"run `partbuild db upgrade --db {url}`"
        )
    upgrade(engine)


def open_migrated_engine(url: str, auto_upgrade: bool | None) -> Engine:
    """An engine for `url` whose schema is at head (auto-upgraded by default on SQLite only)."""
    engine = create_engine_for(url)
    try:
        ensure_schema(engine, backend(engine) == "sqlite" if auto_upgrade is None else auto_upgrade)
    except BaseException:
        engine.dispose()
        raise
    return engine
