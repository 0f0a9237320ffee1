"""The leader lock of a worker group: whoever holds it leads; no election code of ours.

`open_leader_lock` (reached as `Database.leader_lock(group)`) picks the lock of
the database's backend (`state.db.backend`): `postgres.py`, a session advisory
lock on a connection of its own, dropped by the server when the holder's
connection dies; `sqlite.py`, a POSIX record lock on `<db file>.group-<name>.lock`,
dropped by the kernel when the holder dies. `shared.py` holds what both
implement: the `LeaderLock` interface, `LockHolder` (who holds a lock: the task
in its session's `application_name`; the kernel's pid and the claim the holder
wrote in the file) and `ExpelRefused`.

Taking the lock away. A paused holder (SIGSTOP, a long GC pause, a frozen VM)
keeps the lock on both backends: its process and connection are alive. The
group must survive any member's loss, its leader's included, so a lock can be
taken from its holder: `holder()` says who holds it and `expel(holder)` ends
that hold. PostgreSQL: `pg_terminate_backend` of the holder's session (the
server then frees the lock; needs the same role or `pg_signal_backend`). File
lock: SIGKILL to the holder's process, fencing by killing (STONITH): it has
been expelled by the group's rules and would exit on waking anyway. Only a
holder that declared itself a partbuild leader lock is expelled (an advisory
lock of another tool that happens to use the key is never touched), never our
own process. Whether a holder deserves it is the group's decision, not this
module's (`orchestrator.group`: a holder that is not a live member). The lock
still does not fence on its own: a leader that acted before being expelled is
stopped by the fold, which rejects decisions of an epoch that is no longer current.

A lock object is meant for one thread (the group loop of one worker).
"""

from __future__ import annotations

from sqlalchemy.engine import Engine

from partbuild.state.db import backend
from partbuild.state.ops.leader_lock import postgres, sqlite
from partbuild.state.ops.leader_lock.postgres import LEADER_APPLICATION, PostgresLeaderLock, advisory_key
from partbuild.state.ops.leader_lock.shared import ExpelRefused, LeaderLock, LockHolder, task_digest, this_host
from partbuild.state.ops.leader_lock.sqlite import FileLeaderLock

__all__ = [
    "LEADER_APPLICATION",
    "ExpelRefused",
    "FileLeaderLock",
    "LeaderLock",
    "LockHolder",
    "PostgresLeaderLock",
    "advisory_key",
    "open_leader_lock",
    "task_digest",
    "this_host",
]

# Backend -> the lock of that backend, for the database behind an engine (nothing is locked yet).
_OPENERS = {"postgresql": postgres.open_lock, "sqlite": sqlite.open_lock}


def open_leader_lock(engine: Engine, group: str, task_id: str | None = None) -> LeaderLock:
    """The leader lock of `group` for the database behind `engine`, held for `task_id` (nothing is locked yet)."""
    opener = _OPENERS.get(backend(engine))
    if opener is None:
        raise ValueError(f"no leader lock for the {backend(engine)} backend")
    return opener(engine, group, task_id)
