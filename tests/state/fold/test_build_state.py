"""BuildState fold: the instance-identity scenarios (wants, dep misses, taints, retries) and each event's rules."""

from __future__ import annotations

import uuid as uuidlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.fold.build_state import BuildState
from partbuild.state.fold.records import InstanceState as I
from partbuild.state.fold.records import JobRunState as R
from partbuild.state.fold.records import WantState as W
from partbuild.state.log.digest import state_digest
from partbuild.state.log.events import envelope
from partbuild.state.queries.lineage import attempts_for, builder_of, lineage, ref_history, wants_for
from partbuild.state.rules.ids import INSTANCE_NAMESPACE, instance_uuid

from foldkit import Story

BETA = "data/beta"
ALPHA = "data/alpha"


def test_instance_uuid_is_uuid5_of_log_position() -> None:
    assert instance_uuid(42, BETA) == str(uuidlib.uuid5(INSTANCE_NAMESPACE, f"42/{BETA}"))
    assert instance_uuid(42, BETA) != instance_uuid(43, BETA)
    assert instance_uuid(42, BETA) != instance_uuid(42, ALPHA)


@given(seq=st.integers(min_value=1, max_value=2**63), ref=st.text(min_size=1, max_size=200))
def test_instance_uuid_equals_the_standard_uuid5_for_any_position_and_ref(seq: int, ref: str) -> None:
    """The hand-rolled formatting (version and variant digits) matches the uuid module's exactly."""
    assert instance_uuid(seq, ref) == str(uuidlib.uuid5(INSTANCE_NAMESPACE, f"{seq}/{ref}"))


def test_seed_concrete_bug_two_wants_on_building_partition_then_dep_miss() -> None:
    """Seed 003's bug: want 2 arrives while the partition builds; a dep miss must move both wants."""
    s = Story()
    s.want("w1", BETA)
    assert s.wstate("w1") == W.IDLE
    (uuid1,) = s.buffer("job-1", BETA)
    assert s.wstate("w1") == W.BUILDING
    s.want("w2", BETA)
    # Want 2 joins the canonical instance that is already building: directly Building.
    assert s.wstate("w2") == W.BUILDING
    assert s.uuid(BETA) == uuid1
    s.missing("job-1", ALPHA)
    assert s.wstate("w1") == W.UPSTREAM_BUILDING
    assert s.wstate("w2") == W.UPSTREAM_BUILDING
    assert s.istate(BETA) == I.UPSTREAM_BUILDING
    assert s.state.job_runs["job-1"].state == R.DEP_MISS
    assert s.state.waiting_for(ALPHA) == [uuid1]


def test_more_wants_join_the_same_build_without_a_new_instance() -> None:
    s = Story()
    s.want("w1", BETA)
    (uuid1,) = s.buffer("job-1", BETA)
    for n in range(2, 5):
        s.want(f"w{n}", BETA)
    assert {s.wstate(f"w{n}") for n in range(1, 5)} == {W.BUILDING}
    assert [i.uuid for i in ref_history(s.state, BETA)] == [uuid1]
    s.succeed("job-1")
    assert {s.wstate(f"w{n}") for n in range(1, 5)} == {W.SUCCESSFUL}
    assert s.state.wants["w3"].satisfied_by == (uuid1,)


