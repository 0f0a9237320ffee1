"""The service's webhook subscriptions: create, list, pause, resume, delete, reshard, reset offsets, dead letters.

Changes to a subscription are events (the fold judges them); the dead-letter
queue lives beside the offsets in the database, so replay and purge are
transactions there, fenced like a delivery shard's step.
"""

from __future__ import annotations

import base64
import secrets
from collections.abc import Callable
from typing import TYPE_CHECKING

import blake3

from partbuild.api import subscription_models as sm
from partbuild.api.errors import Conflict, NotFound
from partbuild.api.subscription_view import dead_letter_out, subscription_out
from partbuild.api.surface import ANONYMOUS
from partbuild.orchestrator.delivery.shard import layouts, message_id
from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.fold.build_state import BuildState
from partbuild.state.ops.deliveries import Fenced
from partbuild.state.rules.retention import cutoff_seq_before
from partbuild.state.rules.subscriptions import Subscription

if TYPE_CHECKING:
    from google.protobuf.message import Message

    from partbuild.state.database import Database
    from partbuild.state.log.live import LiveState
from partbuild.state.log.store import EventLog

_QUEUES = {"main": pb.SUBSCRIPTION_QUEUE_MAIN, "rq": pb.SUBSCRIPTION_QUEUE_RQ, "dlq": pb.SUBSCRIPTION_QUEUE_DLQ}
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


class Subscriptions:
    """Mixed into `Service`: uses its log, live state, `_write` and `_event`."""

    log: EventLog
    db: Database
    live: LiveState
    _write: Callable[[Callable[[BuildState], list[pb.Event]]], tuple[int, int]]
    _event: Callable[[Message, str], pb.Event]

    def _checked(self, payload: Message, user: str) -> Callable[[BuildState], list[pb.Event]]:
        """A write of one event the fold must accept: its reason, if it would not, is the answer (409)."""

        def build(state: BuildState) -> list[pb.Event]:
            event = self._event(payload, user)
            reason = state.problem(event)
            if reason is not None:
                raise Conflict(reason)
            return [event]

        return build

    def _shown(self, name: str) -> sm.Subscription:
        with self.live.read() as state:
            sub = state.subscriptions.get(name)
            head = state.head_seq
        if sub is None:
            raise NotFound(f"no subscription {name!r}")
        return subscription_out(sub, self.db, head)

    def create_subscription(self, request: sm.SubscriptionRequest, user: str = ANONYMOUS) -> sm.SubscriptionCreated:
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
        return sm.SubscriptionCreated(seq=seq, subscription=self._shown(request.name), secret=made)

    def list_subscriptions(self) -> sm.SubscriptionList:
        """Every subscription that is not deleted, by name."""
        with self.live.read() as state:
            subs = [sub for sub in state.subscriptions.values() if sub.status != "deleted"]
            head = state.head_seq
        return sm.SubscriptionList(
            subscriptions=[subscription_out(sub, self.db, head) for sub in sorted(subs, key=lambda s: s.name)]
        )

    def get_subscription(self, name: str) -> sm.Subscription:
        """One subscription, with its lag, queue sizes and counters."""
        return self._shown(name)

    def _change(self, name: str, action: str, user: str) -> sm.SubscriptionWritten:
        msg = pb.SubscriptionChange(name=name, action=_ACTIONS[action], reason=f"{action} asked for by {user}")
        self._known(name)
        seq = self._write(self._checked(msg, user))[0]
        return sm.SubscriptionWritten(seq=seq, subscription=self._shown(name))

    def pause_subscription(self, name: str, user: str = ANONYMOUS) -> sm.SubscriptionWritten:
        """Stop delivering (offsets and queues stay where they are)."""
        return self._change(name, "pause", user)

    def resume_subscription(self, name: str, user: str = ANONYMOUS) -> sm.SubscriptionWritten:
        """Deliver again from where it paused."""
        return self._change(name, "resume", user)

    def delete_subscription(self, name: str, user: str = ANONYMOUS) -> sm.SubscriptionWritten:
        """Stop for good; its queues are dropped (the log keeps its history)."""
        return self._change(name, "delete", user)

    def _known(self, name: str) -> Subscription:
        with self.live.read() as state:
            sub = state.subscriptions.get(name)
        if sub is None or sub.status == "deleted":
            raise NotFound(f"no subscription {name!r}")
        return sub

    def reshard_subscription(
        self, name: str, request: sm.ReshardSubscriptionRequest, user: str = ANONYMOUS
    ) -> sm.SubscriptionWritten:
        """Change the shard count (new RQ/DLQ storage topics where it does not divide theirs)."""
        self._known(name)
        msg = pb.SubscriptionReshard(name=name, **request.model_dump())
        seq = self._write(self._checked(msg, user))[0]
        return sm.SubscriptionWritten(seq=seq, subscription=self._shown(name))

    def reset_subscription_offset(
        self, name: str, request: sm.OffsetResetRequest, user: str = ANONYMOUS
    ) -> sm.SubscriptionWritten:
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
        return sm.SubscriptionWritten(seq=seq, subscription=self._shown(name))

    def list_dead_letters(self, name: str, after_seq: int = -1, limit: int = 100) -> sm.DeadLetterList:
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
        return sm.DeadLetterList(messages=out, next_after_seq=page[-1].event_seq if more else None)

    def replay_dead_letters(
        self, name: str, request: sm.DeadLetterRequest, user: str = ANONYMOUS
    ) -> sm.DeadLettersMoved:
        """Move dead letters back to the retry queue, each group's in order: delivered again at once."""
        sub = self._known(name)
        fence = self.db.deliveries.control(sub.key, sub.start_after_seq).applied_seq
        try:
            moved = self.db.deliveries.replay(sub.key, fence, layouts(sub), request.group)
        except Fenced:
            raise Conflict("a reset of this subscription was being applied; try again") from None
        return sm.DeadLettersMoved(subscription=name, moved=moved)

    def purge_dead_letters(
        self, name: str, request: sm.DeadLetterRequest, user: str = ANONYMOUS
    ) -> sm.DeadLettersMoved:
        """Drop dead letters (their groups deliver their later messages again)."""
        sub = self._known(name)
        fence = self.db.deliveries.control(sub.key, sub.start_after_seq).applied_seq
        try:
            moved = self.db.deliveries.purge(sub.key, fence, request.group)
        except Fenced:
            raise Conflict("a reset of this subscription was being applied; try again") from None
        return sm.DeadLettersMoved(subscription=name, moved=moved)
