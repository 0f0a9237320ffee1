"""The service's writes: each checks the request against the newest state, then appends its events.

A write is all or nothing: `build` validates against the state (raising the
domain errors of `partbuild.api.errors`) and returns the events, and the append
is guarded by the head the check saw. When another process appended in
between, the write catches up and checks again, so it never records an event
the fold would reject.
"""

from __future__ import annotations

import threading
import time
import uuid as uuidlib
from collections import Counter
from collections.abc import Callable

from google.protobuf.message import Message

from partbuild.api import models as m
from partbuild.api.convert import name
from partbuild.api.errors import Conflict, InvalidInput, NotFound, TooLarge
from partbuild.api.metrics import Metrics
from partbuild.api.source_view import source_out
from partbuild.api.surface import ANONYMOUS
from partbuild.orchestrator.graph import Graph, GraphError, Job, SourceDataset
from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.fold.build_state import BuildState
from partbuild.state.fold.records import ACTIVE_RUN_STATES, TERMINAL_WANT_STATES, InstanceState
from partbuild.state.log.events import Clock, envelope, manual
from partbuild.state.log.live import LiveState
from partbuild.state.log.store import AppendConflict, EventLog
from partbuild.state.rules.retention import cutoff_seq_before, cutoff_sparing_active_runs, retention_candidates

MAX_WRITE_ATTEMPTS = 20
DAY_MS = 86_400_000
RETENTION_LISTED = 1_000

Build = Callable[[BuildState], list[pb.Event]]


