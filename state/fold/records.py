"""Entities of BuildState: partition instances, wants, job runs, rejections.

These are plain slotted records. Only `BuildState` changes them; everything
else reads. States are IntEnums so the fold can keep per-want tallies in small
lists indexed by state (the replay hot path).
"""

from __future__ import annotations

from collections.abc import Callable
from enum import IntEnum
from operator import attrgetter
from typing import Any, ClassVar

from partbuild.state.rules.redact import redacted


class InstanceState(IntEnum):
    """Lifecycle of one build of a partition ref."""

    MISSING = 0  # wanted, nobody is building it yet (schedulable)
    BUILDING = 1  # a queued or running job run will produce it
    UPSTREAM_BUILDING = 2  # its job found inputs missing; waits for them to be Live
    UP_FOR_RETRY = 3  # its job failed with a retryable error (schedulable again)
    LIVE = 4  # built (or observed, for source data)
    FAILED = 5  # its job failed permanently
    UPSTREAM_FAILED = 6  # an input it waits for failed permanently
    TAINTED = 7  # was Live, declared bad; a newer instance replaced it
    CANCELED = 8  # its job run was canceled; a fresh instance (a new UUID, a new location) replaced it
    GONE = 9  # was Live (source data): a completed scan no longer found it (PartitionGone)


# How many instance states logs were first written with: the counts of the states added since are left
# out of the digest while they are all 0, so logs that never reach one of them keep their digests.
FIRST_INSTANCE_STATES = 8


def digested_counts(counts: list[int]) -> list[int]:
    """Counts by instance state as the digest hashes them: without those of later states while all are 0."""
    if len(counts) == len(InstanceState) and not any(counts[FIRST_INSTANCE_STATES:]):
        return counts[:FIRST_INSTANCE_STATES]
    return counts


class WantState(IntEnum):
    """A want's state, derived from the canonical instances of its refs."""

    IDLE = 0
    BUILDING = 1
    UPSTREAM_BUILDING = 2
    SUCCESSFUL = 3
    FAILED = 4
    UPSTREAM_FAILED = 5
    CANCELED = 6
    EXPIRED = 7


class JobRunState(IntEnum):
    """Lifecycle of a job run. Terminal outcomes: the last four."""

    QUEUED = 0
    RUNNING = 1
    SUCCEEDED = 2
    FAILED = 3
    DEP_MISS = 4
    CANCELED = 5


TERMINAL_WANT_STATES = frozenset(
    {WantState.SUCCESSFUL, WantState.FAILED, WantState.UPSTREAM_FAILED, WantState.CANCELED, WantState.EXPIRED}
)
ACTIVE_RUN_STATES = frozenset({JobRunState.QUEUED, JobRunState.RUNNING})
# An instance a job run may be buffered for.
BUILDABLE_INSTANCE_STATES = frozenset({InstanceState.MISSING, InstanceState.UP_FOR_RETRY})
# A canonical instance in one of these states is replaced by a fresh one when a new want arrives.
RETRYABLE_BY_NEW_WANT = frozenset({InstanceState.FAILED, InstanceState.UPSTREAM_FAILED})


def _slots_setter(slots: tuple[str, ...]) -> Callable[[Any, tuple[Any, ...]], None]:
    """`def f(self, values): self.a, self.b, ... = values` for these slot names (our own identifiers)."""
    assert all(name.isidentifier() for name in slots)
    targets = "".join(f"self.{name}, " for name in slots)
    namespace: dict[str, Any] = {}
    exec(f"def __setstate__(self, values):\n    {targets}= values\n", namespace)
    return namespace["__setstate__"]


