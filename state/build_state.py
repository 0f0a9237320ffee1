"""BuildState: the pure, deterministic fold of the event log.

`BuildState.apply(seq, event)` is the only place where state changes. It reads
no clock, does no I/O and draws no random numbers: instance UUIDs come from the
log position and time comes from the events themselves. An event that is not a
valid next step is recorded as a `Rejection` with a reason and changes nothing
else, so any sequence of events replays without raising (which is what makes
several concurrent writers safe: the fold arbitrates).

This class holds the data and the reads; what each event type does is in the
`partbuild.state.fold` package, one check + apply pair per type, registered in
one table. `apply` runs the check (pure: a rejection reason or a plan), then the
plan's apply phase, then moves the log's clock and expires wants whose TTL passed.
"""

from __future__ import annotations

from collections.abc import Iterator

from google.protobuf.message import DecodeError

from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.fold import HANDLERS as _HANDLERS
from partbuild.state.fold import Apply
from partbuild.state.fold.transitions import derive_want_state
from partbuild.state.fold.validation import MAX_ID_LENGTH, describe_source
from partbuild.state.fold.wants import expire_due as _expire_due
from partbuild.state.model import Instance, InstanceState, JobRun, JobRunState, Rejection, Want, WantState

# Re-exported: these lived here before the handlers moved to `partbuild.state.fold`.
__all__ = ["MAX_ID_LENGTH", "BuildState", "FoldError", "derive_want_state", "describe_source"]


class FoldError(RuntimeError):
    """The apply phase of an event raised: the state is half-applied and must be discarded.

    Check phases validate everything that can be wrong with an event, so this is
    a bug in the fold. A half-applied state must never be served or snapshotted:
    the state that raised it refuses further events (and snapshots), and the
    remedy is a fresh replay from the log (or an older snapshot) with fixed code.
    """

    def __init__(self, seq: int, kind: str | None) -> None:
        super().__init__(
            f"applying the {kind} event at seq {seq} failed half-way: this state is inconsistent; "
            "discard it and rebuild it from the log"
        )
        self.seq = seq


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
        # Tests set strict=True so a bug in a check raises instead of becoming a rejection.
        self.strict = strict
        self._broken_seq = 0  # seq whose apply phase raised (FoldError); 0 while healthy

    # ----------------------------------------------------------------- applying events

    def apply(self, seq: int, event: pb.Event) -> str | None:
        """Fold one event in. Returns None when applied, else the rejection reason.

        Raises ValueError for a seq not after `head_seq`, and FoldError when the
        apply phase failed (the state is then unusable; see FoldError). With
        `strict=True`, an exception raised by a check propagates as is (the state
        is then exactly as before the call).
        """
        if seq <= self.head_seq:
            raise ValueError(f"seq {seq} is not after head seq {self.head_seq}")
        if self._broken_seq:
            raise FoldError(self._broken_seq, "earlier")
        kind = event.WhichOneof("payload")
        handler = _HANDLERS.get(kind) if kind is not None else None
        if handler is None:
            reason = "event has no payload of a type this version knows"
        else:
            try:
                plan = handler[0](self, seq, getattr(event, kind), event)
            except Exception as exc:  # a bug in a check, which mutated nothing; replay must still never raise
                if self.strict:
                    raise
                plan = f"internal error while applying: {exc!r}"
            if plan.__class__ is not str:
                self.head_seq = seq
                self._apply_plan(handler[1], seq, plan, event)
                return None
            reason = plan
        self.head_seq = seq
        self.rejections.append(Rejection(seq, kind or "none", reason))
        return reason

    def _apply_plan(self, mutate: Apply, seq: int, plan: object, event: pb.Event) -> None:
        """Run an apply phase, then move the log's clock and expire the wants whose TTL passed."""
        try:
            mutate(self, seq, plan, event)
            # Only applied events move the clock: a rejected event with a wild timestamp expires nothing.
            if event.timestamp_ms > self.clock_ms:
                self.clock_ms = event.timestamp_ms
            if self._expiry and self._expiry[0][0] <= self.clock_ms:
                _expire_due(self, seq)
        except BaseException as exc:
            # Half-applied: never let it be served, folded further or snapshotted.
            self._broken_seq = seq
            if isinstance(exc, Exception):
                raise FoldError(seq, event.WhichOneof("payload")) from exc
            raise

    def apply_payload(self, seq: int, payload: bytes, scratch: pb.Event | None = None) -> str | None:
        """Parse and fold one stored event; an unparseable payload is a rejection, not an error."""
        event = scratch if scratch is not None else pb.Event()
        try:
            event.ParseFromString(payload)
        except DecodeError as exc:
            if seq <= self.head_seq:
                raise ValueError(f"seq {seq} is not after head seq {self.head_seq}") from None
            if self._broken_seq:
                raise FoldError(self._broken_seq, "earlier") from None
            self.head_seq = seq
            reason = f"payload is not a partbuild.v1.Event: {exc}"
            self.rejections.append(Rejection(seq, "unparseable", reason))
            return reason
        return self.apply(seq, event)

    @property
    def broken(self) -> bool:
        """Whether an apply phase failed half-way (FoldError): the state must be discarded."""
        return bool(self._broken_seq)

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
