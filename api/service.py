"""The service behind the HTTP API and the CLI: validated writes to the log, reads from a live BuildState.

Reads come from an in-memory BuildState kept current by tailing the log, so
several API processes can serve one database. Every write returns the seq it
landed at; a read given `min_seq` first catches up to at least that seq
(read-your-writes across processes). Errors are domain exceptions
(`NotFound`, `Conflict`, `InvalidInput`, `TooLarge`) that the HTTP layer turns
into problem+json and the CLI into one line.
"""

from __future__ import annotations

import threading
import time
import uuid as uuidlib
from bisect import bisect_left, bisect_right
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterator
from heapq import merge
from itertools import islice, takewhile
from typing import Any

from google.protobuf.json_format import MessageToDict
from google.protobuf.message import Message
from prometheus_client import CollectorRegistry, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from partbuild.api import models as m
from partbuild.api.audit import AuditInputError, audit
from partbuild.orchestrator.graph import Graph, GraphError, Job
from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.build_state import BuildState
from partbuild.state.collector import settle_loaded_state
from partbuild.state.events import Clock, envelope, manual, wall_clock_ms
from partbuild.state.model import TERMINAL_WANT_STATES, InstanceState, JobRunState, WantState
from partbuild.state.model import Instance as InstanceRecord
from partbuild.state.model import JobRun as JobRunRecord
from partbuild.state.model import Want as WantRecord
from partbuild.state.queries import lineage, ref_history
from partbuild.state.replay import checkpoint, load_state, replay_into, state_as_of
from partbuild.state.store import AppendConflict, EventLog, SnapshotStore, parse_event

MAX_TREE_NODES = 1_000
MAX_WRITE_ATTEMPTS = 20
WAITING_DEPTH = 4


class NotFound(LookupError):
    """No such want, instance, ref or job run."""


class Conflict(Exception):
    """Valid input, but not a valid next step in the current state (e.g. cancel a finished want)."""


class InvalidInput(ValueError):
    """Input that can never be accepted (unknown producer, bad seq, ...)."""


class TooLarge(InvalidInput):
    """A batch over the limits."""


