"""Events are forever: a log written by schema v1 (tests/data/golden_log_v1.bin) still replays."""

from __future__ import annotations

from golden_log import read

from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.build_state import BuildState
from partbuild.state.model import InstanceState, JobRunState, WantState

V1_KINDS = {
    "want_create",
    "want_cancel",
    "job_run_buffer",
    "job_run_heartbeat",
    "job_run_success",
    "job_run_failure",
    "job_run_cancel",
    "job_run_missing_deps",
    "partition_taint",
    "partition_observed",
    "instance_retention",
    "instances_wait_upstream",
    "clock_tick",
}


def test_the_v1_golden_log_replays_without_rejections() -> None:
    payloads = read()
    state = BuildState(strict=True)
    for seq, payload in enumerate(payloads, 1):
        state.apply_payload(seq, payload)
    assert state.head_seq == len(payloads) and state.rejections == []
    kinds = {pb.Event.FromString(payload).WhichOneof("payload") for payload in payloads}
    # Every event type of schema v1 as it was when the file was written (types added later, such as
    # bucket_run_start, belong in a golden log of their own).
    assert kinds == V1_KINDS
    assert state.wants["late"].state == WantState.CANCELED
    assert state.canonical_instance("x/out").state == InstanceState.MISSING  # type: ignore[union-attr]
    assert state.job_runs["x-run"].state == JobRunState.CANCELED
    assert state.canonical_instance("x/in").metadata == {"k": "v"}  # type: ignore[union-attr]
    assert state.want_counts[WantState.SUCCESSFUL] > 50 and state.run_counts[JobRunState.FAILED] > 0
    # The taint superseded a daily and its weekly; retention then dropped both old instances.
    assert state.dropped_instances == 2 and state.instance_counts[InstanceState.TAINTED] == 0
