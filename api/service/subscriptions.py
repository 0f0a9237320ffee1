"""Subscriptions: create, list, pause, resume, delete, reshard, reset offsets, dead letters.

Changes to a subscription are events (the fold judges them); the dead-letter
queue lives beside the offsets in the database, so replay and purge are
transactions there, fenced like a delivery shard's step. A subscription is shown
with where its deliveries stand (never its secret).
"""

from __future__ import annotations

import base64
import secrets
from dataclasses import asdict

import blake3

from partbuild.api.delivery_progress import delivery_progress
from partbuild.api.errors import Conflict, NotFound
from partbuild.api.models.subscriptions import (
    CompositeTopicOut,
    DeadLetterListOut,
    DeadLetterOut,
    DeadLetterRequest,
    DeadLettersMovedOut,
    OffsetResetRequest,
    ReshardSubscriptionRequest,
    RetryPolicyRequest,
    StorageTopicOut,
    SubscriptionCreatedOut,
    SubscriptionDetailOut,
    SubscriptionFilterRequest,
    SubscriptionListOut,
    SubscriptionOut,
    SubscriptionRequest,
    SubscriptionWrittenOut,
)
from partbuild.api.service.as_of import as_of_suffix
from partbuild.api.service.base import ServiceBase
from partbuild.api.surface import ANONYMOUS
from partbuild.orchestrator.delivery.shard import layouts, message_id
from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.database import Database
from partbuild.state.fold.registry import BUILD_EVENT_TYPES
from partbuild.state.fold.subscription_records import QUEUES, Subscription
from partbuild.state.ops.deliveries import Fenced, Queued
from partbuild.state.queries.retention import cutoff_seq_before
from partbuild.state.rules.topics import CompositeTopic

_QUEUES = {name: queue for queue, name in QUEUES.items()}  # "main" -> SUBSCRIPTION_QUEUE_MAIN, ...
_ACTIONS = {
    "pause": pb.SUBSCRIPTION_ACTION_PAUSE,
    "resume": pb.SUBSCRIPTION_ACTION_RESUME,
    "delete": pb.SUBSCRIPTION_ACTION_DELETE,
}


def new_secret() -> str:
    """A Standard Webhooks signing secret: `whsec_` and base64 of 32 random bytes."""
    return "whsec_" + base64.b64encode(secrets.token_bytes(32)).decode()


def secret_digest(secret: str) -> str:
    """What the log keeps of a secret: enough to tell secrets apart, nothing to sign with."""
    return blake3.blake3(b"partbuild subscription secret\0" + secret.encode()).hexdigest()[:32]


