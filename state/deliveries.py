"""Where each subscription's deliveries stand: main-topic offsets, the RQ and the DLQ, group state.

Seed 004's per-subscription structures, in the project's database (SQLite or
PostgreSQL) so every change is one transaction with the offsets it moves past:

- main-topic offsets: per storage topic and virtual partition, the last seq handled
  (a partition without a row is at the subscription's floor);
- the RQ and the DLQ: messages at (storage topic, partition, offset), offsets
  increasing per partition;
- group state: per queue and group, `p` (the position of the group's last message
  produced to the queue: main topic index and seq, internal topic index and offset)
  and `c` (of its last consumed). A group has messages waiting while p != c; rows
  are deleted once caught up, so the table holds only waiting groups.

A delivery shard changes all of it in one `commit`, fenced by the last reset the
subscription applied (`applied_seq`): a shard that started before a reset, a
reshard, or that shares its partitions with a second process commits nothing.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, fields

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Connection, Engine

from partbuild.state.db import begin_write
from partbuild.state.schema import (
    delivery_control,
    delivery_groups,
    delivery_heads,
    delivery_messages,
    delivery_offsets,
    delivery_secrets,
)
from partbuild.state.topics import route

QUEUE_NAMES = ("rq", "dlq")
_NONE = (-1, -1, -1, -1)  # the `c` of a group nothing of which was consumed yet
_DROPPED = -1  # the applied_seq of a deleted subscription's control row: it fences every write


@dataclass(frozen=True)
class Layout:
    """The storage topic of an internal queue that new messages go to (its produce pointer)."""

    topic: int
    partitions: int
    k: int


@dataclass(frozen=True)
class NewMessage:
    """A message to produce to the RQ or the DLQ."""

    group_key: str
    group_hash: int
    event_seq: int
    main_topic: int
    attempts: int = 0
    not_before_ms: int = 0
    first_failed_ms: int = 0
    last_status: int = 0
    last_error: str = ""


@dataclass(frozen=True)
class Queued(NewMessage):
    """A message waiting in the RQ or the DLQ, at its position."""

    queue: str = "rq"
    topic: int = 0
    partition: int = 0
    offset: int = 0

    def as_new(self) -> NewMessage:
        """The message as produced again to another queue (its bookkeeping kept)."""
        return NewMessage(**{name: getattr(self, name) for name in _NEW_FIELDS})

    @property
    def position(self) -> tuple[int, int, int, int]:
        """The seed's MessageState of this message: main topic index and seq, internal topic index and offset."""
        return (self.main_topic, self.event_seq, self.topic, self.offset)


@dataclass(frozen=True)
class Control:
    """A subscription's control row: the fence, the main floor, counters."""

    applied_seq: int
    main_floor: int
    delivered: int = 0
    retried: int = 0
    dead_lettered: int = 0


@dataclass
class Commit:
    """What one step of a delivery shard changes, applied atomically by `DeliveryStore.commit`."""

    subscription: str
    fence: int  # the applied_seq the shard read before it began
    offsets: dict[tuple[int, int], tuple[int | None, int]] = field(default_factory=dict)  # -> (old or None, new)
    produce: list[tuple[str, NewMessage]] = field(default_factory=list)  # (queue, message), in order
    consume: list[Queued] = field(default_factory=list)  # delivered, skipped or moved: removed
    update: list[Queued] = field(default_factory=list)  # a failed attempt's bookkeeping
    behind: set[tuple[str, str]] = field(default_factory=set)  # (queue, group) new messages were queued behind
    delivered: int = 0
    retried: int = 0
    dead_lettered: int = 0

    def empty(self) -> bool:
        return not (self.offsets or self.produce or self.consume or self.update)


class Fenced(Exception):
    """A commit whose fence or offsets moved under it: nothing was written."""


_MESSAGE_FIELDS = [f.name for f in fields(Queued)]
_NEW_FIELDS = [f.name for f in fields(NewMessage)]