class Service:
    """Validated writes and consistent reads over one event log."""

    def __init__(
        self,
        log: EventLog,
        *,
        graph: Graph | None = None,
        snapshots: SnapshotStore | None = None,
        clock: Clock = wall_clock_ms,
        on_append: Callable[[], None] | None = None,
        progress: Callable[[int], None] | None = None,
        snapshot_every: int = 0,
    ) -> None:
        self.log = log
        self.graph = graph
        self.snapshots = snapshots if snapshots is not None else SnapshotStore(log.engine)
        self.clock = clock
        self.on_append = on_append or (lambda: None)
        self._lock = threading.RLock()  # guards the state: folding and multi-step reads
        self._write_lock = threading.Lock()  # in-process writers take turns
        self.state, self.loaded = load_state(log, self.snapshots, progress=progress)
        # Servers (not one-shot CLI reads, which may have read-only access) snapshot now and on stop
        # when far enough past the newest snapshot, so their restarts replay a short tail.
        self.snapshot_every = snapshot_every
        checkpoint(self.state, self.snapshots, snapshot_every)
        settle_loaded_state()
        self._as_of: OrderedDict[int, BuildState] = OrderedDict()
        # Creation-ordered ids with their seqs, for cursor paging by bisection.
        self._want_ids: list[str] = []
        self._want_seqs: list[int] = []
        self._run_ids: list[str] = []
        self._run_seqs: list[int] = []
        self._sorted_refs: list[str] = []
        self._pending_refs: list[str] = []
        self._known_refs = 0
        self._index_new_entities()
        self._stop = threading.Event()
        self._tailer: threading.Thread | None = None
        self.registry = CollectorRegistry()
        self.append_seconds = Histogram(
            "partbuild_append_seconds", "Time to append a batch of events to the log", registry=self.registry
        )
        self.catch_up_seconds = Histogram(
            "partbuild_catch_up_seconds", "Time to fold newly appended events (replay latency)", registry=self.registry
        )
        self.registry.register(_StateCollector(self))

    # ----------------------------------------------------------------- keeping the state current

    def refresh(self) -> int:
        """Fold whatever was appended since the last refresh; returns how many events."""
        with self._lock:
            started = time.perf_counter()
            count = replay_into(self.state, self.log)
            if count:
                self.catch_up_seconds.observe(time.perf_counter() - started)
                self._index_new_entities()
            return count

    def start_tailing(self, interval_s: float = 0.05) -> None:
        """Keep the state current in the background (other processes append too)."""
        if self._tailer is None:
            self._tailer = threading.Thread(target=self._tail, args=(interval_s,), name="partbuild-tail", daemon=True)
            self._tailer.start()

    def stop(self) -> None:
        """Stop tailing; snapshot the state if it is far past the newest snapshot."""
        self._stop.set()
        if self._tailer is not None:
            self._tailer.join(timeout=5)
        with self._lock:
            checkpoint(self.state, self.snapshots, self.snapshot_every)

    def _tail(self, interval_s: float) -> None:
        while not self._stop.wait(interval_s):
            try:
                self.refresh()
            except Exception:  # a database hiccup must not kill the reader; the next tick retries
                time.sleep(interval_s)

    def _index_new_entities(self) -> None:
        state = self.state
        for ids, seqs, table in (
            (self._want_ids, self._want_seqs, state.wants),
            (self._run_ids, self._run_seqs, state.job_runs),
        ):
            new = len(table) - len(ids)
            if new > 0:
                # Dicts keep insertion (= creation) order: the new entries are the last ones.
                fresh = [key for key, _ in zip(reversed(table), range(new), strict=False)][::-1]
                ids.extend(fresh)
                seqs.extend(table[key].created_seq for key in fresh)
        new_refs = len(state.canonical) - self._known_refs
        if new_refs > 0:
            self._pending_refs.extend(ref for ref, _ in zip(reversed(state.canonical), range(new_refs), strict=False))
            self._known_refs = len(state.canonical)

    def _read(self, min_seq: int | None = None) -> BuildState:
        """The live state, caught up to at least `min_seq` when given."""
        if min_seq is not None and min_seq > self.state.head_seq:
            self.refresh()
            if min_seq > self.state.head_seq:
                raise InvalidInput(f"min_seq {min_seq} is after the log head {self.state.head_seq}")
        return self.state

    def _state_at(self, as_of_seq: int | None, min_seq: int | None = None) -> BuildState:
        """The live state, or the state as it was right after `as_of_seq`."""
        state = self._read(min_seq)
        if as_of_seq is not None and as_of_seq > state.head_seq:
            # Another process may have appended since we last caught up: the past we are
            # asked about may be our future.
            self.refresh()
            state = self.state
            if as_of_seq > state.head_seq:
                raise InvalidInput(f"as_of_seq {as_of_seq} is after the log head {state.head_seq}")
        if as_of_seq is None or as_of_seq == state.head_seq:
            return state
        if as_of_seq < 0:
            raise InvalidInput("as_of_seq must not be negative")
        with self._lock:
            past = self._as_of.get(as_of_seq)
            if past is None:
                past = state_as_of(self.log, self.snapshots, as_of_seq)
                self._as_of[as_of_seq] = past
                while len(self._as_of) > 4:
                    self._as_of.popitem(last=False)
            else:
                self._as_of.move_to_end(as_of_seq)
            return past

    # ----------------------------------------------------------------- writes

    def _write(self, build: Callable[[BuildState], list[pb.Event]]) -> tuple[int, int]:
        """Check a write against the newest state and append it only if nobody appended in between.

        `build` validates the request against the state (raising NotFound, Conflict,
        InvalidInput) and returns its events. The append is guarded by the head the
        check saw, so a write is all or nothing and never records an event the fold
        would reject; when another process appended first, catch up and check again.
        In-process writers take turns, so they never conflict with each other.
        """
        with self._write_lock:
            for _ in range(MAX_WRITE_ATTEMPTS):
                self.refresh()
                with self._lock:
                    events = build(self.state)
                    head = self.state.head_seq
                started = time.perf_counter()
                try:
                    result = self.log.append(events, expected_head=head)
                except AppendConflict:
                    continue
                self.append_seconds.observe(time.perf_counter() - started)
                self.refresh()
                self.on_append()
                reason = self._rejection(result.first_seq, result.last_seq)
                if reason is not None:  # a check missing above: say so rather than pretend success
                    raise Conflict(reason)
                return result.first_seq, result.last_seq
        raise Conflict(f"other writers kept appending during {MAX_WRITE_ATTEMPTS} attempts; try again")

    def _rejection(self, first: int, last: int) -> str | None:
        """The reason the fold rejected an event we appended at first..last, if it did."""
        for rejection in reversed(self.state.rejections):
            if rejection.seq < first:
                break
            if rejection.seq <= last:
                return rejection.reason
        return None

    def _check_producible(self, ref: str) -> Job | None:
        if self.graph is None:
            return None
        try:
            producer = self.graph.resolve(ref).producer
        except GraphError as exc:
            raise InvalidInput(str(exc)) from None
        return producer if isinstance(producer, Job) else None

    def validate_wants(self, requests: list[m.WantRequest]) -> m.Validated:
        """Check wants as `create_wants` would, without recording anything."""
        self.refresh()
        with self._lock:
            return self._check_wants(self.state, requests)

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
                self._check_producible(ref)
        return m.Validated(wants=len(requests), refs=total)

    def create_wants(self, requests: list[m.WantRequest], user: str) -> m.WantBatchCreated:
        """Record wants in one append: all or none."""
        ids = [request.want_id or f"want-{uuidlib.uuid4().hex}" for request in requests]
        source = manual(user)

        def build(state: BuildState) -> list[pb.Event]:
            self._check_wants(state, requests)
            now = self.clock()
            return [
                envelope(
                    pb.WantCreate(
                        want_id=want_id,
                        partition_refs=request.refs,
                        data_timestamp_ms=request.data_timestamp_ms or 0,
                        ttl_seconds=request.ttl_seconds,
                        sla_seconds=request.sla_seconds,
                        comment=request.comment,
                    ),
                    source=source,
                    timestamp_ms=now,
                )
                for request, want_id in zip(requests, ids, strict=True)
            ]

        first, last = self._write(build)
        created = [
            m.WantCreated(want_id=want_id, seq=first + offset, state=_name(self.state.wants[want_id].state))
            for offset, want_id in enumerate(ids)
        ]
        return m.WantBatchCreated(first_seq=first, last_seq=last, wants=created)

    def cancel_want(self, want_id: str, reason: str, user: str) -> m.Written:
        def build(state: BuildState) -> list[pb.Event]:
            want = self._want(state, want_id)
            if want.state in TERMINAL_WANT_STATES:
                raise Conflict(f"want {want_id!r} is already {_name(want.state)}")
            return [self._event(pb.WantCancel(want_id=want_id, reason=reason), user)]

        return m.Written(seq=self._write(build)[0])

    def taint(self, request: m.TaintRequest, user: str) -> m.Written:
        def build(state: BuildState) -> list[pb.Event]:
            instance = state.canonical_instance(request.ref)
            if instance is None:
                raise NotFound(f"partition {request.ref!r} has no instance")
            if instance.state != InstanceState.LIVE:
                raise Conflict(
                    f"partition {request.ref!r} is {_name(instance.state)}; only a Live partition can be tainted"
                )
            taint = pb.PartitionTaint(
                partition_ref=request.ref, reason=request.reason, only_this_ref=request.only_this_ref
            )
            return [self._event(taint, user)]

        return m.Written(seq=self._write(build)[0])

    def observe(self, request: m.ObserveRequest, user: str) -> m.Written:
        job = self._check_producible(request.ref)
        if job is not None:
            raise InvalidInput(f"{request.ref!r} is built by job {job.label!r}; only source partitions are observed")

        def build(state: BuildState) -> list[pb.Event]:
            current = state.canonical_instance(request.ref)
            if current is not None and current.state in (InstanceState.BUILDING, InstanceState.UPSTREAM_BUILDING):
                raise Conflict(f"partition {request.ref!r} is being built by a job run; it cannot also be observed")
            if current is not None and current.state == InstanceState.LIVE and current.location == request.location:
                raise Conflict(f"partition {request.ref!r} is already Live at {request.location!r}")
            observed = pb.PartitionObserved(
                partition_ref=request.ref,
                location=request.location,
                row_count=request.row_count,
                bytes=request.bytes,
                metadata=request.metadata,
            )
            return [self._event(observed, user)]

        return m.Written(seq=self._write(build)[0])

    def _event(self, payload: Message, user: str) -> pb.Event:
        return envelope(payload, source=manual(user), timestamp_ms=self.clock())

    # ----------------------------------------------------------------- reads: wants

    def _want(self, state: BuildState, want_id: str) -> WantRecord:
        want = state.wants.get(want_id)
        if want is None:
            raise NotFound(f"no want {want_id!r}")
        return want

    def want(self, want_id: str, min_seq: int | None = None) -> m.WantDetail:
        with self._lock:
            state = self._read(min_seq)
            want = self._want(state, want_id)
            budget = [MAX_TREE_NODES]
            return m.WantDetail(
                **want_out(want, self.clock()).model_dump(),
                refs_status=[_ref_status(state, ref, WAITING_DEPTH, set()) for ref in want.refs],
                tree=_tree(state, want, budget),
            )

    def wants(
        self,
        *,
        state_filter: m.WantStateName | None = None,
        ref: str | None = None,
        root: str | None = None,
        cursor: str | None = None,
        limit: int = 100,
        min_seq: int | None = None,
    ) -> m.Page[m.Want]:
        _check_limit(limit)
        with self._lock:
            state = self._read(min_seq)
            after = _seq_cursor(cursor)
            if ref is not None:
                ids: Iterator[str] = (i for i in state.wants_by_ref.get(ref, ()) if state.wants[i].created_seq > after)
            else:
                ids = iter(self._want_ids[bisect_right(self._want_seqs, after) :])
            wanted = _want_state(state_filter)
            now = self.clock()
            matching = (
                state.wants[want_id]
                for want_id in ids
                if (wanted is None or state.wants[want_id].state == wanted)
                and (root is None or state.wants[want_id].root_want_id == root)
            )
            items = [want_out(want, now) for want in islice(matching, limit)]
            return _page(items, limit, lambda w: str(w.created_seq))

    # ----------------------------------------------------------------- reads: partitions

    def canonical(self, ref: str, as_of_seq: int | None = None, min_seq: int | None = None) -> m.Instance:
        with self._lock:
            state = self._state_at(as_of_seq, min_seq)
            instance = state.canonical_instance(ref)
            if instance is None:
                suffix = f" as of seq {as_of_seq}" if as_of_seq is not None else ""
                raise NotFound(f"partition {ref!r} has no instance{suffix}")
            return instance_out(instance)

    def history(self, ref: str, as_of_seq: int | None = None, min_seq: int | None = None) -> list[m.Instance]:
        with self._lock:
            state = self._state_at(as_of_seq, min_seq)
            found = ref_history(state, ref)
            if not found:
                raise NotFound(f"partition {ref!r} has no instance")
            return [instance_out(instance) for instance in found]

    def instance(self, uuid: str, as_of_seq: int | None = None, min_seq: int | None = None) -> m.Instance:
        with self._lock:
            state = self._state_at(as_of_seq, min_seq)
            instance = state.instances.get(uuid)
            if instance is None:
                raise NotFound(f"no partition instance {uuid!r}")
            return instance_out(instance)

    def lineage(
        self,
        uuid: str,
        *,
        direction: str = "both",
        depth: int = 1,
        as_of_seq: int | None = None,
        min_seq: int | None = None,
    ) -> m.Lineage:
        if direction not in ("upstream", "downstream", "both"):
            raise InvalidInput("direction must be upstream, downstream or both")
        if not 0 <= depth <= m.MAX_LINEAGE_DEPTH:
            raise InvalidInput(f"depth must be between 0 and {m.MAX_LINEAGE_DEPTH}")
        with self._lock:
            state = self._state_at(as_of_seq, min_seq)
            if uuid not in state.instances:
                raise NotFound(f"no partition instance {uuid!r}")
            graph = lineage(state, uuid, direction=direction, depth=depth)  # type: ignore[arg-type]
            nodes = [
                m.LineageNode(
                    uuid=node_uuid,
                    ref=node.ref if node else None,
                    state=_name(node.state) if node else None,
                    depth=graph.depth_of[node_uuid],
                    built_by=node.built_by if node else None,
                )
                for node_uuid, node in graph.nodes.items()
            ]
            edges = [m.LineageEdge(input=a, output=b) for a, b in dict.fromkeys(graph.edges)]
            return m.Lineage(root=uuid, as_of_seq=state.head_seq, nodes=nodes, edges=edges)

    def partitions(
        self,
        *,
        prefix: str = "",
        state_filter: m.InstanceStateName | None = None,
        cursor: str | None = None,
        limit: int = 100,
        min_seq: int | None = None,
    ) -> m.Page[m.Instance]:
        """Canonical instances ordered by ref, optionally under a prefix and in one state."""
        _check_limit(limit)
        with self._lock:
            state = self._read(min_seq)
            refs = self._refs_in_order()
            start = bisect_left(refs, prefix)
            if cursor is not None:
                start = max(start, bisect_right(refs, cursor))
            wanted = InstanceState[state_filter.upper()] if state_filter else None
            under_prefix = takewhile(lambda ref: ref.startswith(prefix), islice(refs, start, None))
            instances = (state.instances[state.canonical[ref]] for ref in under_prefix)
            matching = (instance for instance in instances if wanted is None or instance.state == wanted)
            items = [instance_out(instance) for instance in islice(matching, limit)]
            return _page(items, limit, lambda i: i.ref)

    def _refs_in_order(self) -> list[str]:
        if self._pending_refs:
            self._sorted_refs = list(merge(self._sorted_refs, sorted(self._pending_refs)))
            self._pending_refs = []
        return self._sorted_refs

    # ----------------------------------------------------------------- reads: job runs, events, audit

    def job_run(self, job_run_id: str, min_seq: int | None = None) -> m.JobRun:
        with self._lock:
            state = self._read(min_seq)
            run = state.job_runs.get(job_run_id)
            if run is None:
                raise NotFound(f"no job run {job_run_id!r}")
            return job_run_out(state, run)

    def job_runs(
        self,
        *,
        state_filter: m.JobRunStateName | None = None,
        job: str | None = None,
        cursor: str | None = None,
        limit: int = 100,
        min_seq: int | None = None,
    ) -> m.Page[m.JobRun]:
        _check_limit(limit)
        with self._lock:
            state = self._read(min_seq)
            wanted = JobRunState[state_filter.upper()] if state_filter else None
            runs = (
                state.job_runs[run_id] for run_id in self._run_ids[bisect_right(self._run_seqs, _seq_cursor(cursor)) :]
            )
            matching = (
                run for run in runs if (wanted is None or run.state == wanted) and (job is None or run.job_label == job)
            )
            items = [job_run_out(state, run) for run in islice(matching, limit)]
            return _page(items, limit, lambda r: str(r.created_seq))

    def events(self, after_seq: int = 0, limit: int = 100) -> m.Page[m.StoredEvent]:
        if after_seq < 0 or not 1 <= limit <= m.MAX_PAGE:
            raise InvalidInput(f"after_seq must be >= 0 and limit between 1 and {m.MAX_PAGE}")
        items = [
            m.StoredEvent(
                seq=row.seq,
                event_id=row.event_id,
                event_type=row.event_type,
                recorded_at_ms=row.recorded_at_ms,
                event=MessageToDict(parse_event(row.payload), preserving_proto_field_name=True),
            )
            for row in self.log.read(after_seq, limit)
        ]
        return _page(items, limit, lambda e: str(e.seq))

    def audit(self, rejected_limit: int = 100, as_of_seq: int | None = None, verify: bool = False) -> m.Audit:
        """Replay the log (to `as_of_seq`), optionally verifying against a full replay from seq 0."""
        try:
            report = audit(self.log, self.snapshots, as_of=as_of_seq, verify=verify, rejected_limit=rejected_limit)
        except AuditInputError as exc:
            raise InvalidInput(str(exc).replace("--as-of", "as_of_seq")) from None
        return m.Audit(
            head_seq=report.head_seq,
            state_seq=report.state_seq,
            digest=report.digest,
            counts=report.counts,
            rejected_total=report.rejected_total,
            rejected=[m.Rejected(seq=r.seq, event_type=r.event_type, reason=r.reason) for r in report.rejected],
            snapshot_seq=report.snapshot_seq,
            replayed_events=report.replayed_events,
            seconds=report.seconds,
            verified=report.verified,
            problems=report.problems,
        )

    def health(self) -> m.Health:
        return m.Health(status="ok", head_seq=self.log.head(), state_seq=self.state.head_seq)


