"""One database: the event log, and beside it the operational stores that replay cannot rebuild.

The event log (`state/log/`) is the truth: everything in `BuildState` can be
rebuilt from it. The operational stores (`state/ops/`) hold what changes too
often or is too private to be history: worker-group heartbeats, where each
subscription's deliveries stand, API tokens, leader locks. They share the log's
database so one URL configures a deployment, but they are reached here, through
the database, never through `EventLog`.
"""

from __future__ import annotations

from types import TracebackType
from typing import Self

from sqlalchemy.engine import Engine

from partbuild.state.db import backend
from partbuild.state.log.store import EventLog
from partbuild.state.migrate import current_revision, open_migrated_engine
from partbuild.state.ops.deliveries import DeliveryStore
from partbuild.state.ops.leader_lock import LeaderLock, open_leader_lock
from partbuild.state.ops.members import MemberStore
from partbuild.state.ops.tokens import TokenStore


class Database:
    """The handle of one database: `log`, and the operational `members`, `deliveries`, `tokens`, leader locks."""

    def __init__(self, engine: Engine) -> None:
        """Over `engine` (from `state.db.create_engine_for`, schema at head); `open` also owns it."""
        self._engine = engine
        self._owns_engine = False
        self.log = EventLog(engine)
        self.members = MemberStore(engine)
        self.deliveries = DeliveryStore(engine)
        self.tokens = TokenStore(engine)

    @classmethod
    def open(cls, url: str, *, auto_upgrade: bool | None = None) -> Self:
        """Open the database at `url`, checking the schema (auto-upgraded by default on SQLite only)."""
        database = cls(open_migrated_engine(url, auto_upgrade))
        database._owns_engine = True
        return database

    @property
    def backend(self) -> str:
        """ "sqlite" or "postgresql"."""
        return backend(self._engine)

    def describe(self) -> str:
        """The database URL with any password hidden, for messages."""
        return self._engine.url.render_as_string(hide_password=True)

    def schema_revision(self) -> str | None:
        """The Alembic revision the database is at."""
        return current_revision(self._engine)

    def leader_lock(self, group: str, task_id: str | None = None) -> LeaderLock:
        """The leader lock of worker group `group` for `task_id`, not yet taken (`state.ops.leader_lock`)."""
        return open_leader_lock(self._engine, group, task_id)

    def close(self) -> None:
        """Release the connections of an engine this handle created (`open`)."""
        if self._owns_engine:
            self._engine.dispose()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