class DeliveryStore:
    """The delivery tables of one database (`log.deliveries`)."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self._insert = postgresql.insert if engine.dialect.name == "postgresql" else sqlite.insert

    # ----------------------------------------------------------------- secrets

    def put_secret(self, digest: str, secret: str) -> None:
        with begin_write(self._engine) as conn:
            statement = self._insert(delivery_secrets).values(digest=digest, secret=secret)
            conn.execute(statement.on_conflict_do_nothing(index_elements=["digest"]))

    def secret(self, digest: str) -> str | None:
        with self._engine.connect() as conn:
            row = conn.execute(sa.select(delivery_secrets.c.secret).where(delivery_secrets.c.digest == digest))
            return row.scalar()

    # ----------------------------------------------------------------- reads

    def control(self, subscription: str, floor: int) -> Control:
        """The control row, made (at `floor`: the seq before the first to deliver) if there is none."""
        with self._engine.connect() as conn:
            row = self._control_row(conn, subscription)
        if row is not None:
            return row
        with begin_write(self._engine) as conn:
            statement = self._insert(delivery_control).values(_control_values(subscription, 0, floor))
            conn.execute(statement.on_conflict_do_nothing(index_elements=["subscription"]))
            row = self._control_row(conn, subscription)
        assert row is not None
        return row

    @staticmethod
    def _control_row(conn: Connection, subscription: str, *, lock: bool = False) -> Control | None:
        c = delivery_control.c
        query = sa.select(c.applied_seq, c.main_floor, c.delivered, c.retried, c.dead_lettered)
        query = query.where(c.subscription == subscription)
        if lock and conn.dialect.name == "postgresql":
            query = query.with_for_update()
        row = conn.execute(query).first()
        return Control(*row) if row is not None else None

    def offsets(self, subscription: str) -> dict[tuple[int, int], int]:
        """The main topic's offsets that have rows: (storage topic, partition) -> last seq handled."""
        c = delivery_offsets.c
        with self._engine.connect() as conn:
            rows = conn.execute(sa.select(c.topic, c.partition, c.seq).where(c.subscription == subscription))
            return {(topic, partition): seq for topic, partition, seq in rows}

    def waiting_groups(self, subscription: str) -> dict[str, tuple[str, int]]:
        """Groups with messages waiting: group key -> (queue, group hash)."""
        c = delivery_groups.c
        with self._engine.connect() as conn:
            rows = conn.execute(sa.select(c.group_key, c.queue, c.group_hash).where(c.subscription == subscription))
            return {key: (queue, group_hash) for key, queue, group_hash in rows}

    def messages(
        self, subscription: str, queue: str, *, group: str | None = None, limit: int = 1000, after_seq: int = -1
    ) -> list[Queued]:
        """Waiting messages of a queue, by group then in order; one group's with `group`."""
        with self._engine.connect() as conn:
            return self._messages(conn, subscription, queue, group=group, limit=limit, after_seq=after_seq)

    @staticmethod
    def _messages(
        conn: Connection, subscription: str, queue: str, *, group: str | None, limit: int, after_seq: int = -1
    ) -> list[Queued]:
        c = delivery_messages.c
        query = sa.select(*(c[name] for name in _MESSAGE_FIELDS)).where(
            c.subscription == subscription, c.queue == queue
        )
        if group is not None:
            query = query.where(c.group_key == group).order_by(c.topic, c.offset)
        else:
            query = query.where(c.event_seq > after_seq).order_by(c.event_seq, c.group_key)
        return [Queued(*row) for row in conn.execute(query.limit(limit))]

    def counts(self, subscription: str) -> dict[str, int]:
        """Messages waiting in each internal queue."""
        c = delivery_messages.c
        with self._engine.connect() as conn:
            rows = conn.execute(
                sa.select(c.queue, sa.func.count()).where(c.subscription == subscription).group_by(c.queue)
            )
            found = dict(rows.all())
        return {queue: found.get(queue, 0) for queue in QUEUE_NAMES}

    # ----------------------------------------------------------------- writes

    def commit(self, commit: Commit, layouts: dict[str, Layout]) -> bool:
        """Apply one shard step atomically; False (nothing written) when fenced."""
        try:
            with self._transaction(commit.subscription, commit.fence) as conn:
                self._check_behind(conn, commit)
                self._move_offsets(conn, commit)
                for message in commit.update:
                    self._update_message(conn, commit.subscription, message)
                for message in commit.consume:
                    self._consume(conn, commit.subscription, message)
                for queue, new in commit.produce:
                    self._produce(conn, commit.subscription, queue, new, layouts[queue])
                self._count(conn, commit)
        except Fenced:
            return False
        return True

    @contextmanager
    def _transaction(self, subscription: str, fence: int) -> Iterator[Connection]:
        with begin_write(self._engine) as conn:
            control = self._control_row(conn, subscription, lock=True)
            if control is None or control.applied_seq != fence or fence == _DROPPED:
                raise Fenced
            yield conn

    @staticmethod
    def _check_behind(conn: Connection, commit: Commit) -> None:
        """The groups the step queued behind still wait there (a DLQ replay or purge may have moved them)."""
        g = delivery_groups.c
        for queue, group in commit.behind:
            where = (g.subscription == commit.subscription, g.queue == queue, g.group_key == group)
            if conn.execute(sa.select(g.group_hash).where(*where)).first() is None:
                raise Fenced

    def _move_offsets(self, conn: Connection, commit: Commit) -> None:
        c = delivery_offsets.c
        for (topic, partition), (old, new) in commit.offsets.items():
            where = (c.subscription == commit.subscription, c.topic == topic, c.partition == partition)
            if old is None:
                statement = self._insert(delivery_offsets).values(
                    subscription=commit.subscription, topic=topic, partition=partition, seq=new
                )
                # Rows returned, not rowcount: SQLAlchemy 2.1 on psycopg reports -1 for a single-row INSERT.
                moved = len(conn.execute(statement.on_conflict_do_nothing().returning(c.seq)).all())
            else:
                moved = conn.execute(sa.update(delivery_offsets).where(*where, c.seq == old).values(seq=new)).rowcount
            if moved != 1:
                raise Fenced  # another shard moved this partition: this step's work is theirs

    @staticmethod
    def _update_message(conn: Connection, subscription: str, message: Queued) -> None:
        conn.execute(
            sa.update(delivery_messages)
            .where(*_at(subscription, message))
            .values(
                attempts=message.attempts,
                not_before_ms=message.not_before_ms,
                first_failed_ms=message.first_failed_ms,
                last_status=message.last_status,
                last_error=message.last_error,
            )
        )

    @staticmethod
    def _consume(conn: Connection, subscription: str, message: Queued) -> None:
        if conn.execute(sa.delete(delivery_messages).where(*_at(subscription, message))).rowcount != 1:
            raise Fenced  # consumed already (a DLQ purge or replay, or another process)
        g = delivery_groups.c
        where = (g.subscription == subscription, g.queue == message.queue, g.group_key == message.group_key)
        row = conn.execute(sa.select(g.p_main_topic, g.p_main_offset, g.p_topic, g.p_offset).where(*where)).first()
        if row is not None and tuple(row) == message.position:
            conn.execute(sa.delete(delivery_groups).where(*where))  # caught up
        else:
            main_topic, main_offset, topic, offset = message.position
            conn.execute(
                sa.update(delivery_groups)
                .where(*where)
                .values(c_main_topic=main_topic, c_main_offset=main_offset, c_topic=topic, c_offset=offset)
            )

    def _produce(self, conn: Connection, subscription: str, queue: str, new: NewMessage, layout: Layout) -> None:
        partition = route(new.group_hash, layout.partitions, layout.k)
        h = delivery_heads.c
        head_key = (h.subscription == subscription, h.queue == queue, h.topic == layout.topic, h.partition == partition)
        offset = conn.execute(sa.select(h.next_offset).where(*head_key)).scalar()
        if offset is None:
            offset = 0
            conn.execute(
                sa.insert(delivery_heads).values(
                    subscription=subscription, queue=queue, topic=layout.topic, partition=partition, next_offset=1
                )
            )
        else:
            conn.execute(sa.update(delivery_heads).where(*head_key).values(next_offset=offset + 1))
        message = Queued(**vars(new), queue=queue, topic=layout.topic, partition=partition, offset=offset)
        conn.execute(sa.insert(delivery_messages).values(subscription=subscription, **vars(message)))
        main_topic, main_offset, topic, at = message.position
        p = {"p_main_topic": main_topic, "p_main_offset": main_offset, "p_topic": topic, "p_offset": at}
        none = dict(zip(("c_main_topic", "c_main_offset", "c_topic", "c_offset"), _NONE, strict=True))
        statement = self._insert(delivery_groups).values(
            subscription=subscription, queue=queue, group_key=new.group_key, group_hash=new.group_hash, **p, **none
        )
        conn.execute(statement.on_conflict_do_update(index_elements=["subscription", "queue", "group_key"], set_=p))

    @staticmethod
    def _count(conn: Connection, commit: Commit) -> None:
        if commit.delivered or commit.retried or commit.dead_lettered:
            c = delivery_control.c
            conn.execute(
                sa.update(delivery_control)
                .where(c.subscription == commit.subscription)
                .values(
                    delivered=c.delivered + commit.delivered,
                    retried=c.retried + commit.retried,
                    dead_lettered=c.dead_lettered + commit.dead_lettered,
                )
            )

    # ----------------------------------------------------------------- operations

    def apply_reset(self, subscription: str, fence: int, reset_seq: int, queue: str, to_seq: int) -> bool:
        """Apply one reset event once (the first shard to get here); False if it was applied already."""
        try:
            with self._transaction(subscription, fence) as conn:
                if queue == "main":
                    conn.execute(sa.delete(delivery_offsets).where(delivery_offsets.c.subscription == subscription))
                    self._set_control(conn, subscription, main_floor=to_seq)
                else:
                    self._skip(conn, subscription, queue, to_seq)
                self._set_control(conn, subscription, applied_seq=reset_seq)
        except Fenced:
            return False
        return True

    def _skip(self, conn: Connection, subscription: str, queue: str, to_seq: int) -> None:
        """Fast-forward: consume every waiting message of events up to `to_seq`, in order per group."""
        for message in self._messages(conn, subscription, queue, group=None, limit=1 << 62):
            if message.event_seq <= to_seq:
                self._consume(conn, subscription, message)

    @staticmethod
    def _set_control(conn: Connection, subscription: str, **values: int) -> None:
        c = delivery_control.c
        conn.execute(sa.update(delivery_control).where(c.subscription == subscription).values(**values))

    def replay(self, subscription: str, fence: int, layouts: dict[str, Layout], group: str | None = None) -> int:
        """Move the DLQ's messages (one group's with `group`) back to the RQ in order, attempts reset."""
        return self._drain_dlq(subscription, fence, group, layouts)

    def purge(self, subscription: str, fence: int, group: str | None = None) -> int:
        """Drop the DLQ's messages (one group's with `group`)."""
        return self._drain_dlq(subscription, fence, group, None)

    def _drain_dlq(self, subscription: str, fence: int, group: str | None, layouts: dict[str, Layout] | None) -> int:
        with self._transaction(subscription, fence) as conn:
            waiting = self._group_order(conn, subscription, group)
            for message in waiting:
                self._consume(conn, subscription, message)
                if layouts is not None:
                    fresh = NewMessage(message.group_key, message.group_hash, message.event_seq, message.main_topic)
                    self._produce(conn, subscription, "rq", fresh, layouts["rq"])
            return len(waiting)

    def _group_order(self, conn: Connection, subscription: str, group: str | None) -> list[Queued]:
        """The DLQ's messages, each group's in its order."""
        if group is not None:
            return self._messages(conn, subscription, "dlq", group=group, limit=1 << 62)
        found = self._messages(conn, subscription, "dlq", group=None, limit=1 << 62)
        return sorted(found, key=lambda m: (m.group_key, m.topic, m.offset))

    def drop(self, subscription: str) -> None:
        """Forget a deleted subscription's deliveries; its control row stays as a tombstone that fences
        every later write, so a shard still running somewhere cannot make the rows again."""
        with begin_write(self._engine) as conn:
            for table in (delivery_offsets, delivery_heads, delivery_messages, delivery_groups, delivery_control):
                conn.execute(sa.delete(table).where(table.c.subscription == subscription))
            conn.execute(sa.insert(delivery_control).values(_control_values(subscription, _DROPPED, 0)))


def _control_values(subscription: str, applied_seq: int, floor: int) -> dict[str, object]:
    """A fresh control row: nothing applied, delivered, retried or dead-lettered yet."""
    return {
        "subscription": subscription,
        "applied_seq": applied_seq,
        "main_floor": floor,
        "delivered": 0,
        "retried": 0,
        "dead_lettered": 0,
    }


def _at(subscription: str, m: Queued) -> tuple[sa.ColumnElement[bool], ...]:
    """The WHERE clause of one message's row."""
    c = delivery_messages.c
    return (
        c.subscription == subscription,
        c.queue == m.queue,
        c.topic == m.topic,
        c.partition == m.partition,
        c.offset == m.offset,
    )
