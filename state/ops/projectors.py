"""Which processes project a database's state store now: one row each, beaten while it runs.

A working set (`up --working-set`) reads the records it evicted back from the store's rows as of its own
fold's head, which other processes projecting the same database may have written past: its row holds that
head (`head`: the least seq it may still read as of), and every write of the rows keeps the versions such a
read needs (state/store/row_versions.py). Read replicas (`serve --replica`) and hot standbys project nothing
and are never here.

Each process beats its row every `BEAT_EVERY_S` (its projector's thread) and deletes it when it stops. A row
not beaten within `PROJECTOR_STALE_MS` is a process gone (killed): the versions it needed are pruned, and if it
was only paused, its next read that may have needed one refuses (`VersionsPruned`) instead of deciding on it.
"""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from partbuild.state.db import begin_write
from partbuild.state.schema import PROJECTOR_STALE_MS as STALE_MS
from partbuild.state.schema import state_projectors as table

BEAT_EVERY_S: Final = 5.0


@dataclass(frozen=True)
class Projecting:
    """Another process projecting the database, as its row says."""

    holder: str  # host:pid:token
    working_set: bool
    beat_ms: int
    head: int | None  # a working set's (the least seq it may read its cold records back as of)


def new_holder() -> str:
    """This process's name in the table: its host and pid (for people, and `_running_here`), and a token."""
    holder = f"{_host()}:{os.getpid()}:{uuid.uuid4().hex[:12]}"
    _MADE_HERE.add(holder)
    return holder


_MADE_HERE: set[str] = set()  # the holders this process made (one per projector it started)


def _host() -> str:
    return socket.gethostname()[:120].replace(":", "_")


def _running_here(holder: str) -> bool | None:
    """Whether the process `holder` names still runs, if it ran on this host (None: another host's, unknown).
    A process killed here is known gone at once: `up` started again after a crash is not refused for
    `STALE_MS` by its own last row."""
    host, _, rest = holder.partition(":")
    pid = rest.partition(":")[0]
    if host != _host() or not pid.isdigit():
        return None
    if int(pid) == os.getpid():  # of this pid but not made here: an earlier process's (a container restarted)
        return holder in _MADE_HERE
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's: it runs
        return True
    return True


class ProjectorRegistry:
    """The `state_projectors` table of one database; see the module docstring."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    def beat(
        self,
        holder: str,
        *,
        working_set: bool,
        now_ms: int,
        head: int | None = None,
        then: Callable[[Connection], None] | None = None,
    ) -> None:
        """Say that `holder` projects the database, now (a working set: from `head` on); `then`: called in the
        same transaction after (a working set's first registration waits there for the writes in flight)."""
        values = {"working_set": working_set, "beat_ms": now_ms, "head": head}
        with begin_write(self._engine) as conn:
            moved = conn.execute(sa.update(table).where(table.c.holder == holder).values(**values))
            if moved.rowcount != 1:
                conn.execute(sa.insert(table).values(holder=holder, **values))
            if then is not None:
                then(conn)

    def leave(self, holder: str) -> None:
        """`holder` stopped projecting."""
        with begin_write(self._engine) as conn:
            conn.execute(sa.delete(table).where(table.c.holder == holder))

    def others(self, holder: str, now_ms: int) -> list[Projecting]:
        """The processes other than `holder` that beat within `STALE_MS` of `now_ms`, longest known first."""
        query = (
            sa.select(table.c.holder, table.c.working_set, table.c.beat_ms, table.c.head)
            .where(table.c.holder != holder, table.c.beat_ms >= now_ms - STALE_MS)
            .order_by(table.c.beat_ms, table.c.holder)
        )
        with self._engine.connect() as conn:
            found = [Projecting(str(row[0]), bool(row[1]), int(row[2]), row[3]) for row in conn.execute(query)]
        return [other for other in found if _running_here(other.holder) is not False]
