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

import logging
import threading
from collections.abc import Callable

from sqlalchemy.engine import Connection, Engine

from partbuild.state.engine import EngineHandle
from partbuild.state.fold.build_state import BuildState
from partbuild.state.fold.cold import WorkingSet
from partbuild.state.log.events import wall_clock_ms
from partbuild.state.log.live import LiveState, WorkingSetLoad
from partbuild.state.log.replay import Progress
from partbuild.state.log.store import EventLog
from partbuild.state.migrate import current_revision
from partbuild.state.ops.content_digests import ContentDigestStore
from partbuild.state.ops.deliveries import DeliveryStore
from partbuild.state.ops.leader_lock import LeaderLock, open_leader_lock
from partbuild.state.ops.members import MemberStore
from partbuild.state.ops.projectors import BEAT_EVERY_S, ProjectorRegistry, new_holder
from partbuild.state.ops.run_logs import RunLogStore
from partbuild.state.ops.tokens import TokenStore
from partbuild.state.store.changes import ChangeStore
from partbuild.state.store.row_versions import wait_for_writes

logger = logging.getLogger("partbuild")


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


class Registration:
    """A process in the registry of those projecting the state store (state/ops/projectors.py). A working set
    registers the least seq it will read back as of before its first read (`hold`: the writes of rows in
    flight, which may not have seen it, are waited for) and beats it while it loads (`load`); then its
    projector beats the head its fold had at the beat before, so a read in flight is never before the
    registered head. A working set loaded again (`LiveState.load_again`) holds and beats the same way."""

    def __init__(self, db: Database, working_set: bool) -> None:
        self.db, self.working_set, self.holder = db, working_set, new_holder()
        self.head: int | None = None  # what the next beat registers
        self._loading = False  # a load in flight: the projector's beats wait for it
        self._loaded = threading.Event()  # set by the projector's first beat after a load: it beats from now on

    def load(self, store: ChangeStore) -> WorkingSetLoad:
        """How `LiveState` loads this process's working set from `store`, held as above, at start and again."""
        from partbuild.state.store.cold_start import load_working_set

        def load(log: EventLog, progress: Progress | None) -> tuple[BuildState, WorkingSet]:
            try:
                return load_working_set(log, store, progress=progress, hold=self.hold)
            finally:
                # The projector's next beat says the hold and takes over (it then says the old state's head until
                # the new one replaces it: the new one reads as of its own head, later).
                self._loading = False

        return load

    def hold(self, seq: int) -> None:
        self.head = seq
        self._loading = True  # from now on, until the load returns, only the load's beats say it
        self._loaded.clear()
        self._say(seq, then=wait_for_writes)
        threading.Thread(target=self._beat_while_loading, name="partbuild-register", daemon=True).start()

    def _beat_while_loading(self) -> None:
        while not self._loaded.wait(BEAT_EVERY_S):
            try:
                self._say(self.head)
            except Exception:  # (said again in a beat; a row gone stale makes a read refuse, never decide wrong)
                logger.warning("could not say this process loads a working set", exc_info=True)

    def beat(self, live: LiveState) -> None:
        if self._loading:
            return  # a load in flight: it says its hold
        self._loaded.set()
        head = self.head
        if self.working_set:
            self.head = live.state.head_seq
        self._say(head)

    def _say(self, head: int | None, then: Callable[[Connection], None] | None = None) -> None:
        now = wall_clock_ms()
        self.db.projectors.beat(self.holder, working_set=self.working_set, now_ms=now, head=head, then=then)

    def leave(self) -> None:
        self._loaded.set()
        self.db.projectors.leave(self.holder)
