"""BuildState: the pure, deterministic fold of the event log.

`BuildState.apply(seq, event)` is the only place where state changes. It reads
no clock, does no I/O and draws no random numbers: instance UUIDs come from the
log position and time comes from the events themselves. An event that is not a
valid next step is recorded as a `Rejection` with a reason and changes nothing
else, so any sequence of events replays without raising (which is what makes
several concurrent writers safe: the fold arbitrates).

This class holds the data and the reads; what each event type does is in the
`partbuild.state.fold` package, one check + apply pair per type, registered in
the event registry. `apply` runs the check (pure: a rejection reason or a plan),
then the plan's apply phase, then moves the log's clock and expires wants whose
TTL passed. `problem(event)` says why the fold would reject an event appended
next, changing nothing: writers that must not leave rejections behind ask first.
`LAYOUT` declares every attribute for the digest.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import ClassVar

from google.protobuf.message import DecodeError

from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.fold.checks import CheckEntry, CheckTotals
from partbuild.state.fold.cold import ReadBackFailed
from partbuild.state.fold.history import CLOCK_MARK_EVERY, mark_clock
from partbuild.state.fold.layout import (
    History,
    Index,
    Items,
    Lookup,
    Pointers,
    RecordLog,
    Records,
    Scalars,
    Section,
    Setting,
    Table,
)
from partbuild.state.fold.reaction_notes import PendingRow, ReactionRow
from partbuild.state.fold.rechecks import CheckRequest
from partbuild.state.fold.records import (
    Instance,
    InstanceState,
    JobRun,
    JobRunState,
    Rejection,
    SourceScan,
    Want,
    WantState,
    digested_counts,
)
from partbuild.state.fold.registry import HANDLERS as _HANDLERS
from partbuild.state.fold.schedules import ScheduleRow
from partbuild.state.fold.subscription_records import Subscription
from partbuild.state.fold.touched import Touched
from partbuild.state.fold.wants import expire_due as _expire_due
from partbuild.state.rules.group import GroupState


class FoldError(RuntimeError):
    """The apply phase of an event raised: the state is half-applied and must be discarded.

    Check phases validate everything that can be wrong with an event, so this is
    a bug in the fold. A half-applied state must never be served or snapshotted:
    the state that raised it refuses further events (and snapshots), and the
    remedy is a fresh replay from the log (or an older snapshot) with fixed code.
    """

    def __init__(self, seq: int, kind: str | None = None) -> None:
        what = f"the {kind} event at seq {seq} failed half-way" if kind else f"an event failed half-way at seq {seq}"
        super().__init__(f"applying {what}: this state is inconsistent; discard it and rebuild it from the log")
        self.seq = seq


def _reaction_tables() -> tuple[dict[str, PendingRow], dict[str, int], dict[str, ReactionRow]]:
    """Empty: pending firings by `pending_key`, cursors by scope, rows by `reaction_key`."""
    return {}, {}, {}


def _zero_counts() -> tuple[list[int], list[int], list[int]]:
    """Per-state counts of instances, wants and job runs, all zero."""
    return [0] * len(InstanceState), [0] * len(WantState), [0] * len(JobRunState)


class BuildState:
    """Everything partbuild knows, as of `head_seq`; rebuilt by folding the log.

    Only the fold's apply phases (`partbuild.state.fold`) change the attributes;
    everything else reads. The indexes (`wants_by_ref`, `active_wants_by_ref`, `wanted_instance_counts`,
    `waiters`, `superseded`, `expiry`, `active_run_ids`) follow from the records
    and are kept current by the fold's transitions.
    """

    # Each attribute once, in digest order: what the state digest covers and how (state/fold/layout.py).
    LAYOUT: ClassVar[tuple[Section, ...]] = (
        Scalars(("head_seq", "clock_ms", "dropped_instances"), "head"),
        Table(("instances", "wants", "job_runs")),
        Pointers(("canonical",)),
        RecordLog(("rejections",)),
        Scalars(
            ("instance_counts", "want_counts", "run_counts"),
            reads=(("instance_counts", "digested_instance_counts"),),
        ),
        Items(("bucket_runs", "bucket_layouts")),
        Records(("groups", "sources", "subscriptions")),
        Items(("check_results",)),  # since issue 24: empty (every older log), it hashes nothing
        Items(("check_requests",)),  # checks run again (state/fold/rechecks.py): empty in older logs too
        Index(("pending_check_requests",)),
        Items(("schedules", "want_causes")),  # since issue 25: empty in every older log
        Index(("wants_by_ref", "active_wants_by_ref", "waiters", "superseded", "expiry", "active_run_ids")),
        Index(("wanted_instance_counts",)),
        Setting(("strict", "broken_seq", "touched")),
        History(
            (
                "instance_histories",
                "fields",
                "versions",
                "clock_marks",
                "next_clock_mark",
                "first_created",
                "dropped_changes",
                "run_heartbeats",
            )
        ),
        Items(("serving",)),  # since issue 34: empty while nothing is stale (every older log)
        Lookup(("upstream_failures", "owed_retries")),
        Lookup(("run_fences",)),  # since 2026-11-30: an index of active runs that older logs never read
        Items(("reaction_pending", "reaction_cursors")),  # since issue 35: empty in every older log
        Lookup(("reactions",)),  # per reaction, from its firings: older logs' ReactionFired must not change digests
        Lookup(("check_totals",)),  # a tally for /metrics (since 2026-12-01): older logs' digests must not change
    )
    # A slot per declared attribute: a state has exactly LAYOUT's attributes, and `state.x` (a dozen per
    # event in replay) is a slot read. As a plain instance CPython 3.11 keeps at most 30 attributes inline;
    # with more, every attribute read became a dict lookup, and replay was ~5% slower.
    ATTRIBUTES: ClassVar[tuple[str, ...]] = tuple(name for section in LAYOUT for name in section.names)
    __slots__ = (*ATTRIBUTES, "__weakref__")  # the metrics keep weak references to the state they counted

    def __init__(self, *, strict: bool = False) -> None:
        self.head_seq = 0
        self.clock_ms = 0  # the log's clock: the largest timestamp of an applied event (ms since epoch)
        self.instances: dict[str, Instance] = {}
        self.canonical: dict[str, str] = {}  # ref -> UUID of its current instance
        self.wants: dict[str, Want] = {}
        self.job_runs: dict[str, JobRun] = {}
        self.active_run_ids: dict[str, None] = {}  # queued or running, oldest first
        self.rejections: list[Rejection] = []
        # Inverted indexes, so every lookup is O(1) or O(result). Job runs by instance and consumers by input
        # instance live on each Instance (`attempts`, `consumers`): O(1) by UUID without a dict entry each.
        # ref -> every want naming it, in creation order (a tuple of one, a list of more)
        self.wants_by_ref: dict[str, tuple[str] | list[str]] = {}
        self.active_wants_by_ref: dict[str, dict[str, None]] = {}  # ref -> active wants naming it (ordered set)
        # By state: the canonical instances of the refs in active_wants_by_ref (state/queries/wanted.py).
        self.wanted_instance_counts = [0] * len(InstanceState)
        self.waiters: dict[str, dict[str, None]] = {}  # upstream ref -> UUIDs of instances waiting for it
        self.superseded: list[str] = []  # non-canonical instances still held (retention candidates), oldest first
        self.expiry: list[tuple[int, int, str]] = []  # heap of (expires_at_ms, created_seq, want_id)
        self.instance_counts, self.want_counts, self.run_counts = _zero_counts()
        self.dropped_instances = 0
        self.bucket_runs: dict[str, int] = {}  # bucketing namespace -> last bucket a round-robin worker started
        # bucketing namespace -> (bucket_total, seq that fixed it): every scoped decision must agree.
        self.bucket_layouts: dict[str, tuple[int, int]] = {}
        # worker group name -> its current epoch, members' states and bucket owners (state/rules/group.py).
        self.groups: dict[str, GroupState] = {}
        # source dataset name -> how far its connector's scans have got (state/fold/sources.py).
        self.sources: dict[str, SourceScan] = {}
        # subscription name -> its settings and topics (state/fold/subscriptions.py); deleted ones stay.
        self.subscriptions: dict[str, Subscription] = {}
        # instance UUID -> the results of the checks each outcome ran on it, oldest first (state/fold/checks.py).
        self.check_results: dict[str, tuple[CheckEntry, ...]] = {}
        self.check_totals: CheckTotals = {}  # (job, check, result) -> results since the log began (`/metrics`)
        # checks request id -> (instance UUID, requested seq, answered seq or 0); the pending ones (fold/rechecks.py)
        self.check_requests: dict[str, CheckRequest] = {}
        self.pending_check_requests: dict[str, None] = {}
        self.schedules: dict[str, ScheduleRow] = {}  # name -> what its ticks and pauses left (fold/schedules.py)
        # want id -> why it exists, for the wants automation created ("schedule nightly ticked at ...").
        self.want_causes: dict[str, str] = {}
        # What reads of the past need (fold/history.py): field changes, versions of small records, clock marks.
        self.fields: dict[str, tuple[object, ...]] = {}
        # instance UUID -> its state changes before the latest, packed (state/fold/history.py); only
        # instances that have some (most have none: a creation and Building are implied).
        self.instance_histories: dict[str, int] = {}
        self.versions: dict[str, dict[object, list[tuple[int, bytes]]]] = {}
        self.clock_marks: list[int] = []
        self.next_clock_mark = CLOCK_MARK_EVERY  # the first seq whose fold keeps a mark first
        # ref -> the seq its first instance was created at, once retention dropped that instance.
        self.first_created: dict[str, int] = {}
        self.dropped_changes = bytearray()  # what dropped instances added to the counts (history.keep_dropped)
        self.run_heartbeats: dict[str, bytearray] = {}  # run id -> later heartbeats' (seq, ms) (history.heartbeat_at)
        self.serving: dict[str, str] = {}  # ref -> a stale Live instance still read (served_instance)
        self.upstream_failures: dict[str, dict[str, None]] = {}  # failed ref -> instances it made UpstreamFailed
        self.owed_retries: dict[str, None] = {}  # outputs of split batches not run again yet, wanted or not
        self.run_fences: dict[str, tuple[str, str]] = {}  # active run -> (group, task) of the member that buffered it
        # What reactions owe (fold/reaction_notes.py): firings waiting, each scope's cursor; each reaction's row.
        self.reaction_pending, self.reaction_cursors, self.reactions = _reaction_tables()
        self.strict = strict  # tests set it, so a bug in a check raises instead of becoming a rejection
        self.broken_seq = 0  # the seq whose apply phase failed, once broken (BrokenBuildState)
        self.touched: Touched | None = None  # records changed since a seq, while a projector asks (fold/touched.py)

    # ----------------------------------------------------------------- applying events

    def apply(self, seq: int, event: pb.Event) -> str | None:
        """Fold one event in. Returns None when applied, else the rejection reason.

        Runs the event's check (pure: a rejection reason or a plan), then the
        plan's apply phase, then moves the log's clock and expires the wants
        whose TTL passed. Raises ValueError for a seq not after `head_seq`, and
        FoldError when the apply phase raised (see FoldError: the state is then
        unusable). With `strict=True`, an exception raised by a check propagates
        as is, the state exactly as before the call.
        """
        if seq <= self.head_seq:
            raise ValueError(f"seq {seq} is not after head seq {self.head_seq}")
        kind = event.WhichOneof("payload")
        handler = _HANDLERS.get(kind)  # None for no payload too: None is no handler's key
        if handler is None:
            reason = "event has no payload of a type this version knows"
        else:
            check, mutate = handler
            try:
                plan = check(self, seq, getattr(event, kind), event)
            except ReadBackFailed:  # a working set's record not read back: not folded, not rejected (cold.py)
                raise
            except Exception as exc:  # a bug in a check, which mutated nothing; replay must still never raise
                if self.strict:
                    raise
                plan = f"internal error while applying: {exc!r}"
            if type(plan) is not str:
                if seq >= self.next_clock_mark:  # before the clock moves
                    mark_clock(self, seq)
                # Inline, not a helper: this is the replay hot path (one call less per event).
                try:
                    mutate(self, seq, plan, event)
                    # Only applied events move the clock: a rejected event with a wild timestamp expires nothing.
                    timestamp_ms = event.timestamp_ms  # read once: each protobuf field read builds an int
                    if timestamp_ms > self.clock_ms:
                        self.clock_ms = timestamp_ms
                    expiry = self.expiry
                    if expiry and expiry[0][0] <= self.clock_ms:
                        _expire_due(self, seq)
                except BaseException as exc:
                    # Half-applied: never let it be served, folded further or snapshotted.
                    self._break(seq)
                    if isinstance(exc, Exception):
                        raise FoldError(seq, kind) from exc
                    raise
                # Once applied: a working set reading a record back while this event applies reads it as it was
                # before the event (state/store/cold_rows.py; another process's row as of `seq` holds the event).
                self.head_seq = seq
                return None
            reason = plan
        self.head_seq = seq
        self.rejections.append(Rejection(seq, kind or "none", reason))
        return reason

    def apply_payload(self, seq: int, payload: bytes, scratch: pb.Event | None = None) -> str | None:
        """Parse and fold one stored event; an unparseable payload is a rejection, not an error."""
        event = scratch if scratch is not None else pb.Event()
        try:
            event.ParseFromString(payload)
        except DecodeError as exc:
            if seq <= self.head_seq:
                raise ValueError(f"seq {seq} is not after head seq {self.head_seq}") from None
            if self.broken:  # a bound method taken before the state broke (replay_into's) ends up here
                raise FoldError(self.broken_seq) from None
            self.head_seq = seq
            reason = f"payload is not a partbuild.v1.Event: {exc}"
            self.rejections.append(Rejection(seq, "unparseable", reason))
            return reason
        return self.apply(seq, event)

    broken = False  # True once an apply phase failed half-way (FoldError): the state must be discarded

    def _break(self, seq: int) -> None:
        """Turn this state into a BrokenBuildState: reads still work (post-mortem), applying refuses.

        A class change rather than a flag tested on every event: replay stays as fast as before.
        """
        self.broken_seq = seq
        self.__class__ = BrokenBuildState

    # ----------------------------------------------------------------- reads

    def problem(self, event: pb.Event) -> str | None:
        """Why the fold would reject `event` appended next (None: it would apply). Changes nothing.

        Writers that must not leave rejected events behind (the API) ask first; the fold still
        decides when the event is folded, since someone may append in between.
        """
        kind = event.WhichOneof("payload")
        handler = _HANDLERS.get(kind) if kind is not None else None
        if handler is None:
            return "event has no payload of a type this version knows"
        plan = handler[0](self, self.head_seq + 1, getattr(event, kind), event)  # checks are pure
        return plan if type(plan) is str else None

    def rejection_between(self, first: int, last: int) -> str | None:
        """The reason the fold rejected an event at seq first..last, if it did (the newest such)."""
        for rejection in reversed(self.rejections):
            if rejection.seq < first:
                break
            if rejection.seq <= last:
                return rejection.reason
        return None

    def canonical_instance(self, ref: str) -> Instance | None:
        """The current instance of a ref, or None if the ref was never wanted or observed."""
        uuid = self.canonical.get(ref)
        return None if uuid is None else self.instances[uuid]

    def served_instance(self, ref: str) -> Instance | None:
        """The instance readers get for `ref`: its canonical one if Live, else a stale Live one that keeps serving
        while its successor (canonical) is built, failed or blocked, until that one goes Live (`serving`, kept by
        state/fold/transitions.py); None when nothing Live may be read (never built, or withdrawn)."""
        uuid = self.serving.get(ref)
        if uuid is not None:
            return self.instances[uuid]
        current = self.canonical_instance(ref)
        return current if current is not None and current.state == InstanceState.LIVE else None

    def active_wants_for_ref(self, ref: str) -> Iterator[Want]:
        """Wants not yet in a terminal state that include `ref`."""
        for want_id in self.active_wants_by_ref.get(ref, ()):
            yield self.wants[want_id]

    def next_expiry_ms(self) -> int | None:
        """The earliest TTL deadline of a want that may still be active (None: none pending)."""
        return self.expiry[0][0] if self.expiry else None

    def active_refs(self) -> list[str]:
        """Refs that at least one active want names, in the order they were first wanted."""
        return list(self.active_wants_by_ref)

    def has_active_wants(self) -> bool:
        """Whether any want is still active (cheaper than `active_refs()` for a yes/no)."""
        return bool(self.active_wants_by_ref)

    def waiting_refs(self) -> list[str]:
        """Refs that at least one UpstreamBuilding instance waits for."""
        return list(self.waiters)

    def waiting_for(self, ref: str) -> list[str]:
        """UUIDs of instances waiting (UpstreamBuilding) for `ref` to become Live."""
        return list(self.waiters.get(ref, ()))

    @property
    def digested_instance_counts(self) -> list[int]:
        """`instance_counts` as the digest hashes it (`records.digested_counts`)."""
        return digested_counts(self.instance_counts)

    def attributes(self) -> dict[str, object]:
        """Every attribute that is set, by name, in layout order (`vars()` of a slotted state)."""
        return {name: getattr(self, name) for name in BuildState.ATTRIBUTES if hasattr(self, name)}

    def counts(self) -> dict[str, dict[str, int]]:
        """How many instances, wants and job runs are in each state."""
        return {
            "instances": {s.name.lower(): self.instance_counts[s] for s in InstanceState},
            "wants": {s.name.lower(): self.want_counts[s] for s in WantState},
            "job_runs": {s.name.lower(): self.run_counts[s] for s in JobRunState},
        }


class BrokenBuildState(BuildState):
    """A BuildState whose apply phase raised at `broken_seq`: half-applied, it refuses every further event.

    Snapshots refuse it too (`encode_state`), so it can only be discarded and rebuilt from the log.
    """

    __slots__ = ()  # the same layout: `_break` changes a state's class in place

    broken = True

    def apply(self, seq: int, event: pb.Event) -> str | None:
        """Refuse: the state is half-applied."""
        raise FoldError(self.broken_seq)

    def apply_payload(self, seq: int, payload: bytes, scratch: pb.Event | None = None) -> str | None:
        """Refuse: the state is half-applied."""
        raise FoldError(self.broken_seq)