class _Record:
    """Slotted record pickled as a flat tuple: compact, fast snapshots.

    The state digest covers a record through `digest_values()`: every slot, in slot order,
    but those in `digest_leaves_out` (a record's history, derived from the log), each read
    through `digest_reads` where the slot changed form. Slots added after logs were written
    go last among the digested ones and are named in `added_later` (in slot order): while
    such a slot and every one after it are unset (None), the digest leaves them out, so the
    digest of a log that never set them stays what it always was.
    """

    __slots__: ClassVar[tuple[str, ...]] = ()
    added_later: ClassVar[tuple[str, ...]] = ()
    # Slots the digest leaves out: they follow from the log and the other slots (a record's `history`).
    digest_leaves_out: ClassVar[tuple[str, ...]] = ()
    # Slot -> the attribute the digest reads in its place (the same value in the form the digest always hashed).
    digest_reads: ClassVar[dict[str, str]] = {}
    _fields_getter: Callable[[Any], tuple[Any, ...]]
    _digest_getter: Callable[[Any], tuple[Any, ...]]

    def __init_subclass__(cls) -> None:
        later = cls.added_later
        digested = tuple(name for name in cls.__slots__ if name not in cls.digest_leaves_out)
        if later and digested[-len(later) :] != later:
            raise TypeError(f"{cls.__name__}.added_later must be the last digested slots, in order: {later}")
        # attrgetter reads every field in C: snapshots of a million records encode 3x faster.
        cls._fields_getter = attrgetter(*cls.__slots__)
        cls._digest_getter = attrgetter(*(cls.digest_reads.get(name, name) for name in digested))
        # One unpacking assignment instead of a setattr loop: snapshots decode ~20% faster.
        cls.__setstate__ = _slots_setter(cls.__slots__)  # type: ignore[method-assign]  # on purpose, per subclass

    def __getstate__(self) -> tuple[Any, ...]:
        return self._fields_getter(self)

    def __setstate__(self, values: tuple[Any, ...], /) -> None:
        raise NotImplementedError  # replaced per subclass by __init_subclass__

    def digest_values(self) -> tuple[Any, ...]:
        """What the state digest hashes of this record: its slots, without unset trailing `added_later` ones."""
        values = self._digest_getter(self)
        for _ in self.added_later:
            if values[-1] is not None:
                break
            values = values[:-1]
        return values

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={getattr(self, name)!r}" for name in self.__slots__)
        return f"{type(self).__name__}({fields})"


class Instance(_Record):
    """One build of a partition ref, identified by a UUID derived from the log position."""

    __slots__ = (  # noqa: RUF023 (sorted, except the fields added later: the digest depends on the order)
        "attempts",
        "built_by",
        "byte_count",
        "consumers",
        "created_seq",
        "inputs",
        "location",
        "metadata",
        "note",
        "previous_uuid",
        "ref",
        "row_count",
        "state",
        "superseded_seq",
        "updated_seq",
        "uuid",
        "waiting_on",
        "version",
    )
    added_later = ("version",)
    digest_reads: ClassVar[dict[str, str]] = {"consumers": "consumer_list"}

    def __init__(self, uuid: str, ref: str, state: InstanceState, seq: int, previous_uuid: str | None) -> None:
        self.uuid = uuid
        self.ref = ref
        self.state = state
        self.created_seq = seq
        self.updated_seq = seq
        self.previous_uuid = previous_uuid
        self.superseded_seq = 0  # seq at which it stopped being canonical; 0 while canonical
        self.built_by: str | None = None  # job run id whose success made it Live
        self.attempts: tuple[str, ...] = ()  # job run ids buffered for it, oldest first
        self.inputs: tuple[str, ...] = ()  # instance UUIDs it was computed from (provenance)
        # Instances computed from this one (the downstream index), in build order: a tuple of one, a list of more.
        self.consumers: tuple[str] | list[str] | None = None
        self.location: str | None = None
        self.row_count = 0
        self.byte_count = 0
        self.metadata: dict[str, str] | None = None
        # Upstream refs it waits for while UPSTREAM_BUILDING; None otherwise.
        self.waiting_on: dict[str, None] | None = None
        self.note: str | None = None  # why it failed or was tainted
        # (version, strong) of observed source data whose source reports versions; None otherwise.
        self.version: tuple[str, bool] | None = None
        # Its state changes before the latest are in BuildState.instance_histories, not here: most
        # instances have none, and a slot would cost every instance 16 bytes (pymalloc rounds up).

    @property
    def consumer_list(self) -> list[str] | None:
        """`consumers` as the digest hashes it (a list, as the fold kept it before single ones became tuples)."""
        return None if self.consumers is None else list(self.consumers)