def test_dep_miss_then_derivative_want_then_retry_succeeds() -> None:
    s = Story()
    s.want("w1", BETA)
    (beta_uuid,) = s.buffer("job-1", BETA)
    s.missing("job-1", ALPHA)
    s.derivative("w1-alpha", "w1", "job-1", ALPHA)
    child = s.state.wants["w1-alpha"]
    assert child.parent_want_id == "w1" and child.root_want_id == "w1" and child.source == "job_run:job-1"
    assert s.state.wants["w1"].children == ["w1-alpha"]
    alpha_uuid = s.build("job-2", ALPHA)
    assert s.wstate("w1-alpha") == W.SUCCESSFUL
    # The waiting instance is schedulable again; the parent want is back to Idle.
    assert s.istate(BETA) == I.MISSING and s.instance(BETA).waiting_on is None
    assert s.wstate("w1") == W.IDLE
    s.buffer("job-3", BETA)
    s.succeed("job-3", [alpha_uuid])
    assert s.wstate("w1") == W.SUCCESSFUL
    assert s.instance(BETA).inputs == (alpha_uuid,)
    assert [r.job_run_id for r in attempts_for(s.state, beta_uuid)] == ["job-1", "job-3"]
    assert builder_of(s.state, beta_uuid).job_run_id == "job-3"  # type: ignore[union-attr]


def test_multi_hop_dep_miss_waits_for_every_missing_ref() -> None:
    s = Story()
    s.want("w1", "c")
    s.buffer("run-c", "c")
    s.missing("run-c", "b1", "b2")
    s.derivative("w-b", "w1", "run-c", "b1", "b2")
    s.buffer("run-b", "b1", "b2")
    s.missing("run-b", "a")
    s.derivative("w-a", "w-b", "run-b", "a")
    assert s.state.wants["w-a"].root_want_id == "w1"
    assert {s.wstate(w) for w in ("w1", "w-b")} == {W.UPSTREAM_BUILDING}
    s.observe("a")
    assert s.wstate("w-a") == W.SUCCESSFUL
    assert s.istate("b1") == I.MISSING and s.istate("b2") == I.MISSING
    s.buffer("run-b1", "b1")
    s.succeed("run-b1")
    assert s.istate("c") == I.UPSTREAM_BUILDING  # still waits for b2
    assert s.instance("c").waiting_on == {"b2": None}
    s.buffer("run-b2", "b2")
    s.succeed("run-b2")
    assert s.istate("c") == I.MISSING


def test_dep_miss_on_an_already_live_upstream_does_not_wait() -> None:
    s = Story()
    s.observe(ALPHA)
    s.want("w1", BETA)
    s.buffer("job-1", BETA)
    s.missing("job-1", ALPHA)
    assert s.istate(BETA) == I.MISSING
    assert s.state.waiting_for(ALPHA) == []


def test_rebuild_after_taint_makes_new_instance_and_keeps_old_queryable() -> None:
    """Seed 003's rebuild scenario."""
    s = Story()
    s.want("w1", BETA)
    uuid1 = s.build("job-1", BETA)
    assert s.wstate("w1") == W.SUCCESSFUL
    s.ok(pb.PartitionTaint(partition_ref=BETA, reason="bad rows"))
    uuid2 = s.uuid(BETA)
    assert uuid2 != uuid1
    old = s.state.instances[uuid1]
    assert old.state == I.TAINTED and old.note == "bad rows" and old.superseded_seq > 0
    assert s.istate(BETA) == I.MISSING and s.instance(BETA).previous_uuid == uuid1
    # A fulfilled want stays fulfilled: it records what satisfied it.
    assert s.wstate("w1") == W.SUCCESSFUL and s.state.wants["w1"].satisfied_by == (uuid1,)
    s.want("w2", BETA)
    assert s.uuid(BETA) == uuid2  # new wants join the new canonical instance
    s.buffer("job-2", BETA)
    s.succeed("job-2")
    assert [i.uuid for i in ref_history(s.state, BETA)] == [uuid2, uuid1]
    assert builder_of(s.state, uuid1).job_run_id == "job-1"  # type: ignore[union-attr]
    assert [w.want_id for w in wants_for(s.state, BETA)] == ["w1", "w2"]


