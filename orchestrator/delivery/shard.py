"""One shard of one subscription: its slice of the main topic, then its ordering keys in the retry queue.

A shard is a subscription's slice of its topic partitions (`ShardStep`: one
step of one shard). A step reads the next events after the shard's offsets
(only up to what the live state has folded), turns them into messages of the
topic partitions it owns, and:

- delivers each ordering key's messages in order, keys concurrently; a key with
  messages waiting in the RQ or the DLQ gets its new ones queued behind them;
- a failed message goes to the RQ (retryable: with backoff, honouring Retry-After)
  or the DLQ (permanent), and the rest of its key's messages of the step follow
  it there;
- retries the due heads of its waiting RQ keys, in each key's order: after the
  policy's attempts or age a message is dead-lettered, and its key's later
  messages with it (they must wait behind it anyway);

and then commits all of it in one transaction (`DeliveryStore.commit`): offsets,
queue changes, counters. A crash before the commit delivers the step again:
at-least-once, duplicates only of what was in flight. The payload renderer is
injected (`Render`, `api/webhook_payloads.py`): this layer cannot import the
API's shapes.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Protocol, TypeVar

import blake3

from partbuild.orchestrator.delivery.messages import Message, messages_for
from partbuild.orchestrator.delivery.sender import Outcome, Sender
from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.fold.build_state import BuildState
from partbuild.state.fold.subscription_records import Subscription
from partbuild.state.log.live import LiveState
from partbuild.state.log.store import StoredEvent
from partbuild.state.ops.deliveries import Commit, Control, DeliveryStore, Layout, NewMessage, Queued
from partbuild.state.rules.topics import CompositeTopic, route, shard_of_partition

log = logging.getLogger(__name__)
M = TypeVar("M", NewMessage, Queued)
BATCH_EVENTS = 1000
RQ_KEY_PAGE = 50


class RenderedBody(Protocol):
    body: bytes
    content_type: str


class Render(Protocol):
    """The payload formats (`api/webhook_payloads.render`): the API's shapes, which this layer cannot import."""

    def __call__(
        self,
        format: str,
        *,
        subscription: str,
        message_id: str,
        seq: int,
        event: pb.Event,
        ordering_key: str,
        state: BuildState,
    ) -> RenderedBody | None: ...


@dataclass(frozen=True)
class Delivery:
    """A message ready to post."""

    message_id: str
    ordering_key: str
    body: bytes
    content_type: str


def message_id(sub: Subscription, seq: int, ordering_key: str) -> str:
    """`webhook-id`: the same for every attempt of one event to one ordering key of one subscription."""
    digest = blake3.blake3(ordering_key.encode()).hexdigest()[:16]
    return f"pb_{sub.created_seq}_{seq}_{digest}"


def layouts(sub: Subscription) -> dict[str, Layout]:
    """Where new RQ and DLQ messages go: each queue's produce storage topic."""
    return {name: _layout(topic) for name, topic in (("rq", sub.rq), ("dlq", sub.dlq))}


def _layout(topic: CompositeTopic) -> Layout:
    produce = topic.produce_topic
    return Layout(topic.produce_pointer, produce.partitions, produce.k)


def owned_topic_partitions(sub: Subscription, shard_id: int, topic_index: int) -> list[int]:
    """The topic partitions of a main storage topic this shard reads: a contiguous range each."""
    partitions = sub.main.storage_topics[topic_index].partitions
    return [p for p in range(partitions) if shard_of_partition(p, partitions, sub.shard_count) == shard_id]


def owns_key(sub: Subscription, shard_id: int, key_hash: int) -> bool:
    """Whether this shard handles an ordering key's queued messages: it owns the key's topic partition now."""
    produce = sub.main.produce_topic
    partition = route(key_hash, produce.partitions, produce.k)
    return shard_of_partition(partition, produce.partitions, sub.shard_count) == shard_id


def backoff_ms(sub: Subscription, attempts: int, retry_after_ms: int) -> int:
    """How long a message waits after its `attempts`-th failure: exponential, capped, at least Retry-After."""
    exponential = sub.backoff_initial_ms * (2 ** min(attempts - 1, 30))
    return max(min(exponential, sub.backoff_max_ms), retry_after_ms)