class Want(_Record):
    """A request for partition refs to be Live."""

    __slots__ = (  # noqa: RUF023 (sorted, but `history`, left out of the digest, comes last)
        "cancel_reason",
        "children",
        "comment",
        "created_ms",
        "created_seq",
        "data_timestamp_ms",
        "parent_want_id",
        "refs",
        "root_want_id",
        "satisfied_by",
        "sla_seconds",
        "source",
        "state",
        "tally",
        "ttl_seconds",
        "updated_seq",
        "want_id",
        "history",
    )
    digest_leaves_out = ("history",)
    digest_reads: ClassVar[dict[str, str]] = {"tally": "digested_tally"}

    def __init__(
        self,
        want_id: str,
        refs: tuple[str, ...],
        seq: int,
        created_ms: int,
        data_timestamp_ms: int,
        ttl_seconds: int,
        sla_seconds: int,
        comment: str,
        source: str,
        parent_want_id: str | None,
        root_want_id: str,
    ) -> None:
        self.want_id = want_id
        self.refs = refs
        self.state = WantState.IDLE
        self.created_seq = seq
        self.updated_seq = seq
        self.created_ms = created_ms
        self.data_timestamp_ms = data_timestamp_ms
        self.ttl_seconds = ttl_seconds
        self.sla_seconds = sla_seconds
        self.comment = comment
        self.source = source  # "manual:<user>", "job_run:<id>", "system:<component>" or ""
        self.parent_want_id = parent_want_id
        self.root_want_id = root_want_id
        self.children: list[str] | None = None  # derivative wants, in creation order
        # How many of its refs' canonical instances are in each InstanceState; None once terminal.
        self.tally: list[int] | None = None
        self.satisfied_by: tuple[str, ...] = ()  # the instance UUIDs that made it Successful
        self.cancel_reason: str | None = None
        self.history = 0  # its state changes before the latest, as an Instance's

    @property
    def digested_tally(self) -> list[int] | None:
        """`tally` as the digest hashes it (`digested_counts`)."""
        return None if self.tally is None else digested_counts(self.tally)

    @property
    def expires_at_ms(self) -> int | None:
        """When the want gives up, or None if it never expires."""
        if self.ttl_seconds <= 0:
            return None
        return self.data_timestamp_ms + self.ttl_seconds * 1000

    @property
    def sla_deadline_ms(self) -> int | None:
        """When the want's refs are expected to be Live, or None without an SLA."""
        if self.sla_seconds <= 0:
            return None
        return self.data_timestamp_ms + self.sla_seconds * 1000


class JobRun(_Record):
    """One attempt of a job to build a set of partition instances."""

    __slots__ = (  # noqa: RUF023 (sorted, but `history`, left out of the digest, and the fields added later)
        "cancel_reason",
        "created_ms",
        "created_seq",
        "error_class",
        "error_message",
        "inputs",
        "instance_uuids",
        "job_label",
        "job_run_id",
        "last_heartbeat_ms",
        "missing_refs",
        "retry_after_ms",
        "state",
        "updated_ms",
        "updated_seq",
        "history",
        "code_version",
        "serve_stale",
        "blocking_checks",
        "failed_outputs",
        "split",
    )
    digest_leaves_out = ("history",)
    added_later = ("code_version", "serve_stale", "blocking_checks", "failed_outputs", "split")

    def __init__(
        self, job_run_id: str, job_label: str, instance_uuids: tuple[str, ...], seq: int, created_ms: int
    ) -> None:
        self.job_run_id = job_run_id
        self.job_label = job_label
        self.state = JobRunState.QUEUED
        self.instance_uuids = instance_uuids
        self.created_seq = seq
        self.updated_seq = seq
        self.created_ms = created_ms
        self.updated_ms = created_ms  # event time of the last state change (retry backoff counts from it)
        self.last_heartbeat_ms = 0
        self.inputs: tuple[str, ...] = ()  # run-level input instance UUIDs, on success
        self.error_class: str | None = None  # "retryable" or "permanent", on failure
        self.error_message: str | None = None
        self.retry_after_ms = 0
        self.missing_refs: tuple[str, ...] = ()  # on dep miss
        self.cancel_reason: str | None = None
        # Its state changes before the latest and its heartbeats (but the one that made it Running), with
        # their event times, packed as an Instance's history is (state/fold/history.py).
        self.history = 0
        # The job's code version the run was buffered with; None: unknown (an old log). The instances it builds
        # reach it through `built_by` (a slot on Instance would cost each of a million instances 8 bytes).
        self.code_version: str | None = None
        # Since issue 34, each None in logs written before (and while unset, so old digests stand):
        # True: its instances keep serving readers, stale, when their inputs get new data.
        self.serve_stale: bool | None = None
        # The job's blocking checks: every output that goes Live carries a passing result of each.
        self.blocking_checks: tuple[str, ...] | None = None
        # A success's outputs that failed on their own (their own error or check); the others went Live.
        self.failed_outputs: tuple[str, ...] | None = None
        # True: the batch failed as a whole; its outputs are retried each in a run of its own.
        self.split: bool | None = None