class SubscriptionsService(ServiceBase):
    """Subscriptions and their dead letters."""

    def _shown(self, name: str) -> SubscriptionOut:
        with self.reads.read() as state:
            sub = state.subscriptions.get(name)
            head = state.head_seq
        if sub is None:
            raise NotFound(f"no subscription {name!r}")
        return subscription_out(sub, self.db, head)

    def create_subscription(self, request: SubscriptionRequest, user: str = ANONYMOUS) -> SubscriptionCreatedOut:
        """Record a new subscription; its secret goes to the database, only its digest to the log."""
        made = new_secret() if request.secret is None else None
        secret = made or request.secret
        assert secret is not None
        digest = secret_digest(secret)
        flt = request.filter
        msg = pb.SubscriptionCreate(
            name=request.name,
            endpoint=request.endpoint,
            filter=pb.SubscriptionFilter(
                event_types=flt.event_types,
                ref_prefixes=flt.ref_prefixes,
                ref_patterns=flt.ref_patterns,
                job=flt.job,
                root_want=flt.root_want,
            ),
            ordering=request.ordering,
            format=request.format,
            retry=pb.RetryPolicy(**request.retry.model_dump()),
            shard_count=request.shard_count,
            main_partitions=request.main_partitions,
            rq_partitions=request.rq_partitions,
            dlq_partitions=request.dlq_partitions,
            secret_digest=digest,
        )
        if request.start_after_seq is not None:
            msg.start_after_seq = request.start_after_seq
        self.db.deliveries.put_secret(digest, secret)
        seq = self._write(self._checked(msg, user))[0]
        return SubscriptionCreatedOut(seq=seq, subscription=self._shown(request.name), secret=made)

    def list_subscriptions(self, as_of_seq: int | None = None, min_seq: int | None = None) -> SubscriptionListOut:
        """Every subscription not deleted by `as_of_seq`, by name, with its settings then and its deliveries now."""
        with self._reading(min_seq, as_of_seq) as state:
            subs = sorted((sub for sub in state.subscriptions.values() if sub.status != "deleted"), key=_name)
            seq = state.head_seq
        delivering, head = self._delivering_now(subs, as_of_seq, seq)
        shown = [subscription_then(sub, now, self.db, head) for sub, now in zip(subs, delivering, strict=True)]
        return SubscriptionListOut(subscriptions=shown, as_of_seq=seq)

    def get_subscription(
        self, name: str, as_of_seq: int | None = None, min_seq: int | None = None
    ) -> SubscriptionDetailOut:
        """One subscription: its settings as of `as_of_seq`; its lag, queue sizes and counters now."""
        with self._reading(min_seq, as_of_seq) as state:
            sub = state.subscriptions.get(name)
            seq = state.head_seq
        if sub is None:
            raise NotFound(f"no subscription {name!r}{as_of_suffix(as_of_seq)}")
        (now,), head = self._delivering_now([sub], as_of_seq, seq)
        return SubscriptionDetailOut(**dict(subscription_then(sub, now, self.db, head)), as_of_seq=seq)

    def _delivering_now(
        self, subs: list[Subscription], as_of_seq: int | None, seq: int
    ) -> tuple[list[Subscription | None], int]:
        """The records the deliveries of `subs` follow now (None: deleted since), and the head now.

        Deliveries are kept beside the log, not in it: as of any seq, where they stand is now.
        """
        if as_of_seq is None:
            itself: list[Subscription | None] = list(subs)
            return itself, seq
        with self.reads.read() as state:
            now = [state.subscriptions.get(sub.name) for sub in subs]
            head = state.head_seq
        # A name deleted and created again is another subscription, with deliveries of its own.
        same = [live if live is not None and live.key == sub.key else None for sub, live in zip(subs, now, strict=True)]
        return same, head

    def _change(self, name: str, action: str, user: str) -> SubscriptionWrittenOut:
        msg = pb.SubscriptionChange(name=name, action=_ACTIONS[action], reason=f"{action} asked for by {user}")
        self._known(name)
        seq = self._write(self._checked(msg, user))[0]
        return SubscriptionWrittenOut(seq=seq, subscription=self._shown(name))

    def pause_subscription(self, name: str, user: str = ANONYMOUS) -> SubscriptionWrittenOut:
        """Stop delivering (offsets and queues stay where they are)."""
        return self._change(name, "pause", user)

    def resume_subscription(self, name: str, user: str = ANONYMOUS) -> SubscriptionWrittenOut:
        """Deliver again from where it paused."""
        return self._change(name, "resume", user)

    def delete_subscription(self, name: str, user: str = ANONYMOUS) -> SubscriptionWrittenOut:
        """Stop for good; its queues are dropped (the log keeps its history)."""
        return self._change(name, "delete", user)

    def _known(self, name: str) -> Subscription:
        with self.reads.read() as state:
            sub = state.subscriptions.get(name)
        if sub is None or sub.status == "deleted":
            raise NotFound(f"no subscription {name!r}")
        return sub

    def reshard_subscription(
        self, name: str, request: ReshardSubscriptionRequest, user: str = ANONYMOUS
    ) -> SubscriptionWrittenOut:
        """Change the shard count (new RQ/DLQ storage topics where it does not divide theirs)."""
        self._known(name)
        msg = pb.SubscriptionReshard(name=name, **request.model_dump())
        seq = self._write(self._checked(msg, user))[0]
        return SubscriptionWrittenOut(seq=seq, subscription=self._shown(name))

    def reset_subscription_offset(
        self, name: str, request: OffsetResetRequest, user: str = ANONYMOUS
    ) -> SubscriptionWrittenOut:
        """Rewind or fast-forward the main topic; fast-forward the RQ or the DLQ."""
        self._known(name)
        to_seq = request.to_seq
        if to_seq is None:
            assert request.to_time_ms is not None
            to_seq = cutoff_seq_before(self.log, request.to_time_ms) - 1  # the last event before that time
        msg = pb.SubscriptionOffsetReset(
            name=name, queue=_QUEUES[request.queue], to_seq=to_seq, reason=f"asked for by {user}"
        )
        seq = self._write(self._checked(msg, user))[0]
        return SubscriptionWrittenOut(seq=seq, subscription=self._shown(name))

    def list_dead_letters(self, name: str, after_seq: int = -1, limit: int = 100) -> DeadLetterListOut:
        """The DLQ's messages in event order, a page at a time."""
        sub = self._known(name)
        found = self.db.deliveries.messages(sub.key, "dlq", limit=limit + 1, after_seq=after_seq)
        page = found[:limit]
        more = len(found) > limit
        if more and page[0].event_seq != page[-1].event_seq:
            # Pages end between events, so the next one starts after a whole event's messages.
            page = [message for message in page if message.event_seq != page[-1].event_seq]
        # One log read for the page: an event fans out to many messages, and pages hold many events.
        events = self.log.read_seqs(message.event_seq for message in page)
        out = []
        for message in page:
            stored = events.get(message.event_seq)
            event_type = stored.event_type if stored is not None else None
            out.append(dead_letter_out(message, message_id(sub, message.event_seq, message.ordering_key), event_type))
        return DeadLetterListOut(messages=out, next_after_seq=page[-1].event_seq if more else None)

    def replay_dead_letters(self, name: str, request: DeadLetterRequest, user: str = ANONYMOUS) -> DeadLettersMovedOut:
        """Move dead letters back to the retry queue, each group's in order: delivered again at once."""
        sub = self._known(name)
        fence = self.db.deliveries.control(sub.key, sub.start_after_seq).applied_seq
        try:
            moved = self.db.deliveries.replay(sub.key, fence, layouts(sub), request.group)
        except Fenced:
            raise Conflict("a reset of this subscription was being applied; try again") from None
        return DeadLettersMovedOut(subscription=name, moved=moved)

    def purge_dead_letters(self, name: str, request: DeadLetterRequest, user: str = ANONYMOUS) -> DeadLettersMovedOut:
        """Drop dead letters (their groups deliver their later messages again)."""
        sub = self._known(name)
        fence = self.db.deliveries.control(sub.key, sub.start_after_seq).applied_seq
        try:
            moved = self.db.deliveries.purge(sub.key, fence, request.group)
        except Fenced:
            raise Conflict("a reset of this subscription was being applied; try again") from None
        return DeadLettersMovedOut(subscription=name, moved=moved)


