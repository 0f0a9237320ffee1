"""A worker's life in its group: joined as WORKER_ID, heartbeating, leading when it holds the lock.

`GroupWorker` runs one thread beside the orchestrator's loop. Every tick
(a quarter of the member timeout, sooner when poked) it:

1. heartbeats its membership row; when the row says it is dead
   (`MemberDeclaredDead`) it records that and stops: the orchestrator stops
   deciding at once and the process exits (it does not rejoin: a restart is a
   new task, and the group has already moved its buckets on);
2. tries the leader lock; when another task holds it that is not a live
   member (a leader paused past the timeout), takes it away
   (`_take_over`: see `membership`) and tries again; the leader reaps dead
   members' rows and, when the live members differ from the current epoch's,
   appends a new epoch;
3. appends its own task message when it has one (`steps.task_event`).

Group events are appended with `expected_head`; a conflict (someone appended
first) or a rejection (a stale leader's epoch) is simply retried on the next
tick against the newer state, if the reason still holds.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from partbuild.orchestrator.group.membership import Group, GroupMember, MemberDeclaredDead
from partbuild.orchestrator.group.steps import GroupConfig, epoch_event, task_event
from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.database import Database
from partbuild.state.log.events import Clock, wall_clock_ms
from partbuild.state.log.live import LiveState
from partbuild.state.log.store import AppendConflict
from partbuild.state.ops.leader_lock import ExpelRefused, LeaderLock

logger = logging.getLogger("partbuild.group")

# Appends of one epoch that lost a race to another writer, retried at once before waiting a tick.
EPOCH_ATTEMPTS = 20


class GroupWorker:
    """Membership, leadership and task messages of one orchestrator process in one group."""

    def __init__(
        self,
        db: Database,
        live: LiveState,
        config: GroupConfig,
        task_id: str,
        *,
        clock: Clock = wall_clock_ms,
        on_change: Callable[[], None] = lambda: None,
    ) -> None:
        self.log = db.log
        self.live = live
        self.config = config
        self.task_id = task_id
        self.group = Group(db, config.name, member_timeout_ms=int(config.member_timeout_s * 1000), clock=clock)
        self.on_change = on_change  # wakes the orchestrator: ownership moved, or we are dead
        self.dead: MemberDeclaredDead | None = None
        self.leading = False
        self._member: GroupMember | None = None
        self._lock: LeaderLock | None = None
        self._untouchable: set[str] = set()  # holders we may not expel, warned about once each
        self._stop = threading.Event()
        self._poke = threading.Event()
        self._thread = threading.Thread(target=self._run, name="partbuild-group", daemon=True)

    def start(self) -> None:
        """Join the group (a new member row) and start ticking."""
        self._member = self.group.join(self.task_id, buckets=self.config.buckets)
        self._lock = self._member.leader_lock()
        logger.info("joined group %s as task %s", self.config.name, self.task_id)
        self._thread.start()

    def poke(self) -> None:
        """Something was folded: look for a step now rather than at the next tick."""
        self._poke.set()

    def stop(self) -> None:
        """Stop ticking, give up the lead, leave the group (a clean exit is not a death)."""
        self._stop.set()
        self._poke.set()
        if self._thread.is_alive():
            self._thread.join(timeout=30)
        if self._lock is not None:
            self._lock.release()
        if self._member is not None and self.dead is None:
            self._member.leave()

    def _run(self) -> None:
        interval = self.config.heartbeat_interval_s
        next_beat = 0.0
        while not self._stop.is_set():
            try:
                now = self.group.clock()
                if now >= next_beat:
                    self._heartbeat()
                    next_beat = now + interval * 1000
                self._speak()
            except MemberDeclaredDead as exc:
                self.dead = exc
                logger.error("%s", exc)
                self.on_change()
                return
            except Exception:  # a database hiccup: the next tick tries again, well within the timeout
                logger.exception("group %s: tick failed", self.config.name)
            self._poke.wait(min(interval, 0.25))
            self._poke.clear()

    def _heartbeat(self) -> None:
        """Stay a member; try the lock; as leader, reap the dead and start an epoch if members changed."""
        assert self._member is not None and self._lock is not None
        self._member.heartbeat()
        was_leading = self.leading
        self.leading = self._lock.try_acquire() or (self._take_over() and self._lock.try_acquire())
        if self.leading != was_leading:
            logger.info("group %s: %s the leader", self.config.name, "now" if self.leading else "no longer")
        if not self.leading:
            return
        reaped = self.group.reap()
        if reaped:
            logger.info("group %s: reaped dead members %s", self.config.name, ", ".join(reaped))
        self._start_epoch([member.task_id for member in self.group.live_members()])

    def _start_epoch(self, live: list[str]) -> None:
        """Append the epoch the live members call for, if any; a race lost to another writer is retried at once.

        On a busy log (runs ending every moment) the head often moves between our read and our append:
        waiting a tick after each lost race delayed a failover by a second per loss (bench/group_failover.py).
        """
        for _ in range(EPOCH_ATTEMPTS):
            self.live.catch_up()
            with self.live.read() as state:
                event, head = epoch_event(state, self.config, self.task_id, live, self.group.clock()), state.head_seq
            if event is None:
                return
            try:
                accepted = self._append(event, head)
            except AppendConflict:
                continue  # decided again on the newer state
            if accepted:
                logger.info("group %s: new epoch %s, members %s", self.config.name, event.group_epoch.epoch_id, live)
            return

    def _take_over(self) -> bool:
        """Expel the lock's holder if it is no live member (paused, frozen, dead); whether it was expelled.

        We are live: our heartbeat just succeeded. A holder that is not a partbuild
        leader lock, or that we are not permitted to expel, is left alone with one warning.
        """
        assert self._lock is not None
        holder = self._lock.holder()
        if holder is None or self.group.holder_is_live(holder):
            return False
        name = self.config.name
        if not holder.ours:
            self._warn_once(
                holder.description,
                "the leader lock of group %s is held by %s, not a partbuild leader: "
                "left alone, and the group has no leader while it holds it",
                name,
                holder.description,
            )
            return False
        task = self.group.task_of(holder) or "a task whose row is gone"
        try:
            # Wait for it to go, but not so long that our own next heartbeat is late.
            expelled = self._lock.expel(holder, wait_ms=int(self.config.heartbeat_interval_s * 500))
        except ExpelRefused as exc:
            self._warn_once(
                holder.description,
                "group %s: cannot take the leader lock from %s, not a live member: %s",
                name,
                task,
                exc,
            )
            return False
        if expelled:
            logger.warning(
                "group %s: the leader lock was held by %s, not a live member: %s, %s",
                name,
                task,
                holder.description,
                self._lock.expulsion,
            )
        return expelled

    def _warn_once(self, holder: str, message: str, *args: object) -> None:
        if holder not in self._untouchable:
            self._untouchable.add(holder)
            logger.warning(message, *args)

    def _speak(self) -> None:
        """Append this task's next message (epoch seen, pick-up, drop, share), if it has one."""
        self.live.catch_up()
        with self.live.read() as state:
            event, head = task_event(state, self.config.name, self.task_id, self.group.clock()), state.head_seq
        try:
            accepted = event is not None and self._append(event, head)
        except AppendConflict:  # someone appended first: the next tick (soon) looks again
            return
        if accepted:
            self.on_change()
            self._poke.set()  # one step may enable the next (a drop after a pick-up): look again soon

    def _append(self, event: pb.Event, head: int) -> bool:
        """Append on `head` (AppendConflict if the log moved); whether the fold accepted it."""
        appended = self.log.append([event], expected_head=head)
        self.live.read_at_least(appended.last_seq)
        with self.live.read() as state:
            rejected = state.rejection_between(appended.first_seq, appended.last_seq)
        if rejected:
            logger.warning(
                "group %s: the log rejected our %s: %s", self.config.name, event.WhichOneof("payload"), rejected
            )
        return not rejected
