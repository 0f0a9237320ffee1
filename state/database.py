"""One database: the event log, and beside it the operational stores that replay cannot rebuild.

The event log (`state/log/`) is the truth: everything in `BuildState` can be
rebuilt from it. The operational stores (`state/ops/`) hold what changes too
often or is too private to be history: worker-group heartbeats, where each
subscription's deliveries stand, API tokens, leader locks, the content digests of
source files, the lines job runs logged. They share the log's database so one URL configures a deployment,
but they are reached here, through the database, never through `EventLog`.

The state store (`state/store/`, `changes`) is neither: it is derived from the log like `BuildState`, and
kept here, in tables, so that reads cost their answer.
"""

from __future__ import annotations

from sqlalchemy.engine import Engine

from partbuild.state.engine import EngineHandle
from partbuild.state.log.store import EventLog
from partbuild.state.migrate import current_revision
from partbuild.state.ops.content_digests import ContentDigestStore
from partbuild.state.ops.deliveries import DeliveryStore
from partbuild.state.ops.leader_lock import LeaderLock, open_leader_lock
from partbuild.state.ops.members import MemberStore
from partbuild.state.ops.projectors import ProjectorRegistry
from partbuild.state.ops.run_logs import RunLogStore
from partbuild.state.ops.tokens import TokenStore
from partbuild.state.store.changes import ChangeStore


class Database(EngineHandle):
    """The handle of one database: `log`, and the operational `members`, `deliveries`, `tokens`,
    `content_digests`, `run_logs`, `projectors`, leader locks.

    `Database.open(url)` owns its engine; the log it hands out shares it and is closed with it.
    """

    def __init__(self, engine: Engine) -> None:
        """Over `engine` (from `state.db.create_engine_for`, schema at head)."""
        super().__init__(engine)
        self.log = EventLog(engine)
        self.members = MemberStore(engine)
        self.deliveries = DeliveryStore(engine)
        self.tokens = TokenStore(engine)
        self.content_digests = ContentDigestStore(engine)
        self.run_logs = RunLogStore(engine)
        self.projectors = ProjectorRegistry(engine)  # which processes project the state store now
        self.changes = ChangeStore(engine)  # the state store's (state/store/), derived from the log

    def schema_revision(self) -> str | None:
        """The Alembic revision the database is at."""
        return current_revision(self._engine)

    def leader_lock(self, group: str, task_id: str | None = None) -> LeaderLock:
        """The leader lock of worker group `group` for `task_id`, not yet taken (`state.ops.leader_lock`)."""
        return open_leader_lock(self._engine, group, task_id)