# ----------------------------------------------------------------- conversions


def _name(state: InstanceState | WantState | JobRunState) -> Any:
    return state.name.lower()


def want_out(want: WantRecord, now_ms: int) -> m.Want:
    deadline = want.sla_deadline_ms
    return m.Want(
        want_id=want.want_id,
        refs=list(want.refs),
        state=_name(want.state),
        created_seq=want.created_seq,
        updated_seq=want.updated_seq,
        created_ms=want.created_ms,
        data_timestamp_ms=want.data_timestamp_ms,
        ttl_seconds=want.ttl_seconds,
        sla_seconds=want.sla_seconds,
        expires_at_ms=want.expires_at_ms,
        sla_deadline_ms=deadline,
        sla_breached=deadline is not None and want.state != WantState.SUCCESSFUL and now_ms > deadline,
        comment=want.comment,
        source=want.source,
        parent_want_id=want.parent_want_id,
        root_want_id=want.root_want_id,
        children=list(want.children or ()),
        satisfied_by=list(want.satisfied_by),
        cancel_reason=want.cancel_reason,
    )


def instance_out(instance: InstanceRecord) -> m.Instance:
    return m.Instance(
        uuid=instance.uuid,
        ref=instance.ref,
        state=_name(instance.state),
        canonical=not instance.superseded_seq,
        created_seq=instance.created_seq,
        updated_seq=instance.updated_seq,
        superseded_seq=instance.superseded_seq or None,
        previous_uuid=instance.previous_uuid,
        built_by=instance.built_by,
        attempts=list(instance.attempts),
        inputs=list(instance.inputs),
        consumers=list(instance.consumers or ()),
        location=instance.location,
        row_count=instance.row_count,
        byte_count=instance.byte_count,
        metadata=dict(instance.metadata or {}),
        waiting_on=list(instance.waiting_on or ()),
        note=instance.note,
    )