class Writes:
    """Validated appends to the log (mixed into `Service`)."""

    log: EventLog
    live: LiveState
    graph: Graph | None
    clock: Clock
    metrics: Metrics
    on_append: Callable[[], None]
    _write_lock: threading.Lock

    def _write(self, build: Build) -> tuple[int, int]:
        """Append what `build` makes of the newest state, only if nobody appended in between.

        In-process writers take turns, so they never conflict with each other.
        """
        with self._write_lock:
            for _ in range(MAX_WRITE_ATTEMPTS):
                self.live.catch_up()
                with self.live.read() as state:
                    events = build(state)
                    head = state.head_seq
                started = time.perf_counter()
                try:
                    result = self.log.append(events, expected_head=head)
                except AppendConflict:
                    continue
                self.metrics.append_seconds.observe(time.perf_counter() - started)
                self.live.catch_up()
                self.on_append()
                with self.live.read() as state:
                    reason = state.rejection_between(result.first_seq, result.last_seq)
                if reason is not None:  # a check missing above: say so rather than pretend success
                    raise Conflict(reason)
                return result.first_seq, result.last_seq
        raise Conflict(f"other writers kept appending during {MAX_WRITE_ATTEMPTS} attempts; try again")

    def _event(self, payload: Message, user: str) -> pb.Event:
        return envelope(payload, source=manual(user), timestamp_ms=self.clock())

    def _producer(self, ref: str) -> Job | None:
        """The job that builds `ref` (None for source data or without a graph); InvalidInput if none can."""
        if self.graph is None:
            return None
        try:
            producer = self.graph.resolve(ref).producer
        except GraphError as exc:
            raise InvalidInput(str(exc)) from None
        return producer if isinstance(producer, Job) else None

    # ----------------------------------------------------------------- wants

    def validate_wants(self, request: m.WantBatchRequest) -> m.Validated:
        """Check wants as `create_wants` would, without recording anything."""
        self.live.catch_up()
        with self.live.read() as state:
            return self._check_wants(state, request.wants)

    def _check_wants(self, state: BuildState, requests: list[m.WantRequest]) -> m.Validated:
        total = sum(len(request.refs) for request in requests)
        if total > m.MAX_BATCH_REFS:
            raise TooLarge(f"the batch names {total} refs; at most {m.MAX_BATCH_REFS} per request")
        given = [request.want_id for request in requests if request.want_id]
        for want_id in given:
            if want_id in state.wants:
                raise Conflict(f"want {want_id!r} already exists")
        if len(set(given)) != len(given):
            raise Conflict(f"want ids given more than once: {sorted(_duplicates(given))[:3]}")
        for request in requests:
            if len(set(request.refs)) != len(request.refs):
                raise InvalidInput(f"a want lists a ref more than once: {sorted(_duplicates(request.refs))[:3]}")
            for ref in request.refs:
                self._producer(ref)
        return m.Validated(wants=len(requests), refs=total)

    def create_want(self, request: m.WantRequest, user: str = ANONYMOUS) -> m.WantCreated:
        return self.create_wants(m.WantBatchRequest.model_construct(wants=[request]), user).wants[0]

    def create_wants(self, request: m.WantBatchRequest, user: str = ANONYMOUS) -> m.WantBatchCreated:
        """Record wants in one append: all or none."""
        requests = request.wants
        ids = [want.want_id or f"want-{uuidlib.uuid4().hex}" for want in requests]
        source = manual(user)

        def build(state: BuildState) -> list[pb.Event]:
            self._check_wants(state, requests)
            now = self.clock()
            return [
                envelope(_want_create(want, want_id), source=source, timestamp_ms=now)
                for want, want_id in zip(requests, ids, strict=True)
            ]

        first, last = self._write(build)
        with self.live.read() as state:
            created = [
                m.WantCreated(want_id=want_id, seq=first + offset, state=name(state.wants[want_id].state))
                for offset, want_id in enumerate(ids)
            ]
        return m.WantBatchCreated(first_seq=first, last_seq=last, wants=created)

    def cancel_want(self, want_id: str, request: m.CancelRequest | None = None, user: str = ANONYMOUS) -> m.Written:
        def build(state: BuildState) -> list[pb.Event]:
            want = state.wants.get(want_id)
            if want is None:
                raise NotFound(f"no want {want_id!r}")
            if want.state in TERMINAL_WANT_STATES:
                raise Conflict(f"want {want_id!r} is already {name(want.state)}")
            return [self._event(pb.WantCancel(want_id=want_id, reason=_reason(request)), user)]

        return m.Written(seq=self._write(build)[0])

    # ----------------------------------------------------------------- partitions

    def taint(self, request: m.TaintRequest, user: str = ANONYMOUS) -> m.Written:
        def build(state: BuildState) -> list[pb.Event]:
            instance = state.canonical_instance(request.ref)
            if instance is None:
                raise NotFound(f"partition {request.ref!r} has no instance")
            if instance.state != InstanceState.LIVE:
                raise Conflict(
                    f"partition {request.ref!r} is {name(instance.state)}; only a Live partition can be tainted"
                )
            taint = pb.PartitionTaint(
                partition_ref=request.ref, reason=request.reason, only_this_ref=request.only_this_ref
            )
            return [self._event(taint, user)]

        return m.Written(seq=self._write(build)[0])

    def observe(self, request: m.ObserveRequest, user: str = ANONYMOUS) -> m.Written:
        job = self._producer(request.ref)
        if job is not None:
            raise InvalidInput(f"{request.ref!r} is built by job {job.label!r}; only source partitions are observed")

        def build(state: BuildState) -> list[pb.Event]:
            observed = pb.PartitionObserved(
                partition_ref=request.ref,
                location=request.location,
                row_count=request.row_count,
                bytes=request.bytes,
                metadata=request.metadata,
                version=request.version.value if request.version else "",
                version_strong=request.version.strong if request.version else False,
            )
            event = self._event(observed, user)
            reason = state.problem(event)  # the fold's own rules: being built, already Live with this version...
            if reason is not None:
                raise Conflict(reason)
            return [event]

        return m.Written(seq=self._write(build)[0])

    # ----------------------------------------------------------------- job runs and retention

    def cancel_job_run(
        self, job_run_id: str, request: m.CancelRequest | None = None, user: str = ANONYMOUS
    ) -> m.Written:
        """Record a JobRunCancel; the orchestrator running it stops its Spark work when it folds it."""

        def build(state: BuildState) -> list[pb.Event]:
            run = state.job_runs.get(job_run_id)
            if run is None:
                raise NotFound(f"no job run {job_run_id!r}")
            if run.state not in ACTIVE_RUN_STATES:
                raise Conflict(f"job run {job_run_id!r} is already {name(run.state)}")
            return [self._event(pb.JobRunCancel(job_run_id=job_run_id, reason=_reason(request)), user)]

        return m.Written(seq=self._write(build)[0])

    def retention(self, request: m.RetentionRequest, user: str = ANONYMOUS) -> m.RetentionReport:
        """Drop superseded instances created more than `retain_days` ago (or only say which)."""
        cutoff = cutoff_seq_before(self.log, self.clock() - request.retain_days * DAY_MS)
        with self.live.read() as state:
            # Spare what a queued or running job may still name as an input: its success would be rejected.
            cutoff = cutoff_sparing_active_runs(state, cutoff)
            doomed = [instance.uuid for instance in retention_candidates(state, cutoff)]
        listed = doomed[:RETENTION_LISTED]
        report = m.RetentionReport(
            cutoff_seq=cutoff, dropped=len(doomed), instances=listed, seq=None, dry_run=request.dry_run
        )
        if request.dry_run or not doomed:
            return report

        def build(state: BuildState) -> list[pb.Event]:
            event = pb.InstanceRetention(drop_superseded_created_before_seq=cutoff)
            return [self._event(event, user)]

        report.seq = self._write(build)[0]
        return report

    # ----------------------------------------------------------------- source scans

    def scan_source(self, name: str, user: str = ANONYMOUS) -> m.ScanRequested:
        """Ask for a source to be scanned again now: its next pass begins at once, or when the current one ends."""
        declared = self.graph.sources.get(name) if self.graph is not None else None

        def build(state: BuildState) -> list[pb.Event]:
            if name not in state.sources:
                _check_scannable(name, declared, self.graph is not None)
            event = self._event(pb.SourceScanRequest(source=name, reason=f"asked for by {user}"), user)
            reason = state.problem(event)  # the fold's own rules (the name)
            if reason is not None:
                raise Conflict(reason)
            return [event]

        seq = self._write(build)[0]
        with self.live.read() as state:
            source = source_out(name, declared, state.sources.get(name))
        return m.ScanRequested(seq=seq, source=source)

    # ----------------------------------------------------------------- buckets

    def reshard(self, request: m.ReshardRequest, user: str = ANONYMOUS) -> m.Written:
        """Split a namespace into `bucket_total` buckets: workers still on another total are rejected."""

        def build(state: BuildState) -> list[pb.Event]:
            layout = state.bucket_layouts.get(request.namespace)
            if layout is not None and layout[0] == request.bucket_total:
                raise Conflict(
                    f"namespace {request.namespace!r} is already split into {request.bucket_total} buckets "
                    f"(since seq {layout[1]})"
                )
            return [self._event(pb.BucketLayout(namespace=request.namespace, bucket_total=request.bucket_total), user)]

        return m.Written(seq=self._write(build)[0])


def _want_create(request: m.WantRequest, want_id: str) -> pb.WantCreate:
    return pb.WantCreate(
        want_id=want_id,
        partition_refs=request.refs,
        data_timestamp_ms=request.data_timestamp_ms or 0,
        ttl_seconds=request.ttl_seconds,
        sla_seconds=request.sla_seconds,
        comment=request.comment,
    )


def _check_scannable(name: str, declared: SourceDataset | None, has_graph: bool) -> None:
    """NotFound unless the graph has `name` as a source with a discovery (the log has no scan of it)."""
    if declared is None:
        if has_graph:
            raise NotFound(f"no source dataset {name!r}: neither the served graph nor the log has one of that name")
        raise NotFound(f"no source dataset {name!r}: the log has no scan of it (and this service has no graph)")
    if declared.discovery is None:
        raise NotFound(f"source dataset {name!r} has no discovery: it is found by locate only, nothing scans it")


def _reason(request: m.CancelRequest | None) -> str:
    return request.reason if request is not None else ""


def _duplicates(values: list[str]) -> set[str]:
    return {value for value, count in Counter(values).items() if count > 1}
