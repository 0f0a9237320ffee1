"""The event registry: one row per event type, and the one list of the record classes a state may hold.

A row (`EventType`) says everything the code outside the fold's handlers needs
to know about an event type: its `Event.payload` member, its check and apply
(state/fold/__init__.py explains them), which partition refs, wants and job run
it names, whether a group member's decision of
this type may carry a fence, and which step of a job run's life it records.
Everything that must know every event type is derived from the rows:

- the fold's dispatch (`HANDLERS`, used by `BuildState.apply`);
- the web UI's event-type list and the API's (`EVENT_TYPES`; the subscription record reads the same names
  from `Event.payload`, and keeps the fixed `BUILD_EVENT_TYPES`, subscriptions' default filter);
- the delivery messages' refs and roots (orchestrator/delivery/messages.py);
- the payload formats' event sets (api/webhook_payloads.py: job-run events,
  OpenLineage run states);
- the worker-group checker's fenced decisions (state/log/group_verify.py).

`RECORD_CLASSES` is what a snapshot may contain (state/log/snapshot.py) and what
tests walk replayed states against. tests/state/fold/test_registry.py fails when an
`Event.payload` member has no row (or a row no member), when a state holds a
class that is not listed, or when a record's field is not covered by the digest.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.fold import (
    buckets,
    clock,
    group,
    instances,
    job_runs,
    reaction_notes,
    reactions,
    rechecks,
    schedules,
    sources,
    subscription_records,
    subscriptions,
    wants,
)
from partbuild.state.fold.history import VERSIONED, versioned
from partbuild.state.fold.records import (
    Instance,
    InstanceState,
    JobRun,
    JobRunState,
    Rejection,
    ScanRange,
    SourceScan,
    Want,
    WantState,
)
from partbuild.state.fold.subscription_records import Subscription
from partbuild.state.rules.group import GroupState, TaskState
from partbuild.state.rules.topics import CompositeTopic, StorageTopic

if TYPE_CHECKING:
    from partbuild.state.fold.build_state import BuildState

Check = Callable[["BuildState", int, Any, pb.Event], Any]  # -> rejection reason (str) or plan
Apply = Callable[["BuildState", int, Any, pb.Event], None]
RefsOf = Callable[["BuildState", Any], Iterable[str]]  # (state, payload message) -> partition refs
WantIdsOf = Callable[[Any], Iterable[str]]  # payload message -> want ids


def no_refs(state: BuildState, msg: Any) -> tuple[str, ...]:
    """An event about no partition (ticks, groups, scans, subscriptions)."""
    return ()


def instance_refs(state: BuildState, uuids: Iterable[str]) -> list[str]:
    """The refs of the instances the state still holds among `uuids` (retention may have dropped some)."""
    held = state.instances
    return [held[uuid].ref for uuid in uuids if uuid in held]


def run_refs(state: BuildState, msg: Any) -> list[str]:
    """The refs of the instances of the job run `msg.job_run_id` names (none if the state does not know it)."""
    run = state.job_runs.get(msg.job_run_id)
    return instance_refs(state, run.instance_uuids) if run is not None else []


def _buffered_refs(state: BuildState, msg: pb.JobRunBuffer) -> list[str]:
    return instance_refs(state, msg.instance_uuids)


def _wanted_refs(state: BuildState, msg: pb.WantCreate) -> Sequence[str]:
    return msg.partition_refs


def _canceled_refs(state: BuildState, msg: pb.WantCancel) -> tuple[str, ...]:
    want = state.wants.get(msg.want_id)
    return want.refs if want is not None else ()


def _the_ref(state: BuildState, msg: pb.PartitionTaint | pb.PartitionObserved | pb.PartitionGone) -> tuple[str, ...]:
    return (msg.partition_ref,)


def _waiting_refs(state: BuildState, msg: pb.InstancesWaitUpstream) -> list[str]:
    return instance_refs(state, [wait.instance_uuid for wait in msg.waits])


def _requested_refs(state: BuildState, msg: pb.ChecksRequest) -> list[str]:
    return instance_refs(state, (msg.instance_uuid,))


def _rechecked_refs(state: BuildState, msg: pb.ChecksRerun) -> list[str]:
    request = state.check_requests.get(msg.request_id)
    return instance_refs(state, (request[0],)) if request is not None else []


def _the_want(msg: pb.WantCreate | pb.WantCancel) -> tuple[str]:
    return (msg.want_id,)


def _ticked_refs(state: BuildState, msg: pb.ScheduleTick) -> Sequence[str]:
    return msg.want.partition_refs


def _ticked_want(msg: pb.ScheduleTick) -> tuple[str, ...]:
    return (msg.want.want_id,) if msg.HasField("want") else ()


def _reaction_refs(state: BuildState, msg: pb.ReactionFired) -> Sequence[str]:
    return msg.want.partition_refs


def _reaction_want(msg: pb.ReactionFired) -> tuple[str, ...]:
    return (msg.want.want_id,)


@dataclass(frozen=True)
class EventType:
    """One event type: its `Event.payload` member, its handler and what it names."""

    name: str  # the member of the `Event.payload` oneof (also the event's type in the API and filters)
    check: Check
    apply: Apply
    # The partition refs it is about, read from the state after it was folded (delivery's ordering keys).
    refs: RefsOf = no_refs
    # The wants it is about (their root wants are the roots it serves); None: those of its refs.
    want_ids: WantIdsOf | None = None
    job_run: bool = False  # its message's `job_run_id` names a job run
    # A group member's decision of this type may carry a `fence`: the refs of the partitions it decides
    # about, read before it is folded, whose buckets the member must own (none: membership suffices).
    fence_refs: RefsOf | None = None
    # The step of a job run's life it records, a payload format's run state: "START", "COMPLETE", "FAIL", "ABORT".
    run_phase: str | None = None
    # The small records it may change (BuildState attributes, state/fold/history.py VERSIONED): a version of
    # each is kept whenever it changed, for reads as of a past seq.
    versions: tuple[str, ...] = ()
    # When it changes one record only, the key of that record (read from the event): only its version is
    # compared and kept, instead of every record of `versions` (a tick would otherwise copy every schedule).
    versioned_key: Callable[[pb.Event], str] | None = None
    # Whether it can give a partition a new Live instance (its refs say which): what reactions watch for.
    makes_live: bool = False

    def message(self, event: pb.Event) -> Any:
        """The payload message of `event`, an event of this type."""
        return getattr(event, self.name)


def _run_event(name: str, check: Check, apply: Apply, *, phase: str | None, **more: Any) -> EventType:
    """A job-run event: it names a run, and is about the partitions the run builds."""
    return EventType(name, check, apply, refs=run_refs, job_run=True, run_phase=phase, **more)


# In `Event.payload` order (a test checks it): the lists derived from the rows keep that order.
ROWS: tuple[EventType, ...] = (
    EventType(
        "want_create",
        wants.check_want_create,
        wants.apply_want_create,
        refs=_wanted_refs,
        want_ids=_the_want,
        fence_refs=no_refs,
    ),
    EventType(
        "want_cancel",
        wants.check_want_cancel,
        wants.apply_want_cancel,
        refs=_canceled_refs,
        want_ids=_the_want,
    ),
    _run_event(
        "job_run_buffer",
        job_runs.check_job_run_buffer,
        job_runs.apply_job_run_buffer,
        phase="START",
        fence_refs=_buffered_refs,
        # A scoped decision fixes its namespace's layout: apply_job_run_buffer keeps that version itself,
        # only then (the replay's hot path pays nothing for unscoped runs).
    ),
    _run_event("job_run_heartbeat", job_runs.check_job_run_heartbeat, job_runs.apply_job_run_heartbeat, phase=None),
    _run_event(
        "job_run_success",
        job_runs.check_job_run_success,
        job_runs.apply_job_run_success,
        phase="COMPLETE",
        makes_live=True,
    ),
    _run_event(
        "job_run_failure",
        job_runs.check_job_run_failure,
        job_runs.apply_job_run_failure,
        phase="FAIL",
        fence_refs=run_refs,
    ),
    _run_event("job_run_cancel", job_runs.check_job_run_cancel, job_runs.apply_job_run_cancel, phase="ABORT"),
    # A run that found its inputs missing ended unsuccessfully by itself: FAIL, not ABORT (someone stopped it).
    _run_event(
        "job_run_missing_deps",
        job_runs.check_job_run_missing_deps,
        job_runs.apply_job_run_missing_deps,
        phase="FAIL",
    ),
    EventType("partition_taint", instances.check_partition_taint, instances.apply_partition_taint, refs=_the_ref),
    EventType(
        "partition_observed",
        instances.check_partition_observed,
        instances.apply_partition_observed,
        refs=_the_ref,
        makes_live=True,
    ),
    EventType("instance_retention", instances.check_instance_retention, instances.apply_instance_retention),
    EventType(
        "instances_wait_upstream",
        instances.check_instances_wait_upstream,
        instances.apply_instances_wait_upstream,
        refs=_waiting_refs,
        fence_refs=_waiting_refs,
    ),
    EventType("clock_tick", clock.check_clock_tick, clock.apply_clock_tick),
    EventType(
        "bucket_run_start",
        buckets.check_bucket_run_start,
        buckets.apply_bucket_run_start,
        versions=("bucket_layouts", "bucket_runs"),
    ),
    EventType("bucket_layout", buckets.check_bucket_layout, buckets.apply_bucket_layout, versions=("bucket_layouts",)),
    EventType("group_epoch", group.check_group_epoch, group.apply_group_epoch, versions=("groups", "bucket_layouts")),
    EventType(
        "group_task_message", group.check_group_task_message, group.apply_group_task_message, versions=("groups",)
    ),
    EventType(
        "source_scan_progress",
        sources.check_source_scan_progress,
        sources.apply_source_scan_progress,
        versions=("sources",),
    ),
    EventType(
        "source_scan_request",
        sources.check_source_scan_request,
        sources.apply_source_scan_request,
        versions=("sources",),
    ),
    EventType(
        "subscription_create",
        subscriptions.check_subscription_create,
        subscriptions.apply_subscription_create,
        versions=("subscriptions",),
    ),
    EventType(
        "subscription_change",
        subscriptions.check_subscription_change,
        subscriptions.apply_subscription_change,
        versions=("subscriptions",),
    ),
    EventType(
        "subscription_reshard",
        subscriptions.check_subscription_reshard,
        subscriptions.apply_subscription_reshard,
        versions=("subscriptions",),
    ),
    EventType(
        "subscription_offset_reset",
        subscriptions.check_subscription_offset_reset,
        subscriptions.apply_subscription_offset_reset,
        versions=("subscriptions",),
    ),
    # Not a build event: subscriptions made without event types keep what they always received.
    EventType("partition_gone", sources.check_partition_gone, sources.apply_partition_gone, refs=_the_ref),
    EventType("checks_request", rechecks.check_checks_request, rechecks.apply_checks_request, refs=_requested_refs),
    EventType("checks_rerun", rechecks.check_checks_rerun, rechecks.apply_checks_rerun, refs=_rechecked_refs),
    EventType(
        "schedule_tick",
        schedules.check_schedule_tick,
        schedules.apply_schedule_tick,
        refs=_ticked_refs,
        want_ids=_ticked_want,
        versions=("schedules",),
        versioned_key=lambda event: event.schedule_tick.schedule,
    ),
    EventType(
        "schedule_control",
        schedules.check_schedule_control,
        schedules.apply_schedule_control,
        versions=("schedules",),
        versioned_key=lambda event: event.schedule_control.schedule,
    ),
    EventType(
        "reaction_fired",
        reactions.check_reaction_fired,
        reaction_notes.apply_reaction_fired,
        refs=_reaction_refs,
        want_ids=_reaction_want,
    ),
    EventType("reactions_noted", reaction_notes.check_reactions_noted, reaction_notes.apply_reactions_noted),
)

# The record classes (and enums) a BuildState may hold, besides builtins: nothing else may be in a snapshot.
RECORD_CLASSES: tuple[type, ...] = (
    Instance,
    Want,
    JobRun,
    Rejection,
    InstanceState,
    WantState,
    JobRunState,
    SourceScan,
    ScanRange,
    GroupState,
    TaskState,
    Subscription,
    CompositeTopic,
    StorageTopic,
    schedules.ScheduleRow,
    reaction_notes.PendingRow,
    reaction_notes.ReactionRow,
)

BY_NAME: dict[str, EventType] = {row.name: row for row in ROWS}
# The event types that can make an instance Live, and which refs each may have made Live (read after the fold).
MAKES_LIVE: dict[str, EventType] = {row.name: row for row in ROWS if row.makes_live}
assert all(set(row.versions) <= set(VERSIONED) for row in ROWS), "a row names an attribute that is not versioned"
# Event.payload field name -> (check, apply): the fold's dispatch, read once per event.
# An event type that changes small records keeps their versions after its apply (state/fold/history.py).
HANDLERS: dict[str, tuple[Check, Apply]] = {
    row.name: (row.check, versioned(row.apply, row.versions, row.versioned_key) if row.versions else row.apply)
    for row in ROWS
}
EVENT_TYPES: tuple[str, ...] = tuple(row.name for row in ROWS)
# What a subscription without event types gets; other types (heartbeats, ticks, groups, scans) on request.
BUILD_EVENT_TYPES = subscription_records.BUILD_EVENT_TYPES  # fixed for good: see there
JOB_RUN_EVENT_TYPES: frozenset[str] = frozenset(row.name for row in ROWS if row.job_run)
