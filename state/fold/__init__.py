"""The fold's event handlers, by entity, and the one table that registers them.

`BuildState` (state/build_state.py) holds the data and runs `apply`; what each
event type does lives here. Every handler is two functions:

- check(state, seq, msg, event) -> str | plan. Pure: validates the event
  against the state and resolves every object the apply phase will need.
  A `str` is the rejection reason (the log's audit trail: keep reason texts
  stable); anything else is the plan (a small tuple, or the resolved object
  itself; plans never outlive the event and are never pickled). It never
  mutates anything, so an exception raised here (a bug) can be recorded as a
  rejection with the state unchanged.
- apply(state, seq, plan, event) -> None. Mutates, using only the plan and
  the event's envelope (its timestamp). It makes no lookup that can fail on a
  valid plan: the only lookups left follow the state's own indexes, whose
  targets exist by the fold's invariants. An exception raised here leaves the
  state half-applied; `BuildState.apply` raises it as a `FoldError` and the
  state refuses further events, so it is never served or snapshotted.

Modules:

- transitions: the shared state-machine primitives (new canonical instance,
  instance state changes with want tallies, waiters and the upstream
  live/failed cascades, want refresh and end).
- wants: WantCreate, WantCancel, TTL expiry.
- job_runs: JobRunBuffer, JobRunHeartbeat, JobRunSuccess, JobRunFailure,
  JobRunCancel, JobRunMissingDeps.
- instances: PartitionTaint, PartitionObserved, InstanceRetention,
  InstancesWaitUpstream.
- clock: ClockTick.
- buckets: BucketRunStart, BucketLayout, and the bucket scopes of sharded decisions.
- group: GroupEpoch, GroupTaskMessage (worker groups), and the fences of members' decisions.
- sources: SourceScanProgress (the cursors of connector scans), SourceScanRequest.
- subscriptions: SubscriptionCreate, SubscriptionChange, SubscriptionReshard,
  SubscriptionOffsetReset (webhook subscriptions and their topics' layouts).
- validation: pure helpers of the check phases (id and ref rules, quoting).

Adding an event type means: the
message and its `Event.payload` oneof member in proto/partbuild/v1/events.proto;
one handler (check + apply) in the module of its entity (a new module for a new
entity, whose data is new attributes of `BuildState`); one row in `HANDLERS` below. Nothing else dispatches on event
types. Snapshots pick up the change by themselves: their format fingerprints
every module of this package.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.fold import buckets, clock, group, instances, job_runs, sources, subscriptions, wants

if TYPE_CHECKING:
    from partbuild.state.build_state import BuildState

Check = Callable[["BuildState", int, Any, pb.Event], Any]  # -> rejection reason (str) or plan
Apply = Callable[["BuildState", int, Any, pb.Event], None]

# Event.payload oneof field name -> (check, apply).
HANDLERS: dict[str, tuple[Check, Apply]] = {
    "want_create": (wants.check_want_create, wants.apply_want_create),
    "want_cancel": (wants.check_want_cancel, wants.apply_want_cancel),
    "job_run_buffer": (job_runs.check_job_run_buffer, job_runs.apply_job_run_buffer),
    "job_run_heartbeat": (job_runs.check_job_run_heartbeat, job_runs.apply_job_run_heartbeat),
    "job_run_success": (job_runs.check_job_run_success, job_runs.apply_job_run_success),
    "job_run_failure": (job_runs.check_job_run_failure, job_runs.apply_job_run_failure),
    "job_run_cancel": (job_runs.check_job_run_cancel, job_runs.apply_job_run_cancel),
    "job_run_missing_deps": (job_runs.check_job_run_missing_deps, job_runs.apply_job_run_missing_deps),
    "partition_taint": (instances.check_partition_taint, instances.apply_partition_taint),
    "partition_observed": (instances.check_partition_observed, instances.apply_partition_observed),
    "instance_retention": (instances.check_instance_retention, instances.apply_instance_retention),
    "instances_wait_upstream": (instances.check_instances_wait_upstream, instances.apply_instances_wait_upstream),
    "clock_tick": (clock.check_clock_tick, clock.apply_clock_tick),
    "bucket_run_start": (buckets.check_bucket_run_start, buckets.apply_bucket_run_start),
    "bucket_layout": (buckets.check_bucket_layout, buckets.apply_bucket_layout),
    "group_epoch": (group.check_group_epoch, group.apply_group_epoch),
    "group_task_message": (group.check_group_task_message, group.apply_group_task_message),
    "source_scan_progress": (sources.check_source_scan_progress, sources.apply_source_scan_progress),
    "source_scan_request": (sources.check_source_scan_request, sources.apply_source_scan_request),
    "subscription_create": (subscriptions.check_subscription_create, subscriptions.apply_subscription_create),
    "subscription_change": (subscriptions.check_subscription_change, subscriptions.apply_subscription_change),
    "subscription_reshard": (subscriptions.check_subscription_reshard, subscriptions.apply_subscription_reshard),
    "subscription_offset_reset": (
        subscriptions.check_subscription_offset_reset,
        subscriptions.apply_subscription_offset_reset,
    ),
}
