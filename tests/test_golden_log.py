"""Events are forever: a log written by schema v1 (tests/data/golden_log_v1.bin) still replays."""

from __future__ import annotations

from golden_log import GOLDEN_BUCKETS, read

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


BUCKET_KINDS = {"want_create", "bucket_run_start", "job_run_buffer", "job_run_success", "bucket_layout"}


def test_the_bucketing_golden_log_replays_with_its_rejections() -> None:
    """Bucket starts (round-robin as first written, static ones with a worker id), scoped runs, a re-shard."""
    payloads = read(GOLDEN_BUCKETS)
    events = [pb.Event.FromString(payload) for payload in payloads]
    assert {event.WhichOneof("payload") for event in events} == BUCKET_KINDS
    state = BuildState(strict=True)
    for seq, payload in enumerate(payloads, 1):
        state.apply_payload(seq, payload)
    assert [(r.seq, r.event_type) for r in state.rejections] == [(6, "bucket_run_start"), (8, "job_run_buffer")]
    assert "namespace 'partbuild' is split into 3 buckets (since seq 2)" in state.rejections[0].reason
    assert "namespace 'partbuild' is split into 2 buckets (since seq 7)" in state.rejections[1].reason
    assert state.bucket_layouts == {"partbuild": (2, 7)}
    assert state.bucket_runs == {"partbuild": 2}  # the static starts left the rotation where round-robin put it
    assert state.job_runs["noop-3-b1-0"].state == JobRunState.SUCCEEDED
    assert state.job_runs["noop-8-b2-0"].state == JobRunState.QUEUED and "noop-7-b2-0" not in state.job_runs
    assert events[2].source.system.worker == "host-a:101:0a0a0a0a"