def job_run_out(state: BuildState, run: JobRunRecord) -> m.JobRun:
    instances = [state.instances.get(uuid) for uuid in run.instance_uuids]
    first = instances[0] if instances else None
    attempt = first.attempts.index(run.job_run_id) + 1 if first and run.job_run_id in first.attempts else 1
    return m.JobRun(
        job_run_id=run.job_run_id,
        job_label=run.job_label,
        state=_name(run.state),
        instance_uuids=list(run.instance_uuids),
        refs=[instance.ref for instance in instances if instance is not None],
        created_seq=run.created_seq,
        updated_seq=run.updated_seq,
        created_ms=run.created_ms,
        updated_ms=run.updated_ms,
        last_heartbeat_ms=run.last_heartbeat_ms,
        attempt=attempt,
        inputs=list(run.inputs),
        error_class=run.error_class,
        error_message=run.error_message,
        retry_after_ms=run.retry_after_ms,
        missing_refs=list(run.missing_refs),
        cancel_reason=run.cancel_reason,
    )


def _ref_status(state: BuildState, ref: str, depth: int, seen: set[str]) -> m.RefStatus:
    """Where `ref` stands and, while it waits, where the refs it waits for stand (to `depth`)."""
    instance = state.canonical_instance(ref)
    if instance is None:
        return m.RefStatus(ref=ref, instance_uuid=None, state=None)
    status = m.RefStatus(ref=ref, instance_uuid=instance.uuid, state=_name(instance.state))
    if instance.waiting_on and depth > 0 and ref not in seen:
        seen.add(ref)
        status.waiting_on = [_ref_status(state, upstream, depth - 1, seen) for upstream in instance.waiting_on]
    return status


