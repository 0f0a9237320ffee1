"""The run loop: read state, decide, append, act.

Each step folds new events into the in-memory state, appends the decisions
(stale runs failed, derivative wants, waits, job runs) in one batch guarded by
the head it decided on, looks for wanted source data, and dispatches the runs
the fold accepted (sources with a discovery are scanned by a `SourceScanner`
thread meanwhile). Only accepted JobRunBuffer events are dispatched: if another
writer got there first the append conflicts and the step is simply redone on
the newer state. A step also stops the runs the log ended (canceled, or failed as
stale elsewhere), appends a `ClockTick` when a want's TTL ran out, and, with a
`RetentionPolicy`, an `InstanceRetention`, and the ticks of the graph's schedules
that came due (`Ticker`, orchestrator/ticks.py; the loop sleeps no later than the
next) and the firings of the jobs' reactions (`Reactor`, orchestrator/reactions.py); with
jobs that publish, the `Publisher` then brings their catalog tables up to the state it
folded (orchestrator/publish.py); it hands pending checks requests (a job's checks run
again on a Live instance) to a `ChecksRerunner` thread (orchestrator/rechecks.py). A
worker with an `Ownership` (a static bucket, or a worker group's `GroupOwnership` with
its `GroupWorker` thread) decides, fails stale runs, ticks schedules, fires reactions,
scans sources and answers checks requests only for what it owns.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import cached_property
from typing import Any

from partbuild.orchestrator.buckets import Ownership, StaticBucket, start_bucket
from partbuild.orchestrator.decide import (
    Decision,
    SourceCheck,
    decide,
    ended_runs,
    owes_retries,
    plan_run,
    stale_runs,
)
from partbuild.orchestrator.errors import first_line
from partbuild.orchestrator.executor import JobExecutor
from partbuild.orchestrator.graph import Graph
from partbuild.orchestrator.group.ownership import GroupOwnership
from partbuild.orchestrator.group.steps import GroupConfig
from partbuild.orchestrator.group.worker import GroupWorker
from partbuild.orchestrator.helpers import Helper, StepOf
from partbuild.orchestrator.identity import ORCHESTRATOR, WORKER_ID
from partbuild.orchestrator.publish import Publisher
from partbuild.orchestrator.reactor import ReactionScope, Reactor, everything
from partbuild.orchestrator.rechecks import ChecksRerunner
from partbuild.orchestrator.retention import RetentionPolicy, retention_event
from partbuild.orchestrator.run_logs import RUN_LOG_MAX_AGE_MS, RUN_LOG_PRUNE_EVERY_MS, RunLogWriter
from partbuild.orchestrator.sources.scanner import SourceScanner
from partbuild.orchestrator.supervisor import StateLoadedAgain
from partbuild.orchestrator.ticks import Ticker
from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.database import Database
from partbuild.state.fold.build_state import BuildState
from partbuild.state.fold.cold import ReadBackRefused
from partbuild.state.fold.records import InstanceState, JobRunState
from partbuild.state.log.events import Clock, envelope, wall_clock_ms
from partbuild.state.log.live import LiveState
from partbuild.state.log.replay import DEFAULT_SNAPSHOT_EVERY, LoadReport
from partbuild.state.log.store import AppendConflict, SnapshotStore, WriteNotDone
from partbuild.state.rules.bucketing import BucketingConfig

logger = logging.getLogger("partbuild.orchestrator")

# While steps keep finding nothing, the poll for other processes' appends backs off, doubling this many times
# (to 8 poll intervals): this process's own appends (its runs ending, the scanner, the group) wake the loop at
# once, and on two cores every idle step is time taken from the Spark jobs in flight.
POLL_BACKOFF_DOUBLINGS = 3


@dataclass(frozen=True)
class LoopSettings:
    """How an orchestrator runs: every field's default suits one process on one machine."""

    clock: Clock = wall_clock_ms
    poll_interval_s: float = 0.05  # how often the log is polled when nothing wakes the loop (SQLite)
    heartbeat_interval_s: float = 5.0  # a running job run's heartbeats
    heartbeat_timeout_s: float = 30.0  # a run silent this long is failed as stale
    source_check_interval_s: float = 2.0  # how often wanted source partitions are looked for
    max_workers: int | None = None  # job run threads (None: the jobs' concurrencies added up)
    listen_timeout_s: float = 1.0  # PostgreSQL: the longest wait for an append notification
    snapshot_every: int = DEFAULT_SNAPSHOT_EVERY
    retention: RetentionPolicy | None = None  # `--retain-days`
    ownership: StaticBucket | None = None  # a fixed bucket to decide for
    bucketing: BucketingConfig | None = None  # `run --bucket-*`: the bucket, chosen at start
    group: GroupConfig | None = None  # a worker group to join


