"""Quality check results in the fold (state/fold/checks.py): their rules, the side table, digest, snapshots, the past.

An outcome (JobRunSuccess, JobRunFailure) may carry the results of the job's checks on each output
instance; the fold keeps them in `BuildState.check_results`, one entry per outcome, and rejects a
success whose results hold a failed blocking check or an errored one.
"""

from __future__ import annotations

import math

import pytest

from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.fold.build_state import BuildState
from partbuild.state.fold.past import PastState
from partbuild.state.fold.records import InstanceState, WantState
from partbuild.state.log.digest import state_digest
from partbuild.state.log.snapshot import decode_state, encode_state

from foldkit import Story

I = InstanceState


def result(
    name: str, passed: bool, *, blocking: bool = True, errored: bool = False, **metrics: float
) -> pb.CheckResult:
    return pb.CheckResult(
        name=name, passed=passed, blocking=blocking, errored=errored, description=f"{name}?", metrics=metrics
    )


def checks(uuid: str, *results: pb.CheckResult) -> pb.InstanceChecks:
    return pb.InstanceChecks(instance_uuid=uuid, results=results)


def success(run_id: str, *checked: pb.InstanceChecks) -> pb.JobRunSuccess:
    return pb.JobRunSuccess(job_run_id=run_id, checks=checked)


def failure(run_id: str, message: str, *checked: pb.InstanceChecks, permanent: bool = True) -> pb.JobRunFailure:
    error_class = pb.ERROR_CLASS_PERMANENT if permanent else pb.ERROR_CLASS_RETRYABLE
    return pb.JobRunFailure(job_run_id=run_id, error_class=error_class, message=message, checks=checked)


def started(s: Story, run_id: str = "r1", *refs: str) -> list[str]:
    s.want(f"w-{run_id}", *(refs or ("d/1",)))
    return s.buffer(run_id, *(refs or ("d/1",)))


def test_a_success_with_a_warning_is_live_and_keeps_its_results_with_the_seq() -> None:
    s = Story()
    (uuid,) = started(s)
    s.ok(
        success(
            "r1", checks(uuid, result("rows_nonzero", True, rows=5), result("urls", False, blocking=False, nulls=2))
        )
    )
    assert s.state.instances[uuid].state == I.LIVE
    assert s.state.check_results == {
        uuid: (
            (
                s.state.head_seq,
                (
                    ("rows_nonzero", True, True, False, "rows_nonzero?", (("rows", 5.0),)),
                    ("urls", False, False, False, "urls?", (("nulls", 2.0),)),
                ),
            ),
        )
    }


@pytest.mark.parametrize(
    ("results", "reason"),
    [
        ((result("rows_nonzero", False),), "it is a failed blocking check"),
        ((result("rows_nonzero", False, errored=True),), "it errored"),
        ((result("rows_nonzero", False, blocking=False, errored=True),), "it errored"),
        ((result("", True),), "empty or longer"),
        ((result("x" * 257, True),), "empty or longer"),
        ((result("a", True), result("a", True)), "listed more than once"),
        ((result("a", True, errored=True),), "both passed and errored"),
        ((result("a", True, rows=math.nan),), "not a finite number"),
        ((result("a", True, rows=math.inf),), "not a finite number"),
    ],
)
def test_a_success_with_invalid_or_failing_results_is_rejected_and_changes_nothing(
    results: tuple[pb.CheckResult, ...], reason: str
) -> None:
    s = Story()
    (uuid,) = started(s)
    s.rejected(success("r1", checks(uuid, *results)), reason)
    assert s.state.check_results == {} and s.state.instances[uuid].state == I.BUILDING
    assert "r1" in s.state.active_run_ids


