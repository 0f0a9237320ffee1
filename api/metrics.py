"""Prometheus metrics of a serving process: latencies measured by the service, counts read from the state."""

from __future__ import annotations

import threading
import weakref
from collections import Counter
from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from partbuild.api.delivery_progress import delivery_progress
from partbuild.state.database import Database
from partbuild.state.fold.build_state import BuildState
from partbuild.state.fold.group import FENCE_REJECTION_KINDS, fence_rejection_kind
from partbuild.state.fold.reaction_notes import ReactionRow, reaction_key, split_reaction_key
from partbuild.state.fold.reactions import KIND_NAMES
from partbuild.state.fold.records import InstanceState, JobRunState, WantState
from partbuild.state.log.live import LiveState
from partbuild.state.store.reader import StoreReader


class Metrics:
    """One registry per service: append and catch-up latencies, state gauges read at scrape time."""

    def __init__(self, live: LiveState | None, db: Database, *, store: StoreReader | None = None) -> None:
        """The gauges of `live`; where reads come from the state store `store` reads (a read replica, which has
        no live state; a working set, whose live state holds its small records but not every instance), the
        counts are the store's and the small records' gauges the live state's."""
        self.registry = CollectorRegistry()
        self.append_seconds = Histogram(
            "partbuild_append_seconds", "Time to append a batch of events to the log", registry=self.registry
        )
        self.catch_up_seconds = Histogram(
            "partbuild_catch_up_seconds", "Time to fold newly appended events (replay latency)", registry=self.registry
        )
        if store is not None:
            self.registry.register(_StoreCollector(store))
        else:
            assert live is not None, "a service serves a live state or the state store"
            self.registry.register(_StateCollector(live))
        if live is None:
            return
        self.registry.register(_CheckCollector(live))
        if live.working is not None:
            self.registry.register(_WorkingSetCollector(live))
        self.registry.register(_GroupCollector(live))
        self.registry.register(_SourceCollector(live))
        self.registry.register(_SubscriptionCollector(live, db))
        self.registry.register(_AutomationCollector(live))


class _StateCollector(Collector):
    """Gauges of wants, job runs and instances by state, and the folded head."""

    def __init__(self, live: LiveState) -> None:
        self.live = live

    def collect(self) -> Iterator[GaugeMetricFamily]:
        state = self.live.state
        yield from _state_gauges(state.counts(), state.head_seq)


def _state_gauges(counts: dict[str, dict[str, int]], head_seq: int) -> Iterator[GaugeMetricFamily]:
    """Wants, job runs and instances by state (`BuildState.counts()`' shape) and the seq they are of."""
    for metric, kind, enum, label in _STATE_GAUGES:
        family = GaugeMetricFamily(metric, label, labels=["state"])
        for member in enum:
            family.add_metric([member.name.lower()], counts.get(kind, {}).get(member.name.lower(), 0))
        yield family
    head = GaugeMetricFamily("partbuild_log_head_seq", "Seq of the newest event folded into the served state")
    head.add_metric([], head_seq)
    yield head


_STATE_GAUGES = (
    ("partbuild_wants", "wants", WantState, "Wants by state"),
    ("partbuild_job_runs", "job_runs", JobRunState, "Job runs by state"),
    ("partbuild_instances", "instances", InstanceState, "Partition instances by state"),
)


class _StoreCollector(Collector):
    """A read replica's gauges: the counts by state and the seq of the state store it reads (the gauges of
    groups, sources, subscriptions, checks and automation are the folding servers')."""

    def __init__(self, store: StoreReader) -> None:
        self.store = store

    def collect(self) -> Iterator[GaugeMetricFamily]:
        self.store.catch_up()
        head = self.store.head_seq
        yield from _state_gauges(self.store.store.counts(head) or {}, head)