def _tree(state: BuildState, want: WantRecord, budget: list[int]) -> m.WantTree:
    """The want and its derivative wants, at most MAX_TREE_NODES nodes in all."""
    budget[0] -= 1
    children = []
    for child_id in want.children or ():
        if budget[0] <= 0:
            break
        children.append(_tree(state, state.wants[child_id], budget))
    return m.WantTree(want_id=want.want_id, state=_name(want.state), refs=list(want.refs), children=children)


def _want_state(name: str | None) -> WantState | None:
    return WantState[name.upper()] if name else None


def _seq_cursor(cursor: str | None) -> int:
    if cursor is None or cursor == "":
        return 0
    if not (cursor.isascii() and cursor.isdigit()):  # "²".isdigit() is true, and int() refuses it
        raise InvalidInput(f"cursor {cursor!r} is not one this API returned")
    return int(cursor)


def _check_limit(limit: int) -> None:
    if not 1 <= limit <= m.MAX_PAGE:
        raise InvalidInput(f"limit must be between 1 and {m.MAX_PAGE}, got {limit}")


def _page(items: list[Any], limit: int, key: Callable[[Any], str]) -> m.Page[Any]:
    return m.Page(items=items, next_cursor=key(items[-1]) if len(items) == limit else None)


def _duplicates(values: list[str]) -> set[str]:
    return {value for value, count in Counter(values).items() if count > 1}


class _StateCollector(Collector):
    """Prometheus gauges read from the live state at scrape time."""

    def __init__(self, service: Service) -> None:
        self.service = service

    def collect(self) -> Iterator[GaugeMetricFamily]:
        state = self.service.state
        for name, enum, counts, label in (
            ("partbuild_wants", WantState, state.want_counts, "Wants by state"),
            ("partbuild_job_runs", JobRunState, state.run_counts, "Job runs by state"),
            ("partbuild_instances", InstanceState, state.instance_counts, "Partition instances by state"),
        ):
            family = GaugeMetricFamily(name, label, labels=["state"])
            for member in enum:
                family.add_metric([member.name.lower()], counts[member])
            yield family
        head = GaugeMetricFamily("partbuild_log_head_seq", "Seq of the newest event folded into the served state")
        head.add_metric([], state.head_seq)
        yield head