def test_taint_cascades_to_live_consumers_unless_only_this_ref() -> None:
    s = Story()
    s.observe("raw")
    raw = s.uuid("raw")
    s.want("w-daily", "daily")
    daily = s.build("run-d", "daily", [raw])
    s.want("w-weekly", "weekly")
    weekly = s.build("run-w", "weekly", [daily])
    s.ok(pb.PartitionTaint(partition_ref="daily", reason="late data"))
    assert s.state.instances[daily].state == I.TAINTED
    assert s.state.instances[weekly].state == I.TAINTED
    assert s.state.instances[weekly].note == "upstream daily tainted: late data"
    assert s.istate("weekly") == I.MISSING and s.istate("raw") == I.LIVE

    s.want("w2-daily", "daily")
    daily2 = s.build("run-d2", "daily", [raw])
    s.ok(pb.PartitionTaint(partition_ref="raw", reason="x", only_this_ref=True))
    assert s.state.instances[daily2].state == I.LIVE


def test_retryable_failure_then_success() -> None:
    s = Story()
    s.want("w1", BETA)
    s.buffer("job-1", BETA)
    s.ok(pb.JobRunHeartbeat(job_run_id="job-1"))
    assert s.state.job_runs["job-1"].state == R.RUNNING
    s.fail("job-1", permanent=False, message="executor lost")
    assert s.istate(BETA) == I.UP_FOR_RETRY and s.wstate("w1") == W.IDLE
    run = s.state.job_runs["job-1"]
    assert (run.state, run.error_class, run.error_message) == (R.FAILED, "retryable", "executor lost")
    s.buffer("job-2", BETA)
    s.succeed("job-2")
    assert s.wstate("w1") == W.SUCCESSFUL


def test_permanent_failure_fails_wants_and_downstream_waiters() -> None:
    s = Story()
    s.want("w1", "weekly")
    s.buffer("run-w", "weekly")
    s.missing("run-w", "daily")
    s.derivative("w-d", "w1", "run-w", "daily")
    s.buffer("run-d", "daily")
    s.fail("run-d", permanent=True, message="schema mismatch")
    assert s.wstate("w-d") == W.FAILED
    assert s.istate("weekly") == I.UPSTREAM_FAILED
    assert s.instance("weekly").note == "upstream daily failed"
    assert s.wstate("w1") == W.UPSTREAM_FAILED
    # Asking again is a new attempt: a fresh instance replaces the failed one.
    failed = s.uuid("daily")
    s.want("w-again", "daily")
    assert s.uuid("daily") != failed and s.istate("daily") == I.MISSING
    assert s.wstate("w-again") == W.IDLE


def test_want_on_live_partition_is_successful_at_once() -> None:
    s = Story()
    s.observe(ALPHA)
    s.want("w1", ALPHA)
    assert s.wstate("w1") == W.SUCCESSFUL
    assert s.state.counts()["wants"]["successful"] == 1


def test_want_state_priority_across_refs() -> None:
    s = Story()
    s.observe("live")
    s.want("w", "live", "a", "b")
    assert s.wstate("w") == W.IDLE
    s.buffer("run-a", "a")
    assert s.wstate("w") == W.BUILDING
    s.missing("run-a", "up")
    assert s.wstate("w") == W.UPSTREAM_BUILDING
    s.buffer("run-b", "b")
    assert s.wstate("w") == W.BUILDING  # Building outranks UpstreamBuilding
    s.fail("run-b", permanent=True)
    assert s.wstate("w") == W.FAILED


def test_cancel_want_cascades_to_active_derivatives() -> None:
    s = Story()
    s.want("w1", "c")
    s.buffer("run-c", "c")
    s.missing("run-c", "b")
    s.derivative("w-b", "w1", "run-c", "b")
    s.ok(pb.WantCancel(want_id="w1", reason="not needed"))
    assert s.wstate("w1") == W.CANCELED and s.state.wants["w1"].cancel_reason == "not needed"
    assert s.wstate("w-b") == W.CANCELED
    assert s.state.wants["w-b"].cancel_reason == "parent want w1 canceled"
    s.rejected(pb.WantCancel(want_id="w1"), "already canceled")


