"""Which processes project a database's state store now: one row each, beaten while it runs.

A working set (`up --working-set`) reads the records it evicted back from the store's rows as of its own fold's
head, so it must be the only process projecting the database: a row another one wrote ahead of its fold cannot
be read back (state/store/cold_rows.py refuses it, and the fold stops there). So `serve` and `up` look here
before they start: a working set does not start beside another projecting process, nor does a projecting
process start beside a working set; either says so in one line. Read replicas (`serve --replica`) and hot
standbys project nothing and are never here.

Each process beats its row every `BEAT_EVERY_S` (its projector's thread) and deletes it when it stops. A row
not beaten within `STALE_MS` is a process gone (killed): ignored, as is at once a row of this host whose
process no longer runs. Two processes starting in the same instant may both find the other not there yet; the
store's refusal of a row ahead of a fold still keeps the working set from deciding with the future (it stops,
and its log says why).
"""

from __future__ import annotations

import os
import socket
import uuid
from dataclasses import dataclass
from typing import Final

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from partbuild.state.db import begin_write
from partbuild.state.schema import state_projectors as table

BEAT_EVERY_S: Final = 5.0
STALE_MS: Final = 30_000  # six beats missed: the process is gone


@dataclass(frozen=True)
class Projecting:
    """Another process projecting the database, as its row says."""

    holder: str  # host:pid:token
    working_set: bool
    beat_ms: int


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

    def beat(self, holder: str, *, working_set: bool, now_ms: int) -> None:
        """Say that `holder` projects the database, now."""
        with begin_write(self._engine) as conn:
            moved = conn.execute(
                sa.update(table).where(table.c.holder == holder).values(working_set=working_set, beat_ms=now_ms)
            )
            if moved.rowcount != 1:
                conn.execute(sa.insert(table).values(holder=holder, working_set=working_set, beat_ms=now_ms))

    def leave(self, holder: str) -> None:
        """`holder` stopped projecting."""
        with begin_write(self._engine) as conn:
            conn.execute(sa.delete(table).where(table.c.holder == holder))

    def others(self, holder: str, now_ms: int) -> list[Projecting]:
        """The processes other than `holder` that beat within `STALE_MS` of `now_ms`, longest known first."""
        query = (
            sa.select(table.c.holder, table.c.working_set, table.c.beat_ms)
            .where(table.c.holder != holder, table.c.beat_ms >= now_ms - STALE_MS)
            .order_by(table.c.beat_ms, table.c.holder)
        )
        with self._engine.connect() as conn:
            found = [Projecting(str(row[0]), bool(row[1]), int(row[2])) for row in conn.execute(query)]
        return [other for other in found if _running_here(other.holder) is not False]


def beside_problem(others: list[Projecting], *, working_set: bool, now_ms: int) -> str | None:
    """Why a process (a working set, or not) must not start projecting beside `others`, in one line; or None."""
    if working_set and others:
        other = others[0]
        return (
            f"another process projects this database's state store ({other.holder}, heard from "
            f"{_ago(other, now_ms)}): a working set must be the only one; run the others as read replicas "
            "(`serve --replica`), or this one without --working-set"
        )
    holding = next((other for other in others if other.working_set), None)
    if holding is not None:
        return (
            f"a working set projects this database's state store ({holding.holder}, heard from "
            f"{_ago(holding, now_ms)}) and must be the only one: run this one as a read replica (`serve --replica`)"
        )
    return None


def _ago(other: Projecting, now_ms: int) -> str:
    return f"{max(0, now_ms - other.beat_ms) / 1000:.0f} s ago"