class _WorkingSetCollector(Collector):
    """A working set's size (records held in memory, and gone cold to the store's rows) and how many times it
    was loaded again (it could not read a record back as of its head: `LiveState.load_again`)."""

    def __init__(self, live: LiveState) -> None:
        self.live = live

    def collect(self) -> Iterator[Metric]:
        with self.live.read():
            working, loads = self.live.working, self.live.loads
            assert working is not None  # (registered for a working set, which stays one when loaded again)
            held, cold = working.sizes()
        records = GaugeMetricFamily(
            "partbuild_working_set_records", "Records of the working set's kinds, by where they are", labels=["where"]
        )
        records.add_metric(["memory"], held)
        records.add_metric(["store"], cold)
        yield records
        again = CounterMetricFamily("partbuild_working_set_loaded_again", "Times the working set was loaded again")
        again.add_metric([], loads - 1)
        yield again


class _AutomationCollector(Collector):
    """Schedules and reactions: whose last tick failed, firings owed and fired, firings that could not fire."""

    def __init__(self, live: LiveState) -> None:
        self.live = live

    def collect(self) -> Iterator[Metric]:
        state = self.live.state
        failing = GaugeMetricFamily(
            "partbuild_schedule_last_tick_failed", "1 if the schedule's last tick wanted nothing: its function failed",
            labels=["schedule"],
        )  # fmt: skip
        for name, row in sorted(state.schedules.items()):
            failing.add_metric([name], 1 if row.last_error else 0)
        yield failing
        labels = ["job", "reaction"]
        owed = GaugeMetricFamily("partbuild_reaction_pending", "Firings a reaction owes", labels=labels)
        fired = CounterMetricFamily("partbuild_reaction_fired", "Wants the reaction made", labels=labels)
        failed = CounterMetricFamily("partbuild_reaction_failed", "Firings that could not fire", labels=labels)
        pending: Counter[str] = Counter(reaction_key(row.job, row.kind) for row in state.reaction_pending.values())
        for key in sorted({*state.reactions, *pending}):
            job, kind = split_reaction_key(key)
            reaction = state.reactions.get(key) or ReactionRow()
            names = [job, KIND_NAMES[kind]]
            owed.add_metric(names, pending[key])
            fired.add_metric(names, reaction.fired)
            failed.add_metric(names, reaction.failed)
        yield from (owed, fired, failed)


class _GroupCollector(Collector):
    """Worker groups: members and epochs of each, and decisions the fold refused for their fences.

    Fence rejections are counted from the fold's rejections (the only record of them: a
    rejected event changes nothing else), incrementally: each scrape reads only the new ones.
    """

    def __init__(self, live: LiveState) -> None:
        self.live = live
        self._lock = threading.Lock()
        self._counted: weakref.ref[BuildState] | None = None  # the state whose rejections were counted
        self._seen = 0
        self._fenced = dict.fromkeys(FENCE_REJECTION_KINDS, 0)

    def _count_fenced(self, state: BuildState) -> dict[str, int]:
        """Rejections of fenced decisions by the rule they broke, counting only those not seen before."""
        with self._lock:
            rejections = state.rejections
            if self._counted is None or self._counted() is not state or len(rejections) < self._seen:
                self._counted, self._seen = weakref.ref(state), 0
                self._fenced = dict.fromkeys(FENCE_REJECTION_KINDS, 0)
            for rejection in rejections[self._seen :]:
                kind = fence_rejection_kind(rejection.reason)
                if kind is not None:
                    self._fenced[kind] += 1
            self._seen = len(rejections)
            return dict(self._fenced)

    def collect(self) -> Iterator[Metric]:
        members = GaugeMetricFamily("partbuild_group_members", "Members of each worker group's epoch", labels=["group"])
        epochs = CounterMetricFamily(
            "partbuild_group_epochs", "Epochs of each worker group so far (membership changes + 1)", labels=["group"]
        )
        unowned = GaugeMetricFamily(
            "partbuild_group_buckets_without_owner",
            "Buckets of each worker group being handed off (shared, not picked up yet)",
            labels=["group"],
        )
        with self.live.read() as state:
            for name in sorted(state.groups):
                group = state.groups[name]
                members.add_metric([name], len(group.members))
                epochs.add_metric([name], group.epochs)
                unowned.add_metric([name], group.bucket_total - len(group.owners))
            fenced = self._count_fenced(state)
        rejected = CounterMetricFamily(
            "partbuild_group_fenced_rejections",
            "Decisions of worker-group members the fold rejected for their fence, by the rule broken",
            labels=["reason"],
        )
        for kind, count in fenced.items():
            rejected.add_metric([kind], count)
        yield from (members, epochs, unowned, rejected)


