"""Worker-group membership rows: joins, heartbeats, leaves and the reaper, on SQLite and PostgreSQL.

`MemberStore` (`Database.members`) keeps the `group_members` table: one row per live
member, which its heartbeats update; `live` lists the members heard from within the
member timeout, ordered by start.

Liveness lives in the `group_members` table, not in the event log: a heartbeat
every second from every worker would flood the log. The rules, all relative to
a member timeout T and a `now_ms` the caller reads from its clock:

- a member whose last heartbeat is more than T old is dead (`live` leaves it out,
  `reap` deletes it);
- death is one-way: a heartbeat finding its own row already more than T old
  deletes it instead of reviving it, and a heartbeat finding no row at all was
  reaped. Either way the member hears it is dead and must rejoin as a new task.

Timestamps come from the callers' clocks. Two machines compare their clocks in
`live` and `reap`, so the member timeout must be well above their clock skew; a
member judging its own row compares two readings of one clock.
"""

from __future__ import annotations

import enum
import json
import re
from dataclasses import dataclass, field
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine, RowMapping

from partbuild.state.db import begin_write
from partbuild.state.schema import group_members as table

# Group names travel into lock file names and advisory lock keys: keep them plain.
_GROUP_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
MAX_TASK_ID_LENGTH = 100  # group_members.task_id is String(100)
MAX_HOST_LENGTH = 255
MAX_INFO_CHARS = 4096


def check_group_name(group: str) -> str:
    """`group` when it is a valid group name (letters, digits, `_.-`, at most 64); ValueError otherwise."""
    if not _GROUP_NAME.fullmatch(group):
        raise ValueError(
            f"invalid group name {group!r}: 1 to 64 letters, digits, '_', '.' or '-', starting with a letter or digit"
        )
    return group


class MemberExists(ValueError):
    """A join named a task id that already has a row in the group."""


class Heartbeat(enum.Enum):
    """What a heartbeat found."""

    ALIVE = "alive"  # the row was fresh and now carries the new time
    EXPIRED = "expired"  # the row was older than the timeout: the member deleted it
    REAPED = "reaped"  # the row was gone: someone else deleted it


@dataclass(frozen=True)
class Member:
    """One row of `group_members`."""

    group: str
    task_id: str
    host: str
    pid: int
    started_ms: int
    last_heartbeat_ms: int
    buckets: int | None = None
    info: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        check_group_name(self.group)
        if not 1 <= len(self.task_id) <= MAX_TASK_ID_LENGTH:
            raise ValueError(f"task id must have 1 to {MAX_TASK_ID_LENGTH} characters, got {self.task_id!r}")
        if len(self.host) > MAX_HOST_LENGTH:
            raise ValueError(f"host longer than {MAX_HOST_LENGTH} characters: {self.host!r}")
        if self.buckets is not None and self.buckets < 1:
            raise ValueError(f"buckets must be >= 1, got {self.buckets}")

    def info_json(self) -> str:
        """The info as the JSON text stored in the row (ValueError when too big or not JSON)."""
        text = json.dumps(self.info, sort_keys=True, separators=(",", ":"))
        if len(text) > MAX_INFO_CHARS:
            raise ValueError(f"member info is {len(text)} characters of JSON, more than {MAX_INFO_CHARS}")
        return text


def _member(row: RowMapping) -> Member:
    return Member(
        group=row["group_name"],
        task_id=row["task_id"],
        host=row["host"],
        pid=int(row["pid"]),
        started_ms=int(row["started_ms"]),
        last_heartbeat_ms=int(row["last_heartbeat_ms"]),
        buckets=None if row["buckets"] is None else int(row["buckets"]),
        info=json.loads(row["info"]),
    )


def _check_timeout(timeout_ms: int) -> None:
    if timeout_ms <= 0:
        raise ValueError(f"member timeout must be > 0 ms, got {timeout_ms}")


class MemberStore:
    """The `group_members` table. Every write is its own short transaction."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    def join(self, member: Member) -> None:
        """Insert `member`'s row; MemberExists when its task id already has one in the group."""
        row = {
            "group_name": member.group,
            "task_id": member.task_id,
            "host": member.host,
            "pid": member.pid,
            "started_ms": member.started_ms,
            "last_heartbeat_ms": member.last_heartbeat_ms,
            "buckets": member.buckets,
            "info": member.info_json(),
        }
        try:
            with begin_write(self._engine) as conn:
                conn.execute(table.insert(), row)
        except sa.exc.IntegrityError as exc:
            raise MemberExists(f"task {member.task_id!r} is already a member of group {member.group!r}") from exc

    def heartbeat(self, group: str, task_id: str, now_ms: int, timeout_ms: int) -> Heartbeat:
        """Record that the member is alive at `now_ms`, unless it is already dead (see the module doc)."""
        _check_timeout(timeout_ms)
        key = (table.c.group_name == group) & (table.c.task_id == task_id)
        fresh = table.c.last_heartbeat_ms >= now_ms - timeout_ms
        with begin_write(self._engine) as conn:
            if conn.execute(sa.update(table).where(key, fresh).values(last_heartbeat_ms=now_ms)).rowcount:
                return Heartbeat.ALIVE
            if conn.execute(sa.delete(table).where(key)).rowcount:
                return Heartbeat.EXPIRED
        return Heartbeat.REAPED

    def leave(self, group: str, task_id: str) -> bool:
        """Delete the member's row; False when there was none (it had been reaped)."""
        with begin_write(self._engine) as conn:
            deleted = conn.execute(sa.delete(table).where(table.c.group_name == group, table.c.task_id == task_id))
            return bool(deleted.rowcount)

    def members(self, group: str) -> list[Member]:
        """Every row of the group, dead or alive, ordered by start (then task id)."""
        query = sa.select(table).where(table.c.group_name == group).order_by(table.c.started_ms, table.c.task_id)
        with self._engine.connect() as conn:
            return [_member(row) for row in conn.execute(query).mappings()]

    def live(self, group: str, now_ms: int, timeout_ms: int) -> list[Member]:
        """The members whose last heartbeat is at most `timeout_ms` old at `now_ms`, ordered by start, task id."""
        _check_timeout(timeout_ms)
        query = (
            sa.select(table)
            .where(table.c.group_name == group, table.c.last_heartbeat_ms >= now_ms - timeout_ms)
            .order_by(table.c.started_ms, table.c.task_id)
        )
        with self._engine.connect() as conn:
            return [_member(row) for row in conn.execute(query).mappings()]

    def reap(self, group: str, now_ms: int, timeout_ms: int) -> list[str]:
        """Delete the members whose last heartbeat is more than `timeout_ms` old; their task ids, sorted.

        On PostgreSQL a row locked by a transaction in progress (its member paused in
        the middle of a heartbeat) is skipped, not waited for: the reaper must not
        hang on a paused member. It stays dead for `live` and is reaped next time.
        """
        _check_timeout(timeout_ms)
        stale = (
            sa.select(table.c.task_id)
            .where(table.c.group_name == group, table.c.last_heartbeat_ms < now_ms - timeout_ms)
            .with_for_update(skip_locked=True)  # SQLite: no row locks, no clause (its write lock is whole-file)
        )
        doomed = (
            sa.delete(table)
            .where(table.c.group_name == group, table.c.task_id.in_(stale.scalar_subquery()))
            .returning(table.c.task_id)
        )
        with begin_write(self._engine) as conn:
            return sorted(conn.execute(doomed).scalars())