def test_checks_must_name_the_runs_instances_each_once() -> None:
    s = Story()
    (uuid,) = started(s, "r1", "d/1")
    (other,) = started(s, "r2", "d/2")
    s.rejected(success("r1", checks(other, result("a", True))), "which job run 'r1' does not build")
    s.rejected(success("r1", checks(uuid, result("a", True)), checks(uuid)), "listed more than once")
    s.rejected(failure("r1", "x", checks(other, result("a", False))), "does not build")
    s.rejected(failure("r1", "x", checks(uuid, result("", False))), "empty or longer")
    s.ok(success("r1", checks(uuid, result("a", True))))


def test_a_blocking_failure_fails_the_instance_and_its_wants_with_a_note_naming_the_check() -> None:
    s = Story()
    s.want("weekly", "wk/1")
    s.ok(pb.InstancesWaitUpstream(waits=[pb.InstanceWait(instance_uuid=s.uuid("wk/1"), upstream_refs=["d/1"])]))
    (uuid,) = started(s)
    message = "check rows_nonzero failed on d/1: 0 rows"
    s.ok(failure("r1", message, checks(uuid, result("rows_nonzero", False, rows=0))))
    instance = s.state.instances[uuid]
    assert (instance.state, instance.note) == (I.FAILED, message)
    assert s.istate("wk/1") == I.UPSTREAM_FAILED and s.wstate("w-r1") == WantState.FAILED
    assert s.state.check_results[uuid][0][1] == (
        ("rows_nonzero", False, True, False, "rows_nonzero?", (("rows", 0.0),)),
    )


def test_a_retried_instance_keeps_one_entry_per_checked_outcome_and_reads_of_the_past_see_each() -> None:
    s = Story()
    (uuid,) = started(s)
    s.ok(
        failure("r1", "check a errored: ValueError: x", checks(uuid, result("a", False, errored=True)), permanent=False)
    )
    errored_at = s.state.head_seq
    assert s.state.instances[uuid].state == I.UP_FOR_RETRY
    s.buffer("r2", "d/1")
    s.ok(success("r2", checks(uuid, result("a", True))))
    passed_at = s.state.head_seq
    assert [seq for seq, _ in s.state.check_results[uuid]] == [errored_at, passed_at]
    for seq in range(1, passed_at + 1):
        replay = BuildState(strict=True)
        for at, event in enumerate(s.events[:seq], 1):
            replay.apply(at, event)
        past = PastState(s.state, seq, lambda: 0)
        assert dict(past.check_results) == replay.check_results, seq
        assert (uuid in past.check_results) == (seq >= errored_at)
        if seq < errored_at:
            with pytest.raises(KeyError):
                past.check_results[uuid]
    assert len(PastState(s.state, errored_at, lambda: 0).check_results[uuid]) == 1


def test_the_results_are_digested_and_survive_a_snapshot() -> None:
    def story(rows: float) -> Story:
        s = Story()
        (uuid,) = started(s)
        s.ok(success("r1", checks(uuid, result("a", True, rows=rows))))
        return s

    one, other = story(1), story(2)
    assert state_digest(one.state) != state_digest(other.state)  # a metric is part of the digest
    plain = Story()
    started(plain)
    plain.ok(pb.JobRunSuccess(job_run_id="r1"))
    assert plain.state.check_results == {}
    assert state_digest(plain.state) != state_digest(one.state)
    restored = decode_state(encode_state(one.state))
    assert restored.check_results == one.state.check_results
    assert state_digest(restored) == state_digest(one.state)


def test_retention_drops_the_results_of_what_it_drops() -> None:
    s = Story()
    (uuid,) = started(s)
    s.ok(success("r1", checks(uuid, result("a", True))))
    s.ok(pb.PartitionTaint(partition_ref="d/1", reason="bad"))
    s.want("again", "d/1")
    assert s.uuid("d/1") != uuid and s.state.instances[uuid].superseded_seq
    kept = s.buffer("r2", "d/1")[0]
    s.ok(success("r2", checks(kept, result("a", True))))
    s.ok(pb.InstanceRetention(drop_superseded_before_seq=s.state.head_seq + 1))
    assert uuid not in s.state.instances
    assert list(s.state.check_results) == [kept]