class _CheckCollector(Collector):
    """Quality check results by job, check and result (passed, warning, failed, errored), recorded by job-run
    outcomes and by the checks run again on Live instances (`ChecksRerun`): the fold's tally
    (`BuildState.check_totals`), kept whole or working set alike, so a restarted process counts the same."""

    def __init__(self, live: LiveState) -> None:
        self.live = live

    def collect(self) -> Iterator[Metric]:
        with self.live.read() as state:
            totals = sorted(state.check_totals.items())
        family = CounterMetricFamily(
            "partbuild_check_results",
            "Quality check results recorded by job-run outcomes and checks run again, by job, check and result",
            labels=["job", "check", "result"],
        )
        for (job, check, result), count in totals:
            family.add_metric([job, check, result], count)
        yield family


class _SourceCollector(Collector):
    """Source scans, from the fold's record of each source: so every process serving the log agrees."""

    def __init__(self, live: LiveState) -> None:
        self.live = live

    def collect(self) -> Iterator[Metric]:
        label = ["source"]
        items = CounterMetricFamily(
            "partbuild_source_items_scanned", "Items listed by scans of each source", labels=label
        )
        found = CounterMetricFamily(
            "partbuild_source_partitions_found", "Complete partitions found by scans of each source", labels=label
        )
        errors = CounterMetricFamily(
            "partbuild_source_scan_errors", "Scan slices of each source that ended in an error", labels=label
        )
        passes = GaugeMetricFamily(
            "partbuild_source_scan_passes_done", "Finished passes of each source's scan", labels=label
        )
        number = GaugeMetricFamily(
            "partbuild_source_scan_pass", "The current (or last) pass of each source's scan", labels=label
        )
        with self.live.read() as state:
            for name in sorted(state.sources):
                scan = state.sources[name]
                items.add_metric([name], scan.items_total)
                found.add_metric([name], scan.partitions_total)
                errors.add_metric([name], scan.errors_total)
                passes.add_metric([name], scan.passes_done)
                number.add_metric([name], scan.pass_number)
        yield from (items, found, errors, passes, number)


class _SubscriptionCollector(Collector):
    """Webhook deliveries of each subscription, read from the database rows every delivering process shares."""

    def __init__(self, live: LiveState, db: Database) -> None:
        self.live = live
        self.db = db

    def collect(self) -> Iterator[Metric]:
        label = ["subscription"]
        delivered = CounterMetricFamily("partbuild_subscription_delivered", "Messages delivered (2xx)", labels=label)
        retried = CounterMetricFamily(
            "partbuild_subscription_retried",
            "Failed deliveries that went to (or stayed in) the retry queue",
            labels=label,
        )
        dead = CounterMetricFamily(
            "partbuild_subscription_dead_lettered", "Messages moved to the dead-letter queue", labels=label
        )
        lag = GaugeMetricFamily("partbuild_subscription_lag_events", "Log events not yet handled", labels=label)
        lag_s = GaugeMetricFamily(
            "partbuild_subscription_lag_seconds", "How long the oldest unhandled event has waited", labels=label
        )
        queued = GaugeMetricFamily(
            "partbuild_subscription_queued", "Messages waiting in the RQ or the DLQ", labels=["subscription", "queue"]
        )
        with self.live.read() as state:
            subs = [sub for sub in state.subscriptions.values() if sub.status != "deleted"]
            head = state.head_seq
        for sub in sorted(subs, key=lambda s: s.name):
            shown = delivery_progress(sub, self.db, head)
            delivered.add_metric([sub.name], shown.delivered)
            retried.add_metric([sub.name], shown.retried)
            dead.add_metric([sub.name], shown.dead_lettered)
            lag.add_metric([sub.name], shown.lag_events)
            lag_s.add_metric([sub.name], shown.lag_seconds)
            queued.add_metric([sub.name, "rq"], shown.rq_messages)
            queued.add_metric([sub.name, "dlq"], shown.dlq_messages)
        yield from (delivered, retried, dead, lag, lag_s, queued)
