"""The one table that registers the fold's event handlers: Event.payload field -> (check, apply)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.fold import buckets, clock, group, instances, job_runs, sources, subscriptions, wants

if TYPE_CHECKING:
    from partbuild.state.fold.build_state import BuildState

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
