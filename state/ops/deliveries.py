"""Where each subscription's deliveries stand: main-topic offsets, the RQ and the DLQ, ordering-key state.

Each subscription's delivery structures, in the project's database (SQLite or
PostgreSQL) so every change is one transaction with the offsets it moves past:

- main-topic offsets: per storage topic and topic partition, the last seq handled
  (a topic partition without a row is at the subscription's floor);
- the RQ and the DLQ: messages at (storage topic, topic partition, offset), offsets
  increasing per topic partition;
- ordering-key state (table `delivery_groups`): per queue
  and ordering key, `p` (the position of the key's last message produced to the
  queue: main topic index and seq, internal topic index and offset) and `c` (of its
  last consumed). A key has messages waiting while p != c; rows are deleted once
  caught up, so the table holds only waiting keys. The columns keep their first
  names (`group_key`, `group_hash`): `_COLUMNS` maps the fields onto them.

A delivery shard changes all of it in one `commit`, fenced by the last reset the
subscription applied (`applied_seq`) and by compare-and-set offsets: a shard that
started before a reset, a reshard, or that shares its partitions with a second
process commits nothing. `DeliveryStore` (`Database.deliveries`) also keeps the
signing secrets and counters, and does DLQ replays and purges, resets and drops.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, fields

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from partbuild.state.db import begin_snapshot, begin_write, insert_ignoring_conflicts, lock_rows, upsert
from partbuild.state.rules.topics import route
from partbuild.state.schema import (
    delivery_control,
    delivery_groups,
    delivery_heads,
    delivery_messages,
    delivery_offsets,
    delivery_secrets,
)

QUEUE_NAMES = ("rq", "dlq")
# A produce head: (queue, storage topic, partition), and its row's columns with `next_offset`.
HeadKey = tuple[str, int, int]
_IN_LIST_LIMIT = 1_000  # values per IN list: far below every driver's bound on parameters
_POSITION_FIELDS = ("queue", "topic", "partition", "offset")  # a message's row, with its subscription
_ATTEMPT_FIELDS = ("attempts", "not_before_ms", "first_failed_ms", "last_status", "last_error")
_HEAD_FIELDS = ("queue", "topic", "partition", "next_offset")
_NONE = (-1, -1, -1, -1)  # the `c` of an ordering key nothing of which was consumed yet
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

    ordering_key: str
    key_hash: int
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
        """Its position as group state records it: main topic index and seq, internal topic index and offset."""
        return (self.main_topic, self.event_seq, self.topic, self.offset)


@dataclass(frozen=True)
class Control:
    """A subscription's control row: the fence, the main floor, counters (totals since it was created).

    `delivered`: messages the receiver accepted (a 2xx answer), first try or retry.
    `retried`: failed attempts after which the message stayed queued for another
    (a retryable failure with attempts and age left). `dead_lettered`: messages
    put in the dead-letter queue, each counted once: a failed ordering key's head
    and every message moved or queued behind it (before this counted one per
    failed head; totals kept from then stay as they were).
    """

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
    behind: set[tuple[str, str]] = field(default_factory=set)  # (queue, ordering key) new messages were queued behind
    delivered: int = 0
    retried: int = 0

    @property
    def dead_lettered(self) -> int:
        """Messages this step puts in the DLQ: counted from what it produces there, so none is missed or doubled."""
        return sum(1 for queue, _ in self.produce if queue == "dlq")

    def empty(self) -> bool:
        return not (self.offsets or self.produce or self.consume or self.update)


@dataclass(frozen=True)
class Standing:
    """Where a subscription's deliveries stand, from one snapshot (`DeliveryStore.standing`)."""

    control: Control
    offsets: dict[tuple[int, int], int]
    counts: dict[str, int]


class Fenced(Exception):
    """A commit whose fence or offsets moved under it: nothing was written."""


_MESSAGE_FIELDS = [f.name for f in fields(Queued)]
_NEW_FIELDS = [f.name for f in fields(NewMessage)]
# Field -> column where they differ: the columns were named before the words "ordering key" and "key hash".
_COLUMNS = {"ordering_key": "group_key", "key_hash": "group_hash"}
_MESSAGE_COLUMNS = [_COLUMNS.get(name, name) for name in _MESSAGE_FIELDS]


def _row(message: Queued) -> dict[str, object]:
    """A message's `delivery_messages` values (without its subscription), by column name."""
    return {_COLUMNS.get(name, name): value for name, value in vars(message).items()}