class ShardStep:
    """One step of one shard; `run` does it and says whether there was anything to do."""

    def __init__(
        self,
        live: LiveState,
        store: DeliveryStore,
        sub: Subscription,
        shard_id: int,
        sender: Sender,
        render: Render,
        secret: str,
        *,
        concurrency: int = 32,
        now_ms: Callable[[], int] = lambda: int(time.time() * 1000),
        head_seq: int | None = None,
    ) -> None:
        """`head_seq`: read the main topic up to there (the head when `sub` was read); None: the live head."""
        self.live, self.sub, self.shard_id = live, sub, shard_id
        self.head_seq = head_seq
        self.store = store
        self.sender, self.render, self.secret = sender, render, secret
        self.now_ms = now_ms
        self._limit = asyncio.Semaphore(concurrency)
        self.commit: Commit | None = None
        self.moved: set[str] = set()  # ordering keys this step moved from the RQ to the DLQ
        self.events: dict[int, StoredEvent] = {}  # the events of the RQ messages this step retries, by seq

    async def run(self, control: Control) -> bool:
        sub = self.sub
        self.commit = commit = Commit(sub.key, control.applied_seq)
        # Offsets before waiting keys: a commit landing in between then makes this step see a key
        # waiting with offsets still before its queued message, never offsets past it with the key free.
        main = self._read_main(control)
        waiting = {
            key: queue
            for key, (queue, hashed) in self.store.waiting_keys(sub.key).items()
            if owns_key(sub, self.shard_id, hashed)
        }
        due = self.store.due_pages(sub.key, self.now_ms(), RQ_KEY_PAGE) if "rq" in waiting.values() else {}
        retries = {key: page for key, page in due.items() if waiting.get(key) == "rq"}
        await asyncio.gather(self._deliver_main(main, waiting), self._retry(retries))
        _follow_to_dlq(commit, self.moved)
        if commit.empty():
            return False
        if not self.store.commit(commit, layouts(sub)):
            log.info(
                "subscription %s shard %d: step fenced (a reset or another process); it runs again",
                sub.name,
                self.shard_id,
            )
        elif commit.retried or commit.dead_lettered:
            # What an operator must see without polling the API; deliveries that went through stay quiet.
            log.warning(
                "subscription %s shard %d: %d delivered, %d failed (to retry), %d dead-lettered",
                sub.name,
                self.shard_id,
                commit.delivered,
                commit.retried,
                commit.dead_lettered,
            )
        return True

    # ----------------------------------------------------------------- the main topic

    def _read_main(self, control: Control) -> list[tuple[Message, Delivery]]:
        """The next events of the first main storage topic this shard has not finished, as deliveries."""
        sub = self.sub
        offsets = self.store.offsets(sub.key)
        head = self.live.head_seq if self.head_seq is None else self.head_seq
        topics = sub.main.storage_topics
        for index in range(sub.main.produce_pointer + 1):
            end = topics[index + 1].start_seq - 1 if index < sub.main.produce_pointer else head
            floor = max(control.main_floor, topics[index].start_seq - 1)
            mine = {p: offsets.get((index, p)) for p in owned_topic_partitions(sub, self.shard_id, index)}
            at = {p: floor if seq is None else seq for p, seq in mine.items()}
            start = min(at.values(), default=end)
            if start >= min(end, head):
                continue
            events = [e for e in self.live.log.read(start, BATCH_EVENTS) if e.seq <= min(end, head)]
            if not events:
                continue
            upto = events[-1].seq
            assert self.commit is not None
            for p, seq in mine.items():
                if at[p] < upto:
                    self.commit.offsets[(index, p)] = (seq, upto)
            return self._messages(events, index, at)
        return []

    def _messages(
        self, events: Sequence[StoredEvent], index: int, at: dict[int, int]
    ) -> list[tuple[Message, Delivery]]:
        found = []
        with self.live.read() as state:
            rejected = _rejected_since(state, events[0].seq)
            for stored in events:
                if stored.seq in rejected:
                    continue
                event = stored.to_event()
                for message in messages_for(self.sub, stored.seq, event, state):
                    if message.main_topic == index and at.get(message.topic_partition, stored.seq) < stored.seq:
                        delivery = self._delivery(state, message.seq, event, message.ordering_key)
                        if delivery is not None:
                            found.append((message, delivery))
        return found

    def _delivery(self, state: BuildState, seq: int, event: pb.Event, ordering_key: str) -> Delivery | None:
        mid = message_id(self.sub, seq, ordering_key)
        rendered = self.render(
            self.sub.format,
            subscription=self.sub.name,
            message_id=mid,
            seq=seq,
            event=event,
            ordering_key=ordering_key,
            state=state,
        )
        return None if rendered is None else Delivery(mid, ordering_key, rendered.body, rendered.content_type)

    async def _deliver_main(self, found: list[tuple[Message, Delivery]], waiting: dict[str, str]) -> None:
        by_key: dict[str, list[tuple[Message, Delivery]]] = defaultdict(list)
        for message, delivery in found:
            by_key[message.ordering_key].append((message, delivery))
        await asyncio.gather(*(self._deliver_key(items, waiting.get(key)) for key, items in by_key.items()))

    async def _deliver_key(self, items: list[tuple[Message, Delivery]], queue: str | None) -> None:
        """One ordering key's new messages in order; from the first failure on (or if it waits already), queued."""
        commit = self.commit
        assert commit is not None
        if queue is not None:
            commit.behind.add((queue, items[0][0].ordering_key))
        for message, delivery in items:
            new = NewMessage(message.ordering_key, message.key_hash, message.seq, message.main_topic)
            if queue is not None:
                commit.produce.append((queue, new))
                continue
            outcome = await self._post(delivery)
            if outcome.ok:
                commit.delivered += 1
                continue
            now = self.now_ms()
            queue = "rq" if outcome.retryable and self.sub.max_attempts > 1 else "dlq"
            commit.produce.append((queue, _failed(new, 1, now, now, outcome, self.sub)))
            if queue == "rq":
                commit.retried += 1

    async def _post(self, delivery: Delivery) -> Outcome:
        async with self._limit:
            return await self.sender.send(
                self.sub.endpoint,
                body=delivery.body,
                content_type=delivery.content_type,
                message_id=delivery.message_id,
                ordering_key=delivery.ordering_key,
                secret=self.secret,
                timeout_s=self.sub.timeout_ms / 1000,
            )

    # ----------------------------------------------------------------- the retry queue

    async def _retry(self, pages: dict[str, list[Queued]]) -> None:
        # One log read for every due message's event; a key stops at its first failure, so some go unused.
        self.events = self.live.log.read_seqs(m.event_seq for page in pages.values() for m in page)
        await asyncio.gather(*(self._retry_key(key, page) for key, page in pages.items()))

    async def _retry_key(self, ordering_key: str, waiting: list[Queued]) -> None:
        """Deliver a due ordering key's first RQ messages (`waiting`) in order while they are due and succeed."""
        commit = self.commit
        assert commit is not None
        for index, message in enumerate(waiting):
            now = self.now_ms()
            if message.not_before_ms > now:
                return
            delivery = self._redeliverable(message)
            outcome = await self._post(delivery) if delivery is not None else Outcome(True, False, 0)
            if outcome.ok:
                commit.consume.append(message)
                commit.delivered += delivery is not None
                continue
            attempts = message.attempts + 1
            first = message.first_failed_ms or now
            sub = self.sub
            expired = sub.max_age_ms and now - first >= sub.max_age_ms
            if outcome.retryable and attempts < sub.max_attempts and not expired:
                commit.update.append(_failed(message, attempts, first, now, outcome, sub))
                commit.retried += 1
                return
            # The whole key's messages go, not just this page of them: what stayed would pass them.
            rest = self.store.messages(sub.key, "rq", ordering_key=ordering_key, limit=1 << 62)[index + 1 :]
            self._dead_letter([_failed(message, attempts, first, now, outcome, sub), *rest])
            return

    def _dead_letter(self, messages: list[Queued]) -> None:
        """Move an ordering key's failed head and everything behind it from the RQ to the DLQ, in order."""
        commit = self.commit
        assert commit is not None
        self.moved.add(messages[0].ordering_key)
        for message in messages:
            commit.consume.append(message)
            commit.produce.append(("dlq", message.as_new()))

    def _redeliverable(self, message: Queued) -> Delivery | None:
        """The message's delivery, rendered again from its event (None: nothing to deliver any more)."""
        stored = self.events.get(message.event_seq)
        if stored is None:
            return None
        with self.live.read() as state:
            return self._delivery(state, message.event_seq, stored.to_event(), message.ordering_key)


def _follow_to_dlq(commit: Commit, moved: set[str]) -> None:
    """New messages queued behind an RQ ordering key that this step dead-lettered (`moved`) go after it,
    to the DLQ: a key must never wait in both queues (its newer messages would pass its older ones)."""
    behind = [new for queue, new in commit.produce if queue == "rq" and new.ordering_key in moved]
    if behind:
        kept = [(queue, new) for queue, new in commit.produce if not (queue == "rq" and new.ordering_key in moved)]
        commit.produce = kept + [("dlq", new) for new in behind]


def _failed(message: M, attempts: int, first_ms: int, now_ms: int, outcome: Outcome, sub: Subscription) -> M:
    """`message` after its `attempts`-th failed delivery."""
    return replace(
        message,
        attempts=attempts,
        first_failed_ms=first_ms,
        not_before_ms=now_ms + backoff_ms(sub, attempts, outcome.retry_after_ms),
        last_status=outcome.status,
        last_error=outcome.error,
    )


def _rejected_since(state: BuildState, seq: int) -> set[int]:
    """The seqs at or after `seq` the fold rejected (rejections are kept in seq order)."""
    found = set()
    for rejection in reversed(state.rejections):
        if rejection.seq < seq:
            break
        found.add(rejection.seq)
    return found