def test_ttl_expiry_measured_from_data_timestamp_on_the_log_clock() -> None:
    s = Story(start_ms=10_000_000)
    s.want("w1", BETA, data_timestamp_ms=9_000_000, ttl_seconds=5_000)  # expires at 14,000,000
    s.want("w2", ALPHA, ttl_seconds=60)  # data_timestamp defaults to the event time
    assert s.wstate("w1") == W.IDLE
    s.observe("other", "/x")  # advances the clock by 1 s: nothing expires yet
    assert s.wstate("w1") == W.IDLE
    assert s.state.next_expiry_ms() == 10_062_000  # w2: created at 10,002,000 with a 60 s TTL
    s.ok(pb.ClockTick(), advance_ms=4_000_000)  # time passing alone expires wants
    assert s.wstate("w1") == W.EXPIRED and s.wstate("w2") == W.EXPIRED
    # An expired want no longer moves with its partition.
    s.buffer("job-1", BETA)
    assert s.wstate("w1") == W.EXPIRED
    assert s.state.counts()["wants"]["expired"] == 2


def test_rejected_event_with_wild_timestamp_expires_nothing() -> None:
    s = Story()
    s.want("w1", BETA, ttl_seconds=10)
    event = envelope(pb.WantCancel(want_id="nope"), timestamp_ms=10**15)
    assert s.state.apply(2, event) is not None
    assert s.wstate("w1") == W.IDLE


def test_observed_source_partition_lifecycle() -> None:
    s = Story()
    s.want("w1", "raw/a")
    waiting = s.uuid("raw/a")
    s.observe("raw/a", "/data/a/v1")
    assert s.uuid("raw/a") == waiting and s.istate("raw/a") == I.LIVE
    assert s.wstate("w1") == W.SUCCESSFUL
    s.rejected(pb.PartitionObserved(partition_ref="raw/a", location="/data/a/v1"), "already Live")
    s.observe("raw/a", "/data/a/v2")  # a new version of the source data
    assert s.uuid("raw/a") != waiting and s.instance("raw/a").location == "/data/a/v2"
    assert s.instance("raw/a").previous_uuid == waiting


@pytest.mark.parametrize(
    ("payload", "reason"),
    [
        (pb.WantCreate(want_id="", partition_refs=["a"]), "want_id is empty"),
        (pb.WantCreate(want_id="w", partition_refs=[]), "no partition refs"),
        (pb.WantCreate(want_id="w", partition_refs=[""]), "partition ref is empty"),
        (pb.WantCreate(want_id="w", partition_refs=["a\x00b"]), "control character"),
        (pb.WantCreate(want_id="w", partition_refs=["x" * 4097]), "longer than 4096 bytes"),
        (pb.WantCreate(want_id="w", partition_refs=["é" * 2049]), "longer than 4096 bytes"),
        (pb.WantCreate(want_id="w", partition_refs=["a", "a"]), "more than once"),
        (pb.WantCreate(want_id="w", partition_refs=["a"], ttl_seconds=-1), "must not be negative"),
        (pb.WantCreate(want_id="w", partition_refs=["a"], parent_want_id="ghost"), "does not exist"),
        (pb.WantCreate(want_id="w", partition_refs=["a"], root_want_id="r"), "parent_want_id is not"),
        (pb.WantCancel(want_id="ghost"), "does not exist"),
        (pb.JobRunBuffer(job_run_id="r", job_label="j", instance_uuids=[]), "no partition instances"),
        (pb.JobRunBuffer(job_run_id="r", job_label="", instance_uuids=["x"]), "job_label is empty"),
        (pb.JobRunBuffer(job_run_id="r", job_label="j", instance_uuids=["not-a-uuid"]), "unknown partition"),
        (pb.JobRunHeartbeat(job_run_id="ghost"), "does not exist"),
        (pb.JobRunSuccess(job_run_id="ghost"), "does not exist"),
        (pb.JobRunFailure(job_run_id="ghost"), "does not exist"),
        (pb.JobRunCancel(job_run_id="ghost"), "does not exist"),
        (pb.JobRunMissingDeps(job_run_id="ghost", missing_refs=["a"]), "does not exist"),
        (pb.PartitionTaint(partition_ref="never"), "no instance to taint"),
        (pb.PartitionObserved(partition_ref="raw", location=""), "no location"),
        (pb.InstanceRetention(drop_superseded_created_before_seq=0), "must be positive"),
    ],
)
def test_invalid_events_are_rejected_with_a_reason_and_change_nothing(payload: object, reason: str) -> None:
    s = Story()
    s.want("w0", "a0")
    before = state_digest(s.state)
    s.rejected(payload, reason)  # type: ignore[arg-type]
    assert [r.seq for r in s.state.rejections] == [2]
    # Same entities as before: only head_seq and the rejection list moved.
    s.state.rejections.clear()
    s.state.head_seq -= 1
    assert state_digest(s.state) == before