class DeliveryStore:
    """The delivery tables of one database (`Database.deliveries`)."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    # ----------------------------------------------------------------- secrets

    def put_secret(self, digest: str, secret: str) -> None:
        with begin_write(self._engine) as conn:
            statement = insert_ignoring_conflicts(conn, delivery_secrets, ["digest"])
            conn.execute(statement.values(digest=digest, secret=secret))

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
            statement = insert_ignoring_conflicts(conn, delivery_control, ["subscription"])
            conn.execute(statement.values(_control_values(subscription, 0, floor)))
            row = self._control_row(conn, subscription)
        assert row is not None
        return row

    @staticmethod
    def _control_row(conn: Connection, subscription: str, *, lock: bool = False) -> Control | None:
        c = delivery_control.c
        query = sa.select(c.applied_seq, c.main_floor, c.delivered, c.retried, c.dead_lettered)
        query = query.where(c.subscription == subscription)
        if lock:
            query = lock_rows(query)
        row = conn.execute(query).first()
        return Control(*row) if row is not None else None

    def offsets(self, subscription: str) -> dict[tuple[int, int], int]:
        """The main topic's offsets that have rows: (storage topic, partition) -> last seq handled."""
        with self._engine.connect() as conn:
            return self._offsets(conn, subscription)

    @staticmethod
    def _offsets(conn: Connection, subscription: str) -> dict[tuple[int, int], int]:
        c = delivery_offsets.c
        rows = conn.execute(sa.select(c.topic, c.partition, c.seq).where(c.subscription == subscription))
        return {(topic, partition): seq for topic, partition, seq in rows}

    def standing(self, subscription: str, floor: int) -> Standing:
        """Counters, offsets and queue sizes read from one snapshot: they add up with each other."""
        self.control(subscription, floor)  # made first: a snapshot transaction does not write
        with begin_snapshot(self._engine) as conn:
            control = self._control_row(conn, subscription)
            assert control is not None  # rows are only ever replaced by a tombstone, never removed
            return Standing(control, self._offsets(conn, subscription), self._counts(conn, subscription))

    def waiting_keys(self, subscription: str) -> dict[str, tuple[str, int]]:
        """Ordering keys with messages waiting: ordering key -> (queue, key hash)."""
        c = delivery_groups.c
        with self._engine.connect() as conn:
            rows = conn.execute(sa.select(c.group_key, c.queue, c.group_hash).where(c.subscription == subscription))
            return {key: (queue, key_hash) for key, queue, key_hash in rows}

    def due_pages(self, subscription: str, now_ms: int, page: int) -> dict[str, list[Queued]]:
        """The first `page` RQ messages, in order, of every ordering key whose first one is due by `now_ms`.

        One query however many keys wait: a backlog of keys backing off must not
        cost a query each per step.
        """
        c = delivery_messages.c
        key, order = c.group_key, (c.topic, c.offset)
        ranked = (
            sa.select(
                *(c[name] for name in _MESSAGE_COLUMNS),
                sa.func.row_number().over(partition_by=key, order_by=order).label("place"),
                sa.func.first_value(c.not_before_ms).over(partition_by=key, order_by=order).label("head_due_ms"),
            )
            .where(c.subscription == subscription, c.queue == "rq")
            .subquery()
        )
        query = (
            sa.select(*(ranked.c[name] for name in _MESSAGE_COLUMNS))
            .where(ranked.c.place <= page, ranked.c.head_due_ms <= now_ms)
            .order_by(ranked.c.group_key, ranked.c.place)
        )
        pages: dict[str, list[Queued]] = defaultdict(list)
        with self._engine.connect() as conn:
            for row in conn.execute(query):
                message = Queued(*row)
                pages[message.ordering_key].append(message)
        return dict(pages)

    def messages(
        self,
        subscription: str,
        queue: str,
        *,
        ordering_key: str | None = None,
        limit: int = 1000,
        after_seq: int = -1,
    ) -> list[Queued]:
        """Waiting messages of a queue, by ordering key then in order; one key's with `ordering_key`."""
        with self._engine.connect() as conn:
            return self._messages(
                conn, subscription, queue, ordering_key=ordering_key, limit=limit, after_seq=after_seq
            )

    @staticmethod
    def _messages(
        conn: Connection, subscription: str, queue: str, *, ordering_key: str | None, limit: int, after_seq: int = -1
    ) -> list[Queued]:
        c = delivery_messages.c
        query = sa.select(*(c[name] for name in _MESSAGE_COLUMNS)).where(
            c.subscription == subscription, c.queue == queue
        )
        if ordering_key is not None:
            query = query.where(c.group_key == ordering_key).order_by(c.topic, c.offset)
        else:
            query = query.where(c.event_seq > after_seq).order_by(c.event_seq, c.group_key)
        return [Queued(*row) for row in conn.execute(query.limit(limit))]

    def counts(self, subscription: str) -> dict[str, int]:
        """Messages waiting in each internal queue."""
        with self._engine.connect() as conn:
            return self._counts(conn, subscription)

    @staticmethod
    def _counts(conn: Connection, subscription: str) -> dict[str, int]:
        c = delivery_messages.c
        rows = conn.execute(sa.select(c.queue, sa.func.count()).where(c.subscription == subscription).group_by(c.queue))
        found: dict[str, int] = dict(rows.all())
        return {queue: found.get(queue, 0) for queue in QUEUE_NAMES}

    # ----------------------------------------------------------------- writes

    def commit(self, commit: Commit, layouts: dict[str, Layout]) -> bool:
        """Apply one shard step atomically; False (nothing written) when fenced."""
        try:
            with self._transaction(commit.subscription, commit.fence) as conn:
                self._check_behind(conn, commit)
                self._move_offsets(conn, commit)
                self._update_messages(conn, commit.subscription, commit.update)
                for message in commit.consume:
                    self._consume(conn, commit.subscription, message)
                self._produce(conn, commit.subscription, commit.produce, layouts)
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
        """The ordering keys the step queued behind still wait there (a DLQ replay or purge may have moved them).

        One query per queue and thousand keys, not one per key: a step of a subscription with many
        failing keys queues behind all of them.
        """
        g = delivery_groups.c
        for queue in QUEUE_NAMES:
            keys = sorted(key for named, key in commit.behind if named == queue)
            for start in range(0, len(keys), _IN_LIST_LIMIT):
                chunk = keys[start : start + _IN_LIST_LIMIT]
                where = (g.subscription == commit.subscription, g.queue == queue, g.group_key.in_(chunk))
                if len(conn.execute(sa.select(g.group_key).where(*where)).all()) != len(chunk):
                    raise Fenced

    def _move_offsets(self, conn: Connection, commit: Commit) -> None:
        c = delivery_offsets.c
        for (topic, partition), (old, new) in commit.offsets.items():
            where = (c.subscription == commit.subscription, c.topic == topic, c.partition == partition)
            if old is None:
                statement = insert_ignoring_conflicts(conn, delivery_offsets).values(
                    subscription=commit.subscription, topic=topic, partition=partition, seq=new
                )
                # Rows returned, not rowcount: SQLAlchemy 2.1 on psycopg reports -1 for a single-row INSERT.
                moved = len(conn.execute(statement.returning(c.seq)).all())
            else:
                moved = conn.execute(sa.update(delivery_offsets).where(*where, c.seq == old).values(seq=new)).rowcount
            if moved != 1:
                raise Fenced  # another shard moved this partition: this step's work is theirs

    @staticmethod
    def _update_messages(conn: Connection, subscription: str, messages: list[Queued]) -> None:
        """Record failed attempts: one statement for the step's retried messages."""
        if not messages:
            return
        c = delivery_messages.c
        # Bind names differ from the column names: SQLAlchemy reserves those for SET values.
        where = [c[name] == sa.bindparam(f"b_{name}") for name in _POSITION_FIELDS]
        statement = sa.update(delivery_messages).where(c.subscription == subscription, *where)
        statement = statement.values({name: sa.bindparam(f"b_{name}") for name in _ATTEMPT_FIELDS})
        conn.execute(
            statement,
            [{f"b_{name}": getattr(m, name) for name in (*_POSITION_FIELDS, *_ATTEMPT_FIELDS)} for m in messages],
        )

    @staticmethod
    def _consume(conn: Connection, subscription: str, message: Queued) -> None:
        if conn.execute(sa.delete(delivery_messages).where(*_at(subscription, message))).rowcount != 1:
            raise Fenced  # consumed already (a DLQ purge or replay, or another process)
        g = delivery_groups.c
        where = (g.subscription == subscription, g.queue == message.queue, g.group_key == message.ordering_key)
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

    def _produce(
        self, conn: Connection, subscription: str, produce: list[tuple[str, NewMessage]], layouts: dict[str, Layout]
    ) -> None:
        """Append messages to the queues' produce topics, in order; a statement per table, not per message."""
        if not produce:
            return
        h = delivery_heads.c
        rows = conn.execute(
            sa.select(h.queue, h.topic, h.partition, h.next_offset).where(h.subscription == subscription)
        )
        known = {(queue, topic, partition): offset for queue, topic, partition, offset in rows}
        heads = dict(known)
        messages = []
        for queue, new in produce:
            layout = layouts[queue]
            partition = route(new.key_hash, layout.partitions, layout.k)
            offset = heads.get((queue, layout.topic, partition), 0)
            heads[(queue, layout.topic, partition)] = offset + 1
            messages.append(Queued(**vars(new), queue=queue, topic=layout.topic, partition=partition, offset=offset))
        self._move_heads(conn, subscription, known, heads)
        conn.execute(sa.insert(delivery_messages), [{"subscription": subscription, **_row(m)} for m in messages])
        self._point_keys(conn, subscription, messages)

    @staticmethod
    def _move_heads(conn: Connection, subscription: str, known: dict[HeadKey, int], heads: dict[HeadKey, int]) -> None:
        """Write the produce heads that moved: new rows for new partitions, updates for the others."""
        h = delivery_heads.c
        if fresh := [key for key in heads if key not in known]:
            rows = [dict(zip(_HEAD_FIELDS, (*key, heads[key]), strict=True)) for key in fresh]
            conn.execute(sa.insert(delivery_heads), [{"subscription": subscription, **row} for row in rows])
        if grown := [key for key in heads if key in known and heads[key] != known[key]]:
            # Bind names differ from the column names: SQLAlchemy reserves those for SET values.
            where = [h[name] == sa.bindparam(f"b_{name}") for name in _HEAD_FIELDS[:3]]
            statement = sa.update(delivery_heads).where(h.subscription == subscription, *where)
            binds = [
                {f"b_{name}": value for name, value in zip(_HEAD_FIELDS, (*key, heads[key]), strict=True)}
                for key in grown
            ]
            conn.execute(statement.values(next_offset=sa.bindparam("b_next_offset")), binds)

    def _point_keys(self, conn: Connection, subscription: str, messages: list[Queued]) -> None:
        """Each ordering key's `p` becomes its last message produced; a key new to its queue starts with `c` unset."""
        last = {(m.queue, m.ordering_key): m for m in messages}
        rows = []
        for m in last.values():
            main_topic, main_offset, topic, at = m.position
            rows.append(
                {"subscription": subscription, "queue": m.queue, "group_key": m.ordering_key, "group_hash": m.key_hash}
                | {"p_main_topic": main_topic, "p_main_offset": main_offset, "p_topic": topic, "p_offset": at}
                | dict(zip(("c_main_topic", "c_main_offset", "c_topic", "c_offset"), _NONE, strict=True))
            )
        pointer = ["p_main_topic", "p_main_offset", "p_topic", "p_offset"]
        conn.execute(upsert(conn, delivery_groups, ["subscription", "queue", "group_key"], pointer), rows)

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
        """Fast-forward: consume every waiting message of events up to `to_seq`, in order per ordering key."""
        for message in self._messages(conn, subscription, queue, ordering_key=None, limit=1 << 62):
            if message.event_seq <= to_seq:
                self._consume(conn, subscription, message)

    @staticmethod
    def _set_control(conn: Connection, subscription: str, **values: int) -> None:
        c = delivery_control.c
        conn.execute(sa.update(delivery_control).where(c.subscription == subscription).values(**values))

    def replay(self, subscription: str, fence: int, layouts: dict[str, Layout], ordering_key: str | None = None) -> int:
        """Move the DLQ's messages (one ordering key's with `ordering_key`) back to the RQ in order, attempts reset."""
        return self._drain_dlq(subscription, fence, ordering_key, layouts)

    def purge(self, subscription: str, fence: int, ordering_key: str | None = None) -> int:
        """Drop the DLQ's messages (one ordering key's with `ordering_key`)."""
        return self._drain_dlq(subscription, fence, ordering_key, None)

    def _drain_dlq(
        self, subscription: str, fence: int, ordering_key: str | None, layouts: dict[str, Layout] | None
    ) -> int:
        with self._transaction(subscription, fence) as conn:
            waiting = self._key_order(conn, subscription, ordering_key)
            for message in waiting:
                self._consume(conn, subscription, message)
            if layouts is not None:
                # Replayed messages start afresh: no attempts, due at once.
                fresh = [NewMessage(m.ordering_key, m.key_hash, m.event_seq, m.main_topic) for m in waiting]
                self._produce(conn, subscription, [("rq", message) for message in fresh], layouts)
            return len(waiting)

    def _key_order(self, conn: Connection, subscription: str, ordering_key: str | None) -> list[Queued]:
        """The DLQ's messages, each ordering key's in its order."""
        if ordering_key is not None:
            return self._messages(conn, subscription, "dlq", ordering_key=ordering_key, limit=1 << 62)
        found = self._messages(conn, subscription, "dlq", ordering_key=None, limit=1 << 62)
        return sorted(found, key=lambda m: (m.ordering_key, m.topic, m.offset))

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
    return (c.subscription == subscription, *(c[name] == getattr(m, name) for name in _POSITION_FIELDS))
