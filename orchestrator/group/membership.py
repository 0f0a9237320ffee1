"""Membership of a worker group, as a worker sees it: join, heartbeat, leave; who is alive; who leads.

The rows live in `group_members` (`partbuild.state.ops.members`), not in the event
log. A member is dead once its last heartbeat is older than the member timeout;
a dead member hears it on its next heartbeat (`MemberDeclaredDead`) and must
stop acting for the group, then rejoin as a new task if it wants to continue.

The leader is the holder of the group's lock (`GroupMember.leader_lock()`, see
`partbuild.state.ops.leader_lock`): no election protocol. The leader reaps dead
members' rows (`Group.reap`).

The group survives the loss of any member, its leader's included. A leader
that dies loses the lock with its process or connection; a leader that hangs
(SIGSTOP, a long GC pause, a frozen VM) keeps both alive, and with them the
lock. So the rule: a lock held by a task that is not a live member of the group
(its heartbeat older than the timeout, or its row gone) is taken away by the
survivors. `Group.holder_is_live` is that judgement: a survivor that cannot take
the lock asks the lock who holds it (the task its PostgreSQL session or lock
file declares, its process on this host) and expels a holder that is no live
member (`LeaderLock.expel`: its session terminated, or its process killed). A
holder caught in a late heartbeat, but within the timeout, is alive and left
alone. The lock still only elects: an expelled leader that acted before being
expelled, or that wakes up later, is stopped by the event log's epochs, checked
by the fold, which is what keeps a stale leader or member from deciding anything;
its next heartbeat then declares it dead.

Every timestamp comes from the group's clock (milliseconds), the wall clock
unless a test passes another.
"""

from __future__ import annotations

import os
import socket
import uuid
from types import TracebackType
from typing import Any, Self

from partbuild.state.database import Database
from partbuild.state.log.events import Clock, wall_clock_ms
from partbuild.state.ops.leader_lock import LeaderLock, LockHolder, task_digest
from partbuild.state.ops.members import Heartbeat, Member, check_group_name


def new_task_id() -> str:
    """A task id unique per join: host, pid and a random token."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


class MemberDeclaredDead(RuntimeError):
    """This member's heartbeat found it dead: reaped by the leader, or its own row had expired."""

    def __init__(self, group: str, task_id: str, how: Heartbeat) -> None:
        why = "its row was reaped" if how is Heartbeat.REAPED else "its last heartbeat was older than the timeout"
        super().__init__(
            f"task {task_id!r} is no longer a member of group {group!r} ({why}): "
            "stop acting for the group and rejoin as a new task"
        )
        self.group = group
        self.task_id = task_id
        self.how = how


class Group:
    """One worker group on one database: its members' rows and its leader lock."""

    def __init__(self, db: Database, name: str, *, member_timeout_ms: int, clock: Clock = wall_clock_ms) -> None:
        if member_timeout_ms <= 0:
            raise ValueError(f"member timeout must be > 0 ms, got {member_timeout_ms}")
        self.db = db
        self.name = check_group_name(name)
        self.member_timeout_ms = member_timeout_ms
        self.clock = clock

    def join(
        self, task_id: str | None = None, *, buckets: int | None = None, info: dict[str, Any] | None = None
    ) -> GroupMember:
        """Join as a new task (a fresh id unless given); MemberExists when the id is taken."""
        now = self.clock()
        member = Member(
            group=self.name,
            task_id=task_id or new_task_id(),
            host=socket.gethostname()[:255],
            pid=os.getpid(),
            started_ms=now,
            last_heartbeat_ms=now,
            buckets=buckets,
            info=dict(info or {}),
        )
        self.db.members.join(member)
        return GroupMember(self, member)

    def live_members(self) -> list[Member]:
        """Members whose last heartbeat is within the timeout now, ordered by start, then task id."""
        return self.db.members.live(self.name, self.clock(), self.member_timeout_ms)

    def all_members(self) -> list[Member]:
        """Every row of the group, including dead members not reaped yet."""
        return self.db.members.members(self.name)

    def reap(self) -> list[str]:
        """Delete the rows of dead members (the leader's job); their task ids."""
        return self.db.members.reap(self.name, self.clock(), self.member_timeout_ms)

    def leader_lock(self, task_id: str | None = None) -> LeaderLock:
        """This group's leader lock for `task_id`, not yet taken: `try_acquire()` it to lead."""
        return self.db.leader_lock(self.name, task_id)

    def holder_is_live(self, holder: LockHolder) -> bool:
        """Whether the lock's `holder` is a live member now, so not to be expelled (see the module doc)."""
        return holds_for_one_of(holder, self.live_members())

    def task_of(self, holder: LockHolder) -> str | None:
        """The task id of the row (live or dead) whose task `holder` declared, for messages; None if gone."""
        return next((m.task_id for m in self.all_members() if holds_for_one_of(holder, [m])), None)


def holds_for_one_of(holder: LockHolder, members: list[Member]) -> bool:
    """Whether `holder` is one of `members`: the task it declared, or its process on its host.

    The process match (file locks only: a PostgreSQL holder's pid is a server
    backend's) keeps a live member's process safe even when its lock declared no
    task, or its claim in the lock file could not be read.
    """
    for member in members:
        if holder.task_digest is not None and holder.task_digest == task_digest(member.task_id):
            return True
        if holder.host is not None and (holder.host, holder.pid) == (member.host, member.pid):
            return True
    return False


class GroupMember:
    """This process's membership: heartbeat it well within the timeout; leave on a clean exit."""

    def __init__(self, group: Group, joined: Member) -> None:
        self.group = group
        self.task_id = joined.task_id
        self.started_ms = joined.started_ms
        self.last_heartbeat_ms = joined.last_heartbeat_ms
        self.left = False

    def heartbeat(self) -> None:
        """Record that this member is alive now; MemberDeclaredDead when the group counts it dead."""
        if self.left:
            raise RuntimeError(f"task {self.task_id!r} is no longer a member of group {self.group.name!r}")
        now = self.group.clock()
        found = self.group.db.members.heartbeat(self.group.name, self.task_id, now, self.group.member_timeout_ms)
        if found is not Heartbeat.ALIVE:
            self.left = True
            raise MemberDeclaredDead(self.group.name, self.task_id, found)
        self.last_heartbeat_ms = now

    def leader_lock(self) -> LeaderLock:
        """The group's leader lock held for this member's task (how other members recognize the holder)."""
        return self.group.leader_lock(self.task_id)

    def leave(self) -> bool:
        """Delete this member's row; False when it was already gone. Safe to call more than once."""
        if self.left:
            return False
        self.left = True
        return self.group.db.members.leave(self.group.name, self.task_id)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.leave()