class Rejection(_Record):
    """An event that was not a valid next step; it changed nothing."""

    __slots__ = ("event_type", "reason", "seq")

    def __init__(self, seq: int, event_type: str, reason: str) -> None:
        self.seq = seq
        self.event_type = event_type
        self.reason = reason


# The connector contract's limits (orchestrator/connectors/toxic.py uses these): a scan cursor's
# key and token, as the fold accepts them.
MAX_SCAN_KEY_BYTES = 4096
MAX_SCAN_TOKEN_BYTES = 16384


class ScanRange(_Record):
    """One key range of a source scan's pass, with its own cursor; `start`/`end` b"": open ends.

    Keys are a connector's bytes: the repr shows them redacted.
    """

    __slots__ = ("bytes", "done", "end", "items", "last_key", "resume_token", "split_hint", "start", "updated_seq")

    def __init__(self, start: bytes, end: bytes) -> None:
        self.start = start
        self.end = end
        self.last_key = b""  # the cursor: b"" until a slice moved it
        self.resume_token = b""
        self.done = False
        self.items = 0
        self.bytes = 0
        self.split_hint = b""  # set when done: the key splitting its bytes about in half
        self.updated_seq = 0

    def contains(self, key: bytes) -> bool:
        """Whether `key` lies in [start, end)."""
        return key >= self.start and (not self.end or key < self.end)

    def __repr__(self) -> str:
        keys = ", ".join(
            f"{name}={redacted('ItemKey', getattr(self, name))}" for name in ("start", "end", "last_key", "split_hint")
        )
        return (
            f"ScanRange({keys}, token={redacted('ResumeToken', self.resume_token)}, done={self.done}, "
            f"items={self.items}, bytes={self.bytes}, updated_seq={self.updated_seq})"
        )


class SourceScan(_Record):
    """How far the scans of one source dataset have got (SourceScanProgress events).

    A pass is one or more key ranges, each with its own cursor; it is done when every
    range is. `last_pass_ranges` are the finished pass's ranges, from which the next pass
    rebalances its split.
    """

    # Sorted but for `ranges`, which keeps the place its old name ("shards") had: `state.log.digest`
    # hashes the fields in slot order, and the digests of existing logs must not move.
    __slots__ = (  # noqa: RUF023
        "done",
        "errors_total",
        "items_total",
        "last_error",
        "last_error_ms",
        "last_error_retryable",
        "last_pass_done_ms",
        "last_pass_items",
        "last_pass_partitions",
        "last_pass_ranges",
        "name",
        "partitions_total",
        "pass_items",
        "pass_number",
        "pass_partitions",
        "pass_started_ms",
        "passes_done",
        "rescan_requested",
        "ranges",
        "updated_ms",
        "updated_seq",
    )

    def __init__(self, name: str) -> None:
        self.name = name
        self.pass_number = 0  # no pass yet
        self.ranges: list[ScanRange] = []  # the current pass's
        self.done = False
        self.pass_started_ms = 0
        self.pass_items = 0  # this pass so far
        self.pass_partitions = 0
        self.passes_done = 0
        self.last_pass_done_ms = 0  # when the latest finished pass ended (0: none has)
        self.last_pass_items = 0
        self.last_pass_partitions = 0
        self.last_pass_ranges: list[ScanRange] = []
        self.rescan_requested = False  # a SourceScanRequest since the current pass began
        self.items_total = 0  # every pass
        self.partitions_total = 0
        self.errors_total = 0
        self.last_error: str | None = None
        self.last_error_retryable = False
        self.last_error_ms = 0
        self.updated_seq = 0
        self.updated_ms = 0

    def digest_values(self) -> tuple[Any, ...]:
        """Its fields with its key ranges' fields in full (a range's repr is redacted, so not that)."""
        return tuple(
            [key_range.digest_values() for key_range in value] if isinstance(value, list) else value
            for value in self.__getstate__()
        )

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={getattr(self, name)!r}" for name in self.__slots__)
        return f"SourceScan({fields})"
