"""The shards this process runs: one thread per (subscription, shard), started and stopped as the log says.

`Deliverer` watches the live state's subscriptions. Each active subscription's
shards that this process's `ShardSelector` picks (`all`, a list `0,2`, or every
n-th from k, `k/n`) get a `ShardRunner`: a thread with
its own event loop and HTTP client, stepping until its subscription is paused,
deleted or resharded (then a runner for the new layout takes over: its offsets,
queues and ordering-key state are the subscription's, not the shard's, so nothing moves).
A runner first applies the subscription's resets it finds unapplied, in log order,
once (the database's fence decides which runner does). Deleted subscriptions'
delivery rows are dropped once their runners have stopped.
"""

from __future__ import annotations

import asyncio
import logging
import re
import threading
from dataclasses import dataclass

from partbuild.orchestrator.delivery.sender import Sender
from partbuild.orchestrator.delivery.shard import Render, ShardStep
from partbuild.state.fold.subscription_records import Subscription
from partbuild.state.log.live import LiveState
from partbuild.state.ops.deliveries import Control, DeliveryStore

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ShardSelector:
    """Which shards of every subscription this process runs: all, a list, or every n-th from k (`k/n`)."""

    ids: frozenset[int] | None = None  # None: not a list
    part: tuple[int, int] | None = None  # (k, n)

    @classmethod
    def parse(cls, text: str) -> ShardSelector:
        """`all`, `0,2,5` or `1/3`; ValueError naming what was wrong."""
        text = text.strip()
        if text == "all":
            return cls()
        if match := re.fullmatch(r"(\d{1,4})/(\d{1,4})", text):
            k, n = int(match.group(1)), int(match.group(2))
            if not 0 <= k < n:
                raise ValueError(f"--shards {text!r}: k/n needs 0 <= k < n")
            return cls(part=(k, n))
        if re.fullmatch(r"\d{1,4}(,\d{1,4})*", text):
            return cls(ids=frozenset(int(each) for each in text.split(",")))
        raise ValueError(f"--shards {text!r}: expected 'all', a list like '0,2' or a part like '1/3'")

    def shards(self, shard_count: int) -> list[int]:
        every = range(shard_count)
        if self.part is not None:
            k, n = self.part
            return [s for s in every if s % n == k]
        if self.ids is not None:
            return [s for s in every if s in self.ids]
        return list(every)


class ShardRunner:
    """One shard of one subscription layout, stepping in a thread until the layout changes or it is stopped."""

    def __init__(
        self, live: LiveState, store: DeliveryStore, sub: Subscription, shard_id: int, render: Render, poll_s: float
    ) -> None:
        self.live, self.sub, self.shard_id, self.render, self.poll_s = live, sub, shard_id, render, poll_s
        self.store = store
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._main, name=f"deliver-{sub.name}-{shard_id}", daemon=True)

    @property
    def shape(self) -> tuple[str, int, int]:
        return layout_of(self.sub)

    def start(self) -> None:
        self.thread.start()

    def _main(self) -> None:
        log.info("subscription %s: delivering shard %d of %d", self.sub.name, self.shard_id, self.sub.shard_count)
        try:
            asyncio.run(self._loop())
        except Exception:  # one subscription's failure must not stop the others; its runner is restarted
            log.exception("subscription %s shard %d stopped", self.sub.name, self.shard_id)

    async def _loop(self) -> None:
        sender = Sender()
        try:
            while not self.stopping.is_set():
                # The subscription and the head together: a step never reads past a pause, reshard or delete.
                with self.live.read() as state:
                    sub = state.subscriptions.get(self.sub.name)
                    head = state.head_seq
                if sub is None or sub.status != "active" or layout_of(sub) != self.shape:
                    return
                secret = self.store.secret(sub.secret_digest)
                if secret is None:
                    log.error("subscription %s: its signing secret is not in this database", sub.name)
                    await asyncio.sleep(5)
                    continue
                control = self._apply_resets(sub)
                step = ShardStep(self.live, self.store, sub, self.shard_id, sender, self.render, secret, head_seq=head)
                did = await step.run(control)
                if not did:
                    await asyncio.sleep(self.poll_s)
        finally:
            await sender.close()

    def _apply_resets(self, sub: Subscription) -> Control:
        """The control row after applying, in log order, every reset of `sub` not applied yet."""
        control = self.store.control(sub.key, sub.start_after_seq)
        for seq, queue, to_seq in sub.resets:
            if seq > control.applied_seq:
                self.store.apply_reset(sub.key, control.applied_seq, seq, queue, to_seq)
                control = self.store.control(sub.key, sub.start_after_seq)
        return control


def layout_of(sub: Subscription) -> tuple[str, int, int]:
    """What a runner is for: the subscription's incarnation, its shard count and its last change."""
    return (sub.key, sub.shard_count, sub.updated_seq if sub.status == "active" else -1)


class Deliverer:
    """Runs this process's shards of every active subscription, following the log."""

    def __init__(
        self,
        live: LiveState,
        store: DeliveryStore,
        render: Render,
        *,
        selector: ShardSelector | None = None,
        poll_s: float = 0.02,
    ) -> None:
        """Deliver what `live` folds; where deliveries stand is in `store` (the same database's)."""
        self.live, self.store, self.render, self.poll_s = live, store, render, poll_s
        self.selector = selector or ShardSelector()
        self.runners: dict[tuple[str, int], ShardRunner] = {}
        self._dropped: set[str] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="partbuild-deliverer", daemon=True)

    def start(self) -> Deliverer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        for runner in self.runners.values():
            runner.stopping.set()
        for runner in self.runners.values():
            runner.thread.join()

    def _watch(self) -> None:
        while not self._stop.is_set():
            try:
                self.sync()
            except Exception:  # a database hiccup: the next look retries
                log.exception("the deliverer could not look at the subscriptions")
            self._stop.wait(0.2)

    def _running(self, sub_key: str) -> bool:
        return any(key[0] == sub_key and runner.thread.is_alive() for key, runner in self.runners.items())

    def sync(self) -> None:
        """Start the runners the subscriptions need, forget finished ones, drop deleted subscriptions' rows."""
        wanted: dict[tuple[str, int], Subscription] = {}
        with self.live.read() as state:  # the fold may add a subscription while we look
            subs = list(state.subscriptions.values())
        for sub in subs:
            if sub.status == "deleted" and sub.key not in self._dropped and not self._running(sub.key):
                # Only once its runners stopped (below, then a later look): a step in flight writes again.
                self.store.drop(sub.key)
                self._dropped.add(sub.key)
            if sub.status == "active":
                for shard_id in self.selector.shards(sub.shard_count):
                    wanted[(sub.key, shard_id)] = sub
        for key, runner in list(self.runners.items()):
            if not runner.thread.is_alive() or key not in wanted or runner.shape != layout_of(wanted[key]):
                runner.stopping.set()
                if not runner.thread.is_alive():
                    del self.runners[key]
        for key, sub in wanted.items():
            if key not in self.runners:
                runner = self.runners[key] = ShardRunner(self.live, self.store, sub, key[1], self.render, self.poll_s)
                runner.start()