def test_job_run_rules() -> None:
    s = Story()
    s.want("w1", "a", "b")
    ua, ub = s.buffer("run-1", "a", "b")
    s.rejected(pb.JobRunBuffer(job_run_id="run-1", job_label="j", instance_uuids=[ua]), "already exists")
    s.rejected(pb.JobRunBuffer(job_run_id="run-2", job_label="j", instance_uuids=[ua]), "not buildable")
    s.rejected(pb.JobRunSuccess(job_run_id="run-1", outputs=[pb.OutputResult(instance_uuid="zz")]), "does not build")
    s.rejected(pb.JobRunSuccess(job_run_id="run-1", input_instance_uuids=[ua]), "input of its own build")
    s.rejected(pb.JobRunMissingDeps(job_run_id="run-1", missing_refs=["a"]), "missing input of its own build")
    s.ok(
        pb.JobRunSuccess(
            job_run_id="run-1",
            outputs=[pb.OutputResult(instance_uuid=ua, location="/a", row_count=5, bytes=9, metadata={"k": "v"})],
        )
    )
    a = s.state.instances[ua]
    assert (a.location, a.row_count, a.byte_count, a.metadata, a.built_by) == ("/a", 5, 9, {"k": "v"}, "run-1")
    assert s.state.instances[ub].location is None and s.state.instances[ub].state == I.LIVE
    s.rejected(pb.JobRunHeartbeat(job_run_id="run-1"), "already succeeded")


def test_cancel_run_returns_instances_to_missing() -> None:
    s = Story()
    s.want("w1", BETA)
    s.buffer("run-1", BETA)
    s.ok(pb.JobRunCancel(job_run_id="run-1", reason="operator"))
    assert s.istate(BETA) == I.MISSING and s.wstate("w1") == W.IDLE
    assert s.state.job_runs["run-1"].cancel_reason == "operator"


def test_lineage_upstream_and_downstream_to_depth() -> None:
    s = Story()
    s.observe("raw/1")
    s.observe("raw/2")
    raws = [s.uuid("raw/1"), s.uuid("raw/2")]
    s.want("w", "daily/1", "daily/2")
    s.buffer("run-d", "daily/1", "daily/2")
    d1, d2 = s.uuid("daily/1"), s.uuid("daily/2")
    s.ok(
        pb.JobRunSuccess(
            job_run_id="run-d",
            outputs=[
                pb.OutputResult(instance_uuid=d1, input_instance_uuids=[raws[0]]),
                pb.OutputResult(instance_uuid=d2, input_instance_uuids=[raws[1]]),
            ],
        )
    )
    s.want("ww", "weekly")
    weekly = s.build("run-w", "weekly", [d1, d2])
    up = lineage(s.state, weekly, direction="upstream", depth=2)
    assert set(up.nodes) == {weekly, d1, d2, *raws}
    assert set(up.edges) == {(d1, weekly), (d2, weekly), (raws[0], d1), (raws[1], d2)}
    assert up.depth_of[raws[0]] == 2
    assert set(lineage(s.state, weekly, direction="upstream", depth=1).nodes) == {weekly, d1, d2}
    down = lineage(s.state, raws[0], direction="downstream", depth=5)
    assert set(down.nodes) == {raws[0], d1, weekly}
    assert list(s.state.instances[raws[0]].consumers or ()) == [d1]
    with pytest.raises(KeyError):
        lineage(s.state, "ghost")