class Orchestrator:
    """Turns wants recorded in the log into job runs, and job runs into built partitions."""

    def __init__(
        self,
        db: Database,
        graph: Graph,
        *,
        warehouse: str,
        spark: object = None,
        live: LiveState | None = None,
        snapshots: SnapshotStore | None = None,
        settings: LoopSettings | None = None,
        **overrides: Any,
    ) -> None:
        """Orchestrate `graph` over `db`, writing to `warehouse`; how it runs: `settings`, any field of which a
        keyword of the same name overrides (`poll_interval_s=0.01`; an unknown name is a TypeError)."""
        self.settings = settings = replace(settings or LoopSettings(), **overrides)
        clock, group = settings.clock, settings.group
        self.db = db
        self.log = log = db.log
        self.graph = graph
        self.warehouse = warehouse
        self.clock = clock
        self.poll_interval_s = settings.poll_interval_s
        self.heartbeat_timeout_ms = int(settings.heartbeat_timeout_s * 1000)
        self.source_check_interval_ms = int(settings.source_check_interval_s * 1000)
        # The process's one state: shared (`up`: its owner checkpoints it) or our own (snapshotted).
        self._owns_live = live is None
        self.live = live or LiveState(log, use_snapshots=snapshots is not None, snapshot_every=settings.snapshot_every)
        self._loads = self.live.loads  # the state's load this orchestrator decides on (`step`)
        self._wake = threading.Event()
        # PostgreSQL pushes appends from any process; elsewhere the loop polls every poll_interval_s.
        self._listener = log.append_listener()
        self.listen_timeout_s = settings.listen_timeout_s
        self._next_due_ms: int | None = None
        self._quiet_steps = 0  # steps in a row that folded nothing and did nothing: the poll backs off
        self.retention = settings.retention
        # Decide only for the refs of this bucket (None: all). `run --bucket-*` makes one now (round-robin
        # records the bucket after the log's last one); a group member decides for the buckets it owns.
        bucketing = settings.bucketing
        self.ownership: Ownership | None = (
            settings.ownership if bucketing is None else start_bucket(bucketing, self.live, log, clock)
        )
        self.group = self._join(group) if group is not None else None
        self._pending: list[str] = []  # runs we buffered, dispatched once the fold accepted them
        self._last_source_check: dict[str, int] = {}
        self._source_checks_due_ms = 0  # no wanted source partition needs looking at before then
        # The last decision and the head it was made on: with nothing folded since and no retry
        # due, deciding again gives the same answer, so idle steps skip the O(active refs) work.
        self._last_decision: tuple[int, Decision] | None = None
        self.run_log_max_age_ms = RUN_LOG_MAX_AGE_MS  # the run logs' age cap
        self._run_logs_pruned_ms = 0
        self.executor = self._executor(spark, settings.max_workers, settings.heartbeat_interval_s)
        self._start_helpers()
        if self.group is not None:
            self.group.start()  # last: heartbeats from here on, so nothing slow may follow

    def _start_helpers(self) -> None:
        """What acts beside the decisions: the schedules' ticker, the tables' publisher, the source scanner."""
        self.ticker = Ticker(self.graph, self.clock)  # orchestrator/ticks.py
        self.reactor = Reactor(self.graph)  # orchestrator/reactor.py
        self.publisher = Publisher.for_graph(self.graph, self.executor.spark, self.warehouse)  # None: no job publishes
        self.scanner = SourceScanner(
            self.log,
            self.live,
            [*self.graph.sources.values()],
            owns=self._owns_source,
            clock=self.clock,
            digests=self.db.content_digests,
            records=self.db.changes.records,
        )
        self.scanner.on_append = self.wake
        self.scanner.start()
        self._pin_what_helpers_walk()

    def _pin_what_helpers_walk(self) -> None:
        """A working set keeps the records created after the seqs the publisher and the stale index last
        walked from (state/fold/cold.py `created_since`), and the publisher finds its cold refs in the rows."""
        working = self.live.working
        if working is None:
            return
        publisher, reactor = self.publisher, self.reactor
        if publisher is not None:
            publisher.records = self.db.changes.records
            working.pins["publisher"] = lambda: publisher.seen_seq
        if reactor.code_change:
            working.pins["stale runs"] = lambda: reactor.stale.seen

    def _executor(self, spark: object, max_workers: int | None, heartbeat_interval_s: float) -> JobExecutor:
        """The job runner: as many threads as the jobs' concurrencies add up to, unless told."""
        workers = max_workers or max(1, sum(job.max_concurrency for job in self.graph.jobs.values()))
        return JobExecutor(
            spark,
            self._append_from_run,
            resolve=self.live_instance,
            max_workers=workers,
            heartbeat_interval_s=heartbeat_interval_s,
            clock=self.clock,
            on_finished=self.wake,
            run_logs=RunLogWriter(self.db.run_logs, clock=self.clock),
        )

    @cached_property
    def helpers(self) -> list[Helper]:
        """What acts beside the decisions after each step's append (orchestrator/helpers.py), in this order."""
        found: list[Helper] = [StepOf("run logs", self._prune_run_logs)]
        publisher = self.publisher
        if publisher is not None:
            found.append(StepOf("publisher", lambda now: bool(publisher.step(self.live))))
        found.append(StepOf("rechecks", lambda now: self.rechecks.step(), owes=lambda: self.rechecks.busy()))
        return found

    def _prune_run_logs(self, now: int) -> bool:
        """The run logs' age cap (orchestrator/run_logs.py), at most once per `RUN_LOG_PRUNE_EVERY_MS`."""
        if now < self._run_logs_pruned_ms + RUN_LOG_PRUNE_EVERY_MS:
            return False
        self._run_logs_pruned_ms = now
        try:
            self.db.run_logs.prune(now - self.run_log_max_age_ms)
        except Exception:  # lines only: the next prune tries again
            logger.warning("could not prune the run logs", exc_info=True)
        return False  # pruning is housekeeping: it keeps no loop awake

    @cached_property
    def rechecks(self) -> ChecksRerunner:
        """Checks run again on Live instances when the log asks (orchestrator/rechecks.py), for the refs it owns.

        Made at its first use (a step, `is_idle` or `close`, all on the loop's thread).
        """
        spark = self.executor.spark
        return ChecksRerunner(
            self.log,
            self.live,
            self.graph,
            open_spark=spark.get,
            owns=self._owns_source,
            clock=self.clock,
            on_append=self.wake,
        )

    def _join(self, group: GroupConfig) -> GroupWorker:
        """Member of `group` (started at the end of __init__): decide for the buckets it owns.

        As WORKER_ID: the fold accepts a fenced decision only from the task the event's source names.
        """
        self.ownership = GroupOwnership(group.name, WORKER_ID)
        return GroupWorker(self.db, self.live, group, WORKER_ID, clock=self.clock, on_change=self.wake)

    def _owns_key(self, state: BuildState) -> Callable[[str], bool]:
        """Whether this worker acts for a key (a source, a schedule): alone, every one; else its bucket's owner."""
        if self.ownership is None:
            return _everything
        return self.ownership.at(state).owns

    def _reaction_scope(self, state: BuildState) -> ReactionScope:
        """The refs this worker's reactions act for, and the keys of their cursors (alone: every ref, key "")."""
        if self.ownership is None:
            return everything()
        return self.ownership.at(state).reaction_scope()

    def _owns_source(self, state: BuildState, key: str) -> bool:
        """Whether this worker scans a source: every worker alone; in a set split by bucket or a group, one owner."""
        return self.ownership is None or self.ownership.at(state).owns(key)

    def wake(self) -> None:
        """Something was appended in this process: step now rather than after the poll interval."""
        self._wake.set()

    def _append_from_run(self, events: list[pb.Event]) -> None:
        self.log.append(events)

    @property
    def state(self) -> BuildState:
        """The live state (unlocked: for counts and tests)."""
        return self.live.state

    @property
    def loaded(self) -> LoadReport:
        return self.live.loaded

    def catch_up(self) -> int:
        """Fold events appended since the last step (by anyone); returns how many."""
        folded = self.live.catch_up()
        if folded and self.group is not None:
            self.group.poke()  # an epoch or a share may be ours to answer
        return folded

    def _check_member(self) -> None:
        """A group member declared dead stops deciding at once (its buckets are being handed on)."""
        if self.group is not None and self.group.dead is not None:
            raise self.group.dead

    def live_instance(self, ref: str) -> tuple[str, str] | None:
        """(UUID, location) of the canonical instance of `ref` if it is Live; safe from job threads."""
        with self.live.read() as state:
            instance = state.canonical_instance(ref)
            if instance is None or instance.state != InstanceState.LIVE or not instance.location:
                return None
            return instance.uuid, instance.location

    def step(self) -> bool:
        """One round of read, decide, append, act. Returns whether anything happened.

        Raises `StateLoadedAgain` once the live state was loaded again (a working set that could not read a
        record back, ever: `LiveState.load_again`, here when a decision's read was the one refused)."""
        loads = self._loads
        try:
            busy = self._step()
        except ReadBackRefused as exc:
            self.live.load_again(exc, loads=loads)
            raise StateLoadedAgain(f"the working set was loaded again: {first_line(str(exc))}") from exc
        if self.live.loads != loads:
            raise StateLoadedAgain("the working set was loaded again while this orchestrator folded")
        return busy

    def _step(self) -> bool:
        self._check_member()
        folded = self.catch_up()
        self._stop_runs_the_log_ended()
        now = self.clock()
        alive = [*self.executor.running_ids(), *self._pending]
        cutoff = self.retention.cutoff_due(self.log, now) if self.retention is not None else 0
        with self.live.read() as state:
            reacting = self.reactor.declared or bool(state.reaction_pending)
            scope, cursors, head = self._reaction_scope(state), dict(state.reaction_cursors), state.head_seq
        if reacting:  # the events folded since the last step, read outside the state's lock
            self.reactor.read(self.log, head, scope, cursors)
        with self.live.read() as state:
            events = stale_runs(state, self.graph, now, self.heartbeat_timeout_ms, alive, self.ownership)
            events += self.ticker.due(state, now, self._owns_key(state), ORCHESTRATOR)
            events += self.reactor.due(state, now, scope.owns, ORCHESTRATOR, scope)
            decision = self._decide(state, now)
            events += decision.events
            if cutoff and (dropping := retention_event(state, cutoff, now)) is not None:
                events.append(dropping)
            expiry = state.next_expiry_ms()
            decided_on = state.head_seq
        if not events and expiry is not None and expiry <= now:
            events.append(envelope(pb.ClockTick(), source=ORCHESTRATOR, timestamp_ms=now))
        if events:
            self._check_member()
            try:
                self.log.append(events, expected_head=decided_on)
            except (AppendConflict, WriteNotDone):
                # Another writer appended since we read, or a write-lock bound ended our append (we sat
                # frozen in it, or waited too long): nothing was written; decide again on the newer state.
                return True
            self.reactor.appended()  # its firings were tried: the fold accepted or rejected them
            self._pending.extend(decision.new_runs)
            self.catch_up()
            if isinstance(self.ownership, StaticBucket):  # layout changed meanwhile: our runs were rejected, so stop
                with self.live.read() as state:
                    self.ownership.check_layout(state)
        observed = self._look_for_sources(decision.source_checks, now)
        dispatched = self._dispatch()
        helped = [helper.step(now) for helper in self.helpers]  # each one, whatever the others did
        due_times = [decision.next_retry_ms, self.live.state.next_expiry_ms(), self.ticker.next_due_ms]
        due_times += [self.reactor.next_due_ms, *(helper.next_due_ms() for helper in self.helpers)]
        self._next_due_ms = min((t for t in due_times if t is not None), default=None)
        busy = bool(events) or observed or dispatched or any(helped)
        self._quiet_steps = 0 if busy or folded else self._quiet_steps + 1
        return busy

    def _stop_runs_the_log_ended(self) -> None:
        """Stop the runs in flight here that the fold has ended (O(runs in flight), not O(all runs)).

        Canceled by an operator, or failed as stale by another worker while this process was
        paused: either way the run records nothing more (the fold would reject it). A canceled
        run's instances were replaced by fresh ones (other locations), rebuilt at once here or
        anywhere; a run failed as stale (or canceled in an older log) leaves its instances to be
        built again, and the executor keeps a rebuild of those in this process from starting
        until the ended run's thread has returned.
        """
        with self.live.read() as state:
            ended = ended_runs(state, self.executor.running_ids())
        for run_id, how in ended.items():
            if self.executor.cancel(run_id):
                logger.info("job run %s was %s in the log: stopping it", run_id, how.name.lower())

    def _decide(self, state: BuildState, now: int) -> Decision:
        """`decide` on the state, or the previous decision if deciding again cannot differ."""
        head = state.head_seq
        if self._last_decision is not None:
            decided_at, last = self._last_decision
            retry_due = last.next_retry_ms is not None and last.next_retry_ms <= now
            # A decision with events was appended (moving the head) or failed to be: decide again.
            if decided_at == head and not last.events and not retry_due:
                return last
        decision = decide(state, self.graph, now, self.ownership)
        self._last_decision = (head, decision)
        self._source_checks_due_ms = 0  # the checks may have changed: look at them on this step
        return decision

    def _look_for_sources(self, checks: list[SourceCheck], now: int) -> bool:
        """Append PartitionObserved for wanted source partitions that have appeared."""
        if now < self._source_checks_due_ms:
            return False
        found = []
        interval = self.source_check_interval_ms
        due = None
        for check in checks:
            if check.source.locate is None:  # discovered by the scanner, not asked for
                continue
            last = self._last_source_check.get(check.ref)
            if last is not None and now - last < interval:
                due = last + interval if due is None else min(due, last + interval)
                continue
            self._last_source_check[check.ref] = now
            due = now + interval if due is None else min(due, now + interval)
            try:
                location = check.source.locate(check.partition)
            except Exception:
                logger.exception("presence check of %s failed", check.ref)
                continue
            if location is not None:
                observed = pb.PartitionObserved(partition_ref=check.ref, location=location)
                found.append(envelope(observed, source=ORCHESTRATOR, timestamp_ms=now))
        self._source_checks_due_ms = due if due is not None else 0
        if not found:
            return False
        self._check_member()
        try:
            self.log.append(found)
        except WriteNotDone:  # a write-lock bound ended the append (we sat frozen in it): look again next step
            for event in found:
                self._last_source_check.pop(event.partition_observed.partition_ref, None)
            self._source_checks_due_ms = 0
            return False
        return True

    def _dispatch(self) -> bool:
        with self.live.read() as state:
            plans = [
                plan_run(state, self.graph, run_id, self.warehouse)
                for run_id in self._pending
                if (run := state.job_runs.get(run_id)) is not None and run.state == JobRunState.QUEUED
            ]
        self._pending.clear()
        for plan in plans:
            self.executor.submit(plan)
        return bool(plans)

    def is_idle(self) -> bool:
        """Nothing left to do here: no active wants, no job runs in flight, no retry a split batch owes.

        A worker with a bucket is idle when nothing in its bucket can progress without the
        others: deciding again appends nothing, looks for no source data, expects no
        retry, and no run of its bucket is in flight. (Its wants may wait for upstream
        refs of other buckets: a round-robin run from cron then exits, and the next
        bucket's run builds them.)
        """
        if self.executor.running_ids() or self._pending or any(helper.busy() for helper in self.helpers):
            return False
        with self.live.read() as state:
            if self.reactor.owes(state, self._reaction_scope(state).owns):  # pending or debouncing: not idle
                return False
            if self.ownership is None:
                return not state.has_active_wants() and not state.active_run_ids and not owes_retries(state)
            decision = self._decide(state, self.clock())
            if decision.events or decision.source_checks or decision.next_retry_ms is not None:
                return False
            scope = self.ownership.at(state)
            return not any(scope.owns_run(state, state.job_runs[run_id]) for run_id in state.active_run_ids)

    def run(self, stop: threading.Event) -> None:
        """Step until `stop` is set, then let the runs in flight finish and record their outcomes."""
        try:
            while not stop.is_set():
                if not self.step():
                    self._wait()
        finally:
            self.close()

    def run_until_idle(self, timeout_s: float = 600.0, stop: threading.Event | None = None) -> bool:
        """Step until idle, `timeout_s` or `stop`; returns whether it became idle (batch runs, tests, benchmarks)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and not (stop is not None and stop.is_set()):
            busy = self.step()
            if self.is_idle():
                return True
            if not busy:
                self._wait()
        return False

    def close(self) -> None:
        """Stop scanning and taking runs; wait for those in flight and fold their outcomes; leave the group."""
        self.scanner.stop()
        self.rechecks.close()
        self.executor.shutdown(wait=True)
        if self.group is not None:  # after the runs: until they end, their buckets stay ours
            self.group.stop()
        self.catch_up()
        if self.publisher is not None:  # the outcomes just folded
            self.publisher.step(self.live)
        if self._owns_live:
            self.live.close()
        if self._listener is not None:
            self._listener.close()
            self._listener = None

    def _wait(self) -> None:
        """Sleep until something may have changed: an append, a wake-up, or a retry/expiry coming due."""
        if self._listener is None or self._wake.is_set():
            backed_off = self.poll_interval_s * 2 ** min(self._quiet_steps, POLL_BACKOFF_DOUBLINGS)
            # Never below the poll interval (as before): a due time already past is the next step's to handle.
            self._wake.wait(max(self.poll_interval_s, self._until_due(backed_off)))
        else:
            self._listener.wait(self._until_due(self.listen_timeout_s))
        self._wake.clear()

    def _until_due(self, timeout_s: float) -> float:
        """`timeout_s`, or less when a retry, an expiry, a tick or a reaction comes due sooner."""
        if self._next_due_ms is None:
            return timeout_s
        return min(timeout_s, max(0.0, (self._next_due_ms - self.clock()) / 1000))


def _everything(key: str) -> bool:
    return True