# ----------------------------------------------------------------- records -> models


def topic_out(topic: CompositeTopic) -> CompositeTopicOut:
    return CompositeTopicOut(
        storage_topics=[
            StorageTopicOut(partitions=t.partitions, k=t.k, start_seq=t.start_seq) for t in topic.storage_topics
        ],
        produce_pointer=topic.produce_pointer,
    )


def subscription_out(sub: Subscription, db: Database, head: int) -> SubscriptionOut:
    """The API's subscription: settings, topics, lag, queue sizes, counters (from one snapshot)."""
    return subscription_then(sub, sub, db, head)


def subscription_then(sub: Subscription, now: Subscription | None, db: Database, head: int) -> SubscriptionOut:
    """`sub`'s settings (as of some seq), and where the deliveries of `now` stand against `head`, the head now.

    `now` is the same subscription's record now (`sub` itself when read now), None when it was deleted since.
    """
    progress = delivery_progress(now, db, head)
    default_types = sub.event_types == BUILD_EVENT_TYPES
    return SubscriptionOut(
        name=sub.name,
        status=sub.status,
        endpoint=sub.endpoint,
        filter=SubscriptionFilterRequest(
            event_types=[] if default_types else list(sub.event_types),
            ref_prefixes=list(sub.ref_prefixes),
            ref_patterns=list(sub.ref_patterns),
            job=sub.job,
            root_want=sub.root_want,
        ),
        ordering=sub.ordering,
        format=sub.format,
        retry=RetryPolicyRequest(
            max_attempts=sub.max_attempts,
            backoff_initial_ms=sub.backoff_initial_ms,
            backoff_max_ms=sub.backoff_max_ms,
            max_age_ms=sub.max_age_ms,
            timeout_ms=sub.timeout_ms,
        ),
        shard_count=sub.shard_count,
        main_topic=topic_out(sub.main),
        rq_topic=topic_out(sub.rq),
        dlq_topic=topic_out(sub.dlq),
        secret_digest=sub.secret_digest,
        created_seq=sub.created_seq,
        start_after_seq=sub.start_after_seq,
        **asdict(progress),
    )


def dead_letter_out(message: Queued, message_id: str, event_type: str | None) -> DeadLetterOut:
    return DeadLetterOut(
        message_id=message_id,
        group=message.ordering_key,
        seq=message.event_seq,
        event_type=event_type,
        attempts=message.attempts,
        last_status=message.last_status,
        last_error=message.last_error,
        first_failed_ms=message.first_failed_ms,
        topic=message.topic,
        partition=message.partition,
        offset=message.offset,
    )


def _name(sub: Subscription) -> str:
    return sub.name