def test_retention_drops_only_old_superseded_instances() -> None:
    s = Story()
    s.want("w1", BETA)
    first = s.build("run-1", BETA)
    s.ok(pb.PartitionTaint(partition_ref=BETA))
    second = s.uuid(BETA)
    cutoff_seq = s.instance(BETA).created_seq  # created by the taint event
    s.want("w2", BETA)
    s.build("run-2", BETA)
    s.ok(pb.PartitionTaint(partition_ref=BETA))
    s.ok(pb.InstanceRetention(drop_superseded_created_before_seq=cutoff_seq))
    assert first not in s.state.instances  # superseded and old: dropped
    assert second in s.state.instances  # superseded but newer than the cutoff: kept
    assert s.state.dropped_instances == 1
    assert [i.uuid for i in ref_history(s.state, BETA)][-1] == second
    assert s.state.counts()["instances"]["tainted"] == 1


def test_unparseable_payload_is_a_rejection() -> None:
    state = BuildState(strict=True)
    reason = state.apply_payload(1, b"\xff\xff\xff")
    assert reason is not None and "not a partbuild.v1.Event" in reason
    assert state.head_seq == 1 and state.rejections[0].event_type == "unparseable"
    assert state.apply(2, pb.Event()) == "event has no payload of a type this version knows"


def test_seq_must_increase() -> None:
    state = BuildState()
    state.apply(5, envelope(pb.WantCancel(want_id="x")))
    with pytest.raises(ValueError, match="not after head seq 5"):
        state.apply(5, envelope(pb.WantCancel(want_id="x")))


def test_instances_wait_upstream_before_any_run() -> None:
    """The orchestrator's pre-check: wanted instances wait for inputs without a job run."""
    s = Story()
    s.observe("raw/1")
    s.want("w", "daily/1", "daily/2")
    d1, d2 = s.uuid("daily/1"), s.uuid("daily/2")
    wait = pb.InstancesWaitUpstream(
        waits=[
            pb.InstanceWait(instance_uuid=d1, upstream_refs=["raw/1"]),  # already Live: no wait
            pb.InstanceWait(instance_uuid=d2, upstream_refs=["raw/2", "raw/1"]),
        ]
    )
    s.ok(wait)
    assert s.istate("daily/1") == I.MISSING
    assert s.istate("daily/2") == I.UPSTREAM_BUILDING and s.instance("daily/2").waiting_on == {"raw/2": None}
    assert s.wstate("w") == W.UPSTREAM_BUILDING
    s.rejected(pb.InstancesWaitUpstream(waits=[pb.InstanceWait(instance_uuid=d2, upstream_refs=["x"])]), "schedulable")
    s.rejected(
        pb.InstancesWaitUpstream(waits=[pb.InstanceWait(instance_uuid=d1, upstream_refs=["daily/1"])]), "its own build"
    )
    s.rejected(pb.InstancesWaitUpstream(), "lists no instances")
    s.observe("raw/2")
    assert s.istate("daily/2") == I.MISSING and s.wstate("w") == W.IDLE


def test_active_run_index_and_update_time() -> None:
    s = Story()
    s.want("w", "a", "b")
    s.buffer("r1", "a")
    s.buffer("r2", "b")
    assert list(s.state.active_run_ids) == ["r1", "r2"]
    s.fail("r1", permanent=False)
    assert list(s.state.active_run_ids) == ["r2"]
    assert s.state.job_runs["r1"].updated_ms == s.clock_ms
