"""BuildState: the pure, deterministic fold of the event log.

`BuildState.apply(seq, event)` is the only place where state changes. It reads
no clock, does no I/O and draws no random numbers: instance UUIDs come from the
log position and time comes from the events themselves. An event that is not a
valid next step is recorded as a `Rejection` with a reason and changes nothing
else, so any sequence of events replays without raising (which is what makes
several concurrent writers safe: the fold arbitrates).

Want states are kept current incrementally: each active want holds a tally of
its refs' canonical instance states, adjusted whenever a canonical instance
changes state or the canonical pointer moves, so no transition ever scans all
of a want's refs or all wants.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Iterator
from sys import intern
from typing import Any

from google.protobuf.message import DecodeError

from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.ids import instance_uuid
from partbuild.state.model import (
    ACTIVE_RUN_STATES,
    BUILDABLE_INSTANCE_STATES,
    RETRYABLE_BY_NEW_WANT,
    Instance,
    InstanceState,
    JobRun,
    JobRunState,
    Rejection,
    Want,
    WantState,
)
from partbuild.state.refs import ref_problem

MAX_ID_LENGTH = 256

# Module-level aliases: the replay hot path avoids enum attribute lookups.
_MISSING = InstanceState.MISSING
_BUILDING = InstanceState.BUILDING
_UPSTREAM_BUILDING = InstanceState.UPSTREAM_BUILDING
_UP_FOR_RETRY = InstanceState.UP_FOR_RETRY
_LIVE = InstanceState.LIVE
_FAILED = InstanceState.FAILED
_UPSTREAM_FAILED = InstanceState.UPSTREAM_FAILED
_TAINTED = InstanceState.TAINTED
_TALLY_SIZE = len(InstanceState)
_PERMANENT = pb.ERROR_CLASS_PERMANENT


def derive_want_state(tally: list[int], ref_count: int) -> WantState:
    """A want's state from how many of its refs' canonical instances are in each state.

    Priority (seed 003): any Failed, any UpstreamFailed, all Live, any Building,
    any UpstreamBuilding, else Idle (Missing and UpForRetry wait to be scheduled).
    """
    if tally[_FAILED]:
        return WantState.FAILED
    if tally[_UPSTREAM_FAILED]:
        return WantState.UPSTREAM_FAILED
    if tally[_LIVE] == ref_count:
        return WantState.SUCCESSFUL
    if tally[_BUILDING]:
        return WantState.BUILDING
    if tally[_UPSTREAM_BUILDING]:
        return WantState.UPSTREAM_BUILDING
    return WantState.IDLE


def describe_source(event: pb.Event) -> str:
    """A compact label of who appended the event: manual:<user>, job_run:<id>, system:<component>."""
    kind = event.source.WhichOneof("kind")
    if kind == "manual":
        return f"manual:{event.source.manual.user}"
    if kind == "job_run":
        return f"job_run:{event.source.job_run.job_run_id}"
    if kind == "system":
        return f"system:{event.source.system.component}"
    return ""


def _id_problem(what: str, value: str) -> str | None:
    if not value:
        return f"{what} is empty"
    if len(value) > MAX_ID_LENGTH:
        return f"{what} is longer than {MAX_ID_LENGTH} characters"
    return None


def _short(text: str) -> str:
    """A ref or id quoted for a rejection reason, cut so one bad event cannot bloat the state."""
    return repr(text if len(text) <= 120 else text[:117] + "...")


class BuildState:
    """Everything partbuild knows, as of `head_seq`; rebuilt by folding the log."""

    def __init__(self, *, strict: bool = False) -> None:
        self.head_seq = 0
        # The log's clock: the largest timestamp of an applied event (ms since epoch).
        self.clock_ms = 0
        self.instances: dict[str, Instance] = {}
        self.canonical: dict[str, str] = {}  # ref -> UUID of its current instance
        self.wants: dict[str, Want] = {}
        self.job_runs: dict[str, JobRun] = {}
        self.active_run_ids: dict[str, None] = {}  # queued or running, oldest first
        self.rejections: list[Rejection] = []
        # Inverted indexes, so every lookup is O(1) or O(result).
        # Job runs by instance and consumers by input instance live on each Instance
        # (`attempts`, `consumers`): O(1) by UUID without a dict entry per instance.
        self.wants_by_ref: dict[str, list[str]] = {}
        # Dicts used as ordered sets: iteration order must not depend on string hashing.
        self._active_wants_by_ref: dict[str, dict[str, None]] = {}
        self._waiters: dict[str, dict[str, None]] = {}  # upstream ref -> instances waiting for it
        self._superseded: list[str] = []  # non-canonical instances still held (retention candidates)
        self._expiry: list[tuple[int, int, str]] = []  # heap of (expires_at_ms, created_seq, want_id)
        self.instance_counts = [0] * len(InstanceState)
        self.want_counts = [0] * len(WantState)
        self.run_counts = [0] * len(JobRunState)
        self.dropped_instances = 0
        # Tests set strict=True so a bug in a handler raises instead of becoming a rejection.
        self.strict = strict

    # ----------------------------------------------------------------- applying events

    def apply(self, seq: int, event: pb.Event) -> str | None:
        """Fold one event in. Returns None when applied, else the rejection reason."""
        if seq <= self.head_seq:
            raise ValueError(f"seq {seq} is not after head seq {self.head_seq}")
        self.head_seq = seq
        kind = event.WhichOneof("payload")
        handler = _HANDLERS.get(kind) if kind is not None else None
        if handler is None:
            reason: str | None = "event has no payload of a type this version knows"
        else:
            try:
                reason = handler(self, seq, getattr(event, kind), event)
            except Exception as exc:  # a bug; replay must still never raise
                if self.strict:
                    raise
                reason = f"internal error while applying: {exc!r}"
        if reason is not None:
            self.rejections.append(Rejection(seq, kind or "none", reason))
            return reason
        # Only applied events move the clock: a rejected event with a wild timestamp expires nothing.
        if event.timestamp_ms > self.clock_ms:
            self.clock_ms = event.timestamp_ms
        if self._expiry and self._expiry[0][0] <= self.clock_ms:
            self._expire_due(seq)
        return None

    def apply_payload(self, seq: int, payload: bytes, scratch: pb.Event | None = None) -> str | None:
        """Parse and fold one stored event; an unparseable payload is a rejection, not an error."""
        event = scratch if scratch is not None else pb.Event()
        try:
            event.ParseFromString(payload)
        except DecodeError as exc:
            if seq <= self.head_seq:
                raise ValueError(f"seq {seq} is not after head seq {self.head_seq}") from None
            self.head_seq = seq
            reason = f"payload is not a partbuild.v1.Event: {exc}"
            self.rejections.append(Rejection(seq, "unparseable", reason))
            return reason
        return self.apply(seq, event)

    # ----------------------------------------------------------------- reads

    def canonical_instance(self, ref: str) -> Instance | None:
        """The current instance of a ref, or None if the ref was never wanted or observed."""
        uuid = self.canonical.get(ref)
        return None if uuid is None else self.instances[uuid]

    def active_wants_for_ref(self, ref: str) -> Iterator[Want]:
        """Wants not yet in a terminal state that include `ref`."""
        for want_id in self._active_wants_by_ref.get(ref, ()):
            yield self.wants[want_id]

    def next_expiry_ms(self) -> int | None:
        """The earliest TTL deadline of a want that may still be active (None: none pending)."""
        return self._expiry[0][0] if self._expiry else None

    def active_refs(self) -> list[str]:
        """Refs that at least one active want names, in the order they were first wanted."""
        return list(self._active_wants_by_ref)

    def has_active_wants(self) -> bool:
        """Whether any want is still active (cheaper than `active_refs()` for a yes/no)."""
        return bool(self._active_wants_by_ref)

    def waiting_refs(self) -> list[str]:
        """Refs that at least one UpstreamBuilding instance waits for."""
        return list(self._waiters)

    def waiting_for(self, ref: str) -> list[str]:
        """UUIDs of instances waiting (UpstreamBuilding) for `ref` to become Live."""
        return list(self._waiters.get(ref, ()))

    def counts(self) -> dict[str, dict[str, int]]:
        """How many instances, wants and job runs are in each state."""
        return {
            "instances": {s.name.lower(): self.instance_counts[s] for s in InstanceState},
            "wants": {s.name.lower(): self.want_counts[s] for s in WantState},
            "job_runs": {s.name.lower(): self.run_counts[s] for s in JobRunState},
        }

    # ----------------------------------------------------------------- wants

    def _on_want_create(self, seq: int, msg: pb.WantCreate, event: pb.Event) -> str | None:
        # Interned: a ref string is then held once however many events, wants and runs name it.
        refs = tuple(map(intern, msg.partition_refs))
        problem = self._want_create_problem(msg, refs)
        if problem:
            return problem
        want_id = msg.want_id
        parent = self.wants[msg.parent_want_id] if msg.parent_want_id else None
        root = parent.root_want_id if parent is not None else want_id

        created_ms = event.timestamp_ms
        want = Want(
            want_id,
            refs,
            seq,
            created_ms,
            msg.data_timestamp_ms or created_ms,
            msg.ttl_seconds,
            msg.sla_seconds,
            intern(msg.comment),
            intern(describe_source(event)) if event.HasField("source") else "",
            parent.want_id if parent is not None else None,
            root,
        )
        self.wants[want_id] = want
        tally = [0] * _TALLY_SIZE
        wants_by_ref = self.wants_by_ref
        for ref in refs:
            tally[self._instance_for_new_want(seq, ref).state] += 1
            listed = wants_by_ref.get(ref)
            if listed is None:
                wants_by_ref[ref] = [want_id]
            else:
                listed.append(want_id)
        if parent is not None:
            if parent.children is None:
                parent.children = [want_id]
            else:
                parent.children.append(want_id)

        state = derive_want_state(tally, len(refs))
        want.state = state
        self.want_counts[state] += 1
        if state == WantState.SUCCESSFUL:
            # Everything already Live: fulfilled on arrival. (Failed states cannot occur
            # here because failed canonical instances were replaced by fresh ones above.)
            want.satisfied_by = tuple(self.canonical[ref] for ref in refs)
        else:
            want.tally = tally
            active = self._active_wants_by_ref
            for ref in refs:
                waiting = active.get(ref)
                if waiting is None:
                    active[ref] = {want_id: None}
                else:
                    waiting[want_id] = None
            expires_at = want.expires_at_ms
            if expires_at is not None:
                heapq.heappush(self._expiry, (expires_at, seq, want_id))
        return None

    def _want_create_problem(self, msg: pb.WantCreate, refs: tuple[str, ...]) -> str | None:
        """Why a WantCreate is not a valid next step, or None."""
        want_id = msg.want_id
        problem = _id_problem("want_id", want_id)
        if problem:
            return problem
        if want_id in self.wants:
            return f"want {_short(want_id)} already exists"
        if not refs:
            return "want lists no partition refs"
        for ref in refs:
            problem = ref_problem(ref)
            if problem:
                return f"{problem}: {_short(ref)}"
        if len(refs) > 1 and len(set(refs)) != len(refs):
            return "want lists a partition ref more than once"
        if msg.ttl_seconds < 0 or msg.sla_seconds < 0 or msg.data_timestamp_ms < 0:
            return "data_timestamp_ms, ttl_seconds and sla_seconds must not be negative"
        if msg.parent_want_id:
            parent = self.wants.get(msg.parent_want_id)
            if parent is None:
                return f"parent want {_short(msg.parent_want_id)} does not exist"
            if msg.root_want_id and msg.root_want_id != parent.root_want_id:
                return f"root_want_id {_short(msg.root_want_id)} is not the parent's root {_short(parent.root_want_id)}"
        elif msg.root_want_id and msg.root_want_id != want_id:
            return "root_want_id is set but parent_want_id is not"
        return None

    def _instance_for_new_want(self, seq: int, ref: str) -> Instance:
        """The canonical instance a new want joins; a fresh one if there is none or it failed."""
        uuid = self.canonical.get(ref)
        if uuid is None:
            return self._new_canonical(seq, ref, None)
        instance = self.instances[uuid]
        if instance.state in RETRYABLE_BY_NEW_WANT:
            # Asking again after a failure is asking for a new attempt.
            return self._new_canonical(seq, ref, instance)
        return instance

    def _on_want_cancel(self, seq: int, msg: pb.WantCancel, event: pb.Event) -> str | None:
        want = self.wants.get(msg.want_id)
        if want is None:
            return f"want {_short(msg.want_id)} does not exist"
        if want.tally is None:
            return f"want {_short(msg.want_id)} is already {want.state.name.lower()}"
        # Derivative wants exist only to serve their parent: cancel the active ones with it.
        stack = [(want, msg.reason or "canceled")]
        while stack:
            current, reason = stack.pop()
            if current.tally is None:
                continue
            current.cancel_reason = reason
            self._end_want(current, WantState.CANCELED, seq)
            for child_id in current.children or ():
                stack.append((self.wants[child_id], f"parent want {current.want_id} canceled"))
        return None

    def _expire_due(self, seq: int) -> None:
        """Expire active wants whose TTL (from data_timestamp) has passed on the log's clock."""
        heap = self._expiry
        now = self.clock_ms
        while heap and heap[0][0] <= now:
            _, _, want_id = heapq.heappop(heap)
            want = self.wants[want_id]
            if want.tally is not None:
                self._end_want(want, WantState.EXPIRED, seq)

    def _end_want(self, want: Want, state: WantState, seq: int) -> None:
        self.want_counts[want.state] -= 1
        self.want_counts[state] += 1
        want.state = state
        want.updated_seq = seq
        self._retire_want(want)

    def _retire_want(self, want: Want) -> None:
        """Drop a want that reached a terminal state from the active index."""
        want.tally = None
        active = self._active_wants_by_ref
        want_id = want.want_id
        for ref in want.refs:
            waiting = active[ref]
            del waiting[want_id]
            if not waiting:
                del active[ref]

    def _refresh_want(self, want: Want, seq: int) -> None:
        assert want.tally is not None
        state = derive_want_state(want.tally, len(want.refs))
        if state == want.state:
            return
        self.want_counts[want.state] -= 1
        self.want_counts[state] += 1
        want.state = state
        want.updated_seq = seq
        if state == WantState.SUCCESSFUL:
            want.satisfied_by = tuple(self.canonical[ref] for ref in want.refs)
            self._retire_want(want)
        elif state in (WantState.FAILED, WantState.UPSTREAM_FAILED):
            self._retire_want(want)

    # ----------------------------------------------------------------- instances

    def _new_canonical(self, seq: int, ref: str, previous: Instance | None) -> Instance:
        """Create a Missing instance of `ref` and point the canonical pointer at it."""
        instance = Instance(instance_uuid(seq, ref), ref, _MISSING, seq, previous.uuid if previous else None)
        if instance.uuid in self.instances:
            raise RuntimeError(f"instance UUID collision for {ref!r} at seq {seq}")
        self.instances[instance.uuid] = instance
        self.instance_counts[_MISSING] += 1
        self.canonical[ref] = instance.uuid
        if previous is not None:
            previous.superseded_seq = seq
            self._superseded.append(previous.uuid)
            self._canonical_changed(ref, previous.state, _MISSING, seq)
        return instance

    def _change_state(self, instance: Instance, state: InstanceState, seq: int) -> None:
        """Move an instance to `state`, keeping counts and want tallies; no cascades."""
        old = instance.state
        instance.state = state
        instance.updated_seq = seq
        counts = self.instance_counts
        counts[old] -= 1
        counts[state] += 1
        # Checked inline: most transitions concern refs no active want is waiting for.
        if not instance.superseded_seq and instance.ref in self._active_wants_by_ref:
            self._canonical_changed(instance.ref, old, state, seq)

    def _set_state(self, instance: Instance, state: InstanceState, seq: int) -> None:
        """Move an instance to `state` and wake or fail whatever waits for its ref."""
        self._change_state(instance, state, seq)
        if instance.superseded_seq or instance.ref not in self._waiters:
            return
        if state == _LIVE:
            self._upstream_live(instance.ref, seq)
        elif state in (_FAILED, _UPSTREAM_FAILED):
            self._upstream_failed(instance.ref, seq)

    def _canonical_changed(self, ref: str, old: InstanceState, new: InstanceState, seq: int) -> None:
        """The canonical state of `ref` went from `old` to `new`: adjust its active wants."""
        if old == new:
            return
        active = self._active_wants_by_ref.get(ref)
        if not active:
            return
        wants = self.wants
        # Copy: a want that becomes terminal leaves this index while we iterate.
        for want_id in list(active):
            want = wants[want_id]
            tally = want.tally
            assert tally is not None
            tally[old] -= 1
            tally[new] += 1
            self._refresh_want(want, seq)

    def _upstream_live(self, ref: str, seq: int) -> None:
        """`ref` became Live: instances that waited only for it can be scheduled again."""
        waiters = self._waiters.pop(ref, None)
        if not waiters:
            return
        for uuid in waiters:
            instance = self.instances[uuid]
            waiting = instance.waiting_on
            assert waiting is not None
            del waiting[ref]
            if not waiting:
                instance.waiting_on = None
                self._change_state(instance, _MISSING, seq)

    def _upstream_failed(self, ref: str, seq: int) -> None:
        """`ref` failed: its waiters fail as UpstreamFailed, and so on downstream."""
        pending = [ref]
        while pending:
            failed_ref = pending.pop()
            waiters = self._waiters.pop(failed_ref, None)
            if not waiters:
                continue
            for uuid in waiters:
                instance = self.instances[uuid]
                self._stop_waiting(instance, except_ref=failed_ref)
                instance.note = f"upstream {failed_ref} failed"
                self._change_state(instance, _UPSTREAM_FAILED, seq)
                pending.append(instance.ref)

    def _stop_waiting(self, instance: Instance, except_ref: str) -> None:
        for other in instance.waiting_on or ():
            if other == except_ref:
                continue
            waiters = self._waiters[other]
            del waiters[instance.uuid]
            if not waiters:
                del self._waiters[other]
        instance.waiting_on = None

    def _is_live(self, ref: str) -> bool:
        uuid = self.canonical.get(ref)
        return uuid is not None and self.instances[uuid].state == _LIVE

    def _on_partition_taint(self, seq: int, msg: pb.PartitionTaint, event: pb.Event) -> str | None:
        ref = intern(msg.partition_ref)
        problem = ref_problem(ref)
        if problem:
            return f"{problem}: {_short(ref)}"
        current = self.canonical_instance(ref)
        if current is None:
            return f"partition {_short(ref)} has no instance to taint"
        if current.state != _LIVE:
            return f"partition {_short(ref)} is {current.state.name.lower()}; only a Live instance can be tainted"
        reason = msg.reason or "tainted"
        pending = [current]
        while pending:
            old = pending.pop()
            # Reached twice through a diamond, or not Live: nothing (more) to taint.
            if old.superseded_seq or old.state != _LIVE:
                continue
            self._new_canonical(seq, old.ref, old)
            self._change_state(old, _TAINTED, seq)
            old.note = reason if old is current else f"upstream {ref} tainted: {reason}"
            if not msg.only_this_ref:
                for consumer in old.consumers or ():
                    pending.append(self.instances[consumer])
        return None

    def _on_partition_observed(self, seq: int, msg: pb.PartitionObserved, event: pb.Event) -> str | None:
        ref = intern(msg.partition_ref)
        problem = ref_problem(ref)
        if problem:
            return f"{problem}: {_short(ref)}"
        if not msg.location:
            return "observed partition has no location"
        if msg.row_count < 0 or msg.bytes < 0:
            return "row_count and bytes must not be negative"
        current = self.canonical_instance(ref)
        if current is None:
            instance = self._new_canonical(seq, ref, None)
        elif current.state in (_BUILDING, _UPSTREAM_BUILDING):
            return f"partition {_short(ref)} is being built by a job run; it cannot also be observed"
        elif current.state == _LIVE and current.location == msg.location:
            return f"partition {_short(ref)} is already Live at {_short(msg.location)}"
        elif current.state in (_MISSING, _UP_FOR_RETRY):
            instance = current
        else:  # Live elsewhere (new data version) or failed: a new instance replaces it
            instance = self._new_canonical(seq, ref, current)
        instance.location = msg.location
        instance.row_count = msg.row_count
        instance.byte_count = msg.bytes
        instance.metadata = dict(sorted(msg.metadata.items())) if msg.metadata else None
        self._set_state(instance, _LIVE, seq)
        return None

    def _on_clock_tick(self, seq: int, msg: pb.ClockTick, event: pb.Event) -> str | None:
        return None  # its only effect, moving the clock, is apply()'s

    def _on_instance_retention(self, seq: int, msg: pb.InstanceRetention, event: pb.Event) -> str | None:
        cutoff = msg.drop_superseded_created_before_seq
        if cutoff <= 0:
            return "drop_superseded_created_before_seq must be positive"
        kept: list[str] = []
        for uuid in self._superseded:
            instance = self.instances[uuid]
            if instance.created_seq < cutoff:
                self._drop(instance)
            else:
                kept.append(uuid)
        self._superseded = kept
        return None

    def _drop(self, instance: Instance) -> None:
        uuid = instance.uuid
        del self.instances[uuid]
        self.instance_counts[instance.state] -= 1
        for input_uuid in instance.inputs:
            upstream = self.instances.get(input_uuid)
            if upstream is not None and upstream.consumers and uuid in upstream.consumers:
                upstream.consumers.remove(uuid)
                if not upstream.consumers:
                    upstream.consumers = None
        self.dropped_instances += 1

    # ----------------------------------------------------------------- job runs

    def _active_run(self, job_run_id: str) -> tuple[JobRun | None, str | None]:
        run = self.job_runs.get(job_run_id)
        if run is None:
            return None, f"job run {_short(job_run_id)} does not exist"
        if run.state not in ACTIVE_RUN_STATES:
            return None, f"job run {_short(job_run_id)} is already {run.state.name.lower()}"
        return run, None

    def _move_run(self, run: JobRun, state: JobRunState, seq: int, event: pb.Event) -> None:
        """Move a job run to `state`, keeping the per-state counts and the active index."""
        self.run_counts[run.state] -= 1
        self.run_counts[state] += 1
        run.state = state
        run.updated_seq = seq
        run.updated_ms = event.timestamp_ms
        if state not in ACTIVE_RUN_STATES:
            del self.active_run_ids[run.job_run_id]

    def _on_job_run_buffer(self, seq: int, msg: pb.JobRunBuffer, event: pb.Event) -> str | None:
        run_id = msg.job_run_id
        problem = _id_problem("job_run_id", run_id) or _id_problem("job_label", msg.job_label)
        if problem:
            return problem
        if run_id in self.job_runs:
            return f"job run {_short(run_id)} already exists"
        uuids = tuple(msg.instance_uuids)
        if not uuids:
            return "job run builds no partition instances"
        if len(uuids) > 1 and len(set(uuids)) != len(uuids):
            return "job run lists a partition instance more than once"
        instances = []
        for uuid in uuids:
            instance = self.instances.get(uuid)
            if instance is None:
                return f"unknown partition instance {_short(uuid)}"
            if instance.superseded_seq:
                return f"instance {uuid} of {_short(instance.ref)} is no longer canonical"
            if instance.state not in BUILDABLE_INSTANCE_STATES:
                return f"instance {uuid} of {_short(instance.ref)} is {instance.state.name.lower()}, not buildable"
            instances.append(instance)
        # The instances' own UUID strings, not the event's copies: one string per UUID in memory.
        run = JobRun(run_id, intern(msg.job_label), tuple(i.uuid for i in instances), seq, event.timestamp_ms)
        self.job_runs[run_id] = run
        self.active_run_ids[run_id] = None
        self.run_counts[JobRunState.QUEUED] += 1
        for instance in instances:
            instance.attempts = (*instance.attempts, run_id)
            self._change_state(instance, _BUILDING, seq)
        return None

    def _on_job_run_heartbeat(self, seq: int, msg: pb.JobRunHeartbeat, event: pb.Event) -> str | None:
        run, problem = self._active_run(msg.job_run_id)
        if run is None:
            return problem
        if run.state == JobRunState.QUEUED:
            self._move_run(run, JobRunState.RUNNING, seq, event)
        run.last_heartbeat_ms = event.timestamp_ms
        return None

    def _resolve_inputs(
        self, inputs: Iterable[str], built: frozenset[str] | tuple[str, ...]
    ) -> tuple[tuple[str, ...], str | None]:
        """The held UUID strings of `inputs`, or a problem; sharing strings keeps memory per UUID at one copy."""
        resolved = []
        instances = self.instances
        for uuid in inputs:
            instance = instances.get(uuid)
            if instance is None:
                return (), f"input instance {_short(uuid)} is unknown"
            if uuid in built:
                return (), f"instance {uuid} is listed as an input of its own build"
            resolved.append(instance.uuid)
        if len(resolved) > 1 and len(set(resolved)) != len(resolved):
            return (), "an input instance is listed more than once"
        return tuple(resolved), None

    def _on_job_run_success(self, seq: int, msg: pb.JobRunSuccess, event: pb.Event) -> str | None:
        run, problem = self._active_run(msg.job_run_id)
        if run is None:
            return problem
        built = run.instance_uuids
        built_set = frozenset(built) if len(built) > 8 else built
        run_inputs, problem = self._resolve_inputs(msg.input_instance_uuids, built_set)
        if problem:
            return problem
        # uuid -> (output, its own inputs); protobuf fields are read once, here.
        outputs: dict[str, tuple[pb.OutputResult, tuple[str, ...]]] = {}
        for output in msg.outputs:
            uuid = output.instance_uuid
            if uuid not in built_set:
                return f"output for instance {_short(uuid)}, which job run {run.job_run_id} does not build"
            if uuid in outputs:
                return f"output for instance {uuid} is listed more than once"
            if output.row_count < 0 or output.bytes < 0:
                return "row_count and bytes must not be negative"
            own_inputs, problem = self._resolve_inputs(output.input_instance_uuids, built_set)
            if problem:
                return problem
            outputs[uuid] = (output, own_inputs)

        self._move_run(run, JobRunState.SUCCEEDED, seq, event)
        run.inputs = run_inputs
        instances = self.instances
        for uuid in built:
            instance = instances[uuid]
            described = outputs.get(uuid)
            inputs = run_inputs
            if described is not None:
                output, own_inputs = described
                inputs = own_inputs or run_inputs
                instance.location = output.location or None
                instance.row_count = output.row_count
                instance.byte_count = output.bytes
                if output.metadata:
                    instance.metadata = dict(sorted(output.metadata.items()))
            instance.inputs = inputs
            instance.built_by = run.job_run_id
            for input_uuid in inputs:
                upstream = instances[input_uuid]
                if upstream.consumers is None:
                    upstream.consumers = [uuid]
                else:
                    upstream.consumers.append(uuid)
            self._set_state(instance, _LIVE, seq)
        return None

    def _on_job_run_failure(self, seq: int, msg: pb.JobRunFailure, event: pb.Event) -> str | None:
        run, problem = self._active_run(msg.job_run_id)
        if run is None:
            return problem
        if msg.retry_after_ms < 0:
            return "retry_after_ms must not be negative"
        permanent = msg.error_class == _PERMANENT
        self._move_run(run, JobRunState.FAILED, seq, event)
        run.error_class = "permanent" if permanent else "retryable"
        run.error_message = msg.message
        run.retry_after_ms = msg.retry_after_ms
        target = _FAILED if permanent else _UP_FOR_RETRY
        for uuid in run.instance_uuids:
            instance = self.instances[uuid]
            instance.note = msg.message or None
            self._set_state(instance, target, seq)
        return None

    def _on_job_run_cancel(self, seq: int, msg: pb.JobRunCancel, event: pb.Event) -> str | None:
        run, problem = self._active_run(msg.job_run_id)
        if run is None:
            return problem
        self._move_run(run, JobRunState.CANCELED, seq, event)
        run.cancel_reason = msg.reason or None
        for uuid in run.instance_uuids:
            self._change_state(self.instances[uuid], _MISSING, seq)
        return None

    def _on_job_run_missing_deps(self, seq: int, msg: pb.JobRunMissingDeps, event: pb.Event) -> str | None:
        run, problem = self._active_run(msg.job_run_id)
        if run is None:
            return problem
        missing = tuple(map(intern, msg.missing_refs))
        own_refs = {self.instances[uuid].ref for uuid in run.instance_uuids}
        problem = self._upstream_refs_problem(missing, own_refs)
        if problem:
            return problem
        self._move_run(run, JobRunState.DEP_MISS, seq, event)
        run.missing_refs = missing
        for uuid in run.instance_uuids:
            self._wait_for_upstream(self.instances[uuid], missing, seq)
        return None

    def _on_instances_wait_upstream(self, seq: int, msg: pb.InstancesWaitUpstream, event: pb.Event) -> str | None:
        if not msg.waits:
            return "wait event lists no instances"
        waits: list[tuple[Instance, tuple[str, ...]]] = []
        seen: set[str] = set()
        for wait in msg.waits:
            instance = self.instances.get(wait.instance_uuid)
            if instance is None:
                return f"unknown partition instance {_short(wait.instance_uuid)}"
            if instance.uuid in seen:
                return f"instance {instance.uuid} is listed more than once"
            seen.add(instance.uuid)
            if instance.superseded_seq:
                return f"instance {instance.uuid} of {_short(instance.ref)} is no longer canonical"
            if instance.state not in BUILDABLE_INSTANCE_STATES:
                state = instance.state.name.lower()
                return f"instance {instance.uuid} of {_short(instance.ref)} is {state}; only a schedulable one can wait"
            refs = tuple(map(intern, wait.upstream_refs))
            problem = self._upstream_refs_problem(refs, {instance.ref})
            if problem:
                return problem
            waits.append((instance, refs))
        for instance, refs in waits:
            self._wait_for_upstream(instance, refs, seq)
        return None

    def _upstream_refs_problem(self, refs: tuple[str, ...], own_refs: set[str]) -> str | None:
        if not refs:
            return "no upstream refs listed"
        for ref in refs:
            problem = ref_problem(ref)
            if problem:
                return f"{problem}: {_short(ref)}"
            if ref in own_refs:
                return f"{_short(ref)} is listed as a missing input of its own build"
        if len(refs) > 1 and len(set(refs)) != len(refs):
            return "an upstream ref is listed more than once"
        return None

    def _wait_for_upstream(self, instance: Instance, refs: tuple[str, ...], seq: int) -> None:
        """Make `instance` wait (UpstreamBuilding) for those of `refs` not Live yet; Missing if none."""
        still_missing = [ref for ref in refs if not self._is_live(ref)]
        if not still_missing:
            self._change_state(instance, _MISSING, seq)
            return
        instance.waiting_on = dict.fromkeys(still_missing)
        for ref in still_missing:
            waiters = self._waiters.get(ref)
            if waiters is None:
                self._waiters[ref] = {instance.uuid: None}
            else:
                waiters[instance.uuid] = None
        self._change_state(instance, _UPSTREAM_BUILDING, seq)


_Handler = Callable[[BuildState, int, Any, pb.Event], "str | None"]
_HANDLERS: dict[str, _Handler] = {
    "want_create": BuildState._on_want_create,
    "want_cancel": BuildState._on_want_cancel,
    "job_run_buffer": BuildState._on_job_run_buffer,
    "job_run_heartbeat": BuildState._on_job_run_heartbeat,
    "job_run_success": BuildState._on_job_run_success,
    "job_run_failure": BuildState._on_job_run_failure,
    "job_run_cancel": BuildState._on_job_run_cancel,
    "job_run_missing_deps": BuildState._on_job_run_missing_deps,
    "partition_taint": BuildState._on_partition_taint,
    "partition_observed": BuildState._on_partition_observed,
    "instance_retention": BuildState._on_instance_retention,
    "instances_wait_upstream": BuildState._on_instances_wait_upstream,
    "clock_tick": BuildState._on_clock_tick,
}
