"""A partition is the unit of success (issue 34): per-output failures, split batches, the fold's gate, and stale
instances that keep serving readers until a successor goes Live."""

from __future__ import annotations

from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.fold.build_state import BuildState
from partbuild.state.fold.past import PastState, served_at
from partbuild.state.fold.records import InstanceState, WantState
from partbuild.state.log.digest import state_digest

from foldkit import Story

PERMANENT = pb.ERROR_CLASS_PERMANENT
RETRYABLE = pb.ERROR_CLASS_RETRYABLE


def _batch(story: Story, run_id: str, refs: list[str], **buffer: object) -> list[str]:
    story.want(f"want-{run_id}", *refs)
    uuids = [story.uuid(ref) for ref in refs]
    story.ok(pb.JobRunBuffer(job_run_id=run_id, job_label="daily", instance_uuids=uuids, **buffer))
    return uuids


def _passed(uuid: str, *names: str) -> pb.InstanceChecks:
    return pb.InstanceChecks(
        instance_uuid=uuid, results=[pb.CheckResult(name=name, passed=True, blocking=True) for name in names]
    )


def test_a_success_with_a_failed_output_makes_the_others_live_and_the_failed_one_fails_alone() -> None:
    story = Story()
    good, bad, flaky = _batch(story, "r1", ["d/1", "d/2", "d/3"])
    story.ok(
        pb.JobRunSuccess(
            job_run_id="r1",
            failed_outputs=[
                pb.OutputFailure(instance_uuid=bad, error_class=PERMANENT, message="corrupt footer in d/2"),
                pb.OutputFailure(instance_uuid=flaky, error_class=RETRYABLE, message="timeout"),
            ],
        )
    )
    state = story.state
    assert state.instances[good].state == InstanceState.LIVE
    assert (state.instances[bad].state, state.instances[bad].note) == (InstanceState.FAILED, "corrupt footer in d/2")
    assert (state.instances[flaky].state, state.instances[flaky].note) == (InstanceState.UP_FOR_RETRY, "timeout")
    assert state.job_runs["r1"].failed_outputs == (bad, flaky)
    assert state.instances[good].note is None  # a batch-mate never carries another partition's error


def test_a_success_refuses_an_output_both_written_and_failed_and_one_where_every_output_failed() -> None:
    story = Story()
    one, two = _batch(story, "r1", ["d/1", "d/2"])
    failures = [pb.OutputFailure(instance_uuid=uuid, error_class=PERMANENT, message="x") for uuid in (one, two)]
    story.rejected(pb.JobRunSuccess(job_run_id="r1", failed_outputs=failures), "needs an output that did not fail")
    story.rejected(
        pb.JobRunSuccess(
            job_run_id="r1", outputs=[pb.OutputResult(instance_uuid=one, location="/x")], failed_outputs=failures[:1]
        ),
        "both described as written and listed as failed",
    )


def test_a_failed_blocking_check_is_accepted_on_the_output_it_failed_only() -> None:
    story = Story()
    one, two = _batch(story, "r1", ["d/1", "d/2"])
    bad_check = pb.InstanceChecks(
        instance_uuid=two, results=[pb.CheckResult(name="not_null", passed=False, blocking=True)]
    )
    story.rejected(pb.JobRunSuccess(job_run_id="r1", checks=[bad_check]), "a success cannot carry check")
    story.ok(
        pb.JobRunSuccess(
            job_run_id="r1",
            checks=[bad_check],
            failed_outputs=[pb.OutputFailure(instance_uuid=two, error_class=PERMANENT, message="check not_null")],
        )
    )
    assert story.state.instances[one].state == InstanceState.LIVE
    assert story.state.instances[two].state == InstanceState.FAILED


def test_the_fold_gates_outputs_on_the_blocking_checks_their_run_was_buffered_with() -> None:
    story = Story()
    one, two = _batch(story, "r1", ["d/1", "d/2"], blocking_checks=["rows", "keys"])
    story.rejected(pb.JobRunSuccess(job_run_id="r1"), "without a passing result of blocking check 'rows'")
    story.rejected(
        pb.JobRunSuccess(job_run_id="r1", checks=[_passed(one, "rows", "keys"), _passed(two, "rows")]),
        "blocking check 'keys'",
    )
    # An output that failed on its own needs none: it does not go Live.
    story.ok(
        pb.JobRunSuccess(
            job_run_id="r1",
            checks=[_passed(one, "rows", "keys")],
            failed_outputs=[pb.OutputFailure(instance_uuid=two, error_class=RETRYABLE, message="late")],
        )
    )
    assert story.state.instances[one].state == InstanceState.LIVE


def test_a_split_batch_goes_up_for_retry_whatever_its_error_class_with_a_note_of_its_own() -> None:
    story = Story()
    uuids = _batch(story, "r1", ["d/1", "d/2", "d/3"])
    story.ok(pb.JobRunFailure(job_run_id="r1", error_class=PERMANENT, message="Py4JJavaError: o1.parquet", split=True))
    for uuid in uuids:
        instance = story.state.instances[uuid]
        assert instance.state == InstanceState.UP_FOR_RETRY
        assert "Py4J" not in (instance.note or "") and "batch of 3 failed as a whole" in (instance.note or "")
    assert story.state.job_runs["r1"].split is True


def test_a_run_of_one_output_cannot_be_split() -> None:
    story = Story()
    _batch(story, "r1", ["d/1"])
    story.rejected(pb.JobRunFailure(job_run_id="r1", message="x", split=True), "can be split")


def _stale_story(serve_stale: bool) -> tuple[Story, str, str]:
    """raw/1 observed, daily d/1 built from it by a job that serves stale data (or not), then raw/1 changes."""
    story = Story()
    story.ok(pb.PartitionObserved(partition_ref="raw/1", location="/raw/1/v1", version="v1"))
    raw = story.uuid("raw/1")
    (daily,) = _batch(story, "r1", ["d/1"], serve_stale=serve_stale)
    story.ok(pb.JobRunSuccess(job_run_id="r1", input_instance_uuids=[raw]))
    story.ok(pb.PartitionObserved(partition_ref="raw/1", location="/raw/1/v2", version="v2"))
    return story, daily, raw


def test_new_upstream_data_makes_a_live_instance_stale_and_it_keeps_serving_until_its_successor_goes_live() -> None:
    story, old, _ = _stale_story(serve_stale=True)
    state = story.state
    successor = story.uuid("d/1")
    assert successor != old
    assert state.instances[old].state == InstanceState.LIVE
    assert state.served_instance("d/1") is state.instances[old]
    assert "stale: upstream raw/1 has new data" in (state.instances[old].note or "")
    stale_seq = state.head_seq
    # The successor is built, fails once: readers still get the old one.
    story.want("w2", "d/1")
    story.ok(pb.JobRunBuffer(job_run_id="r2", job_label="daily", instance_uuids=[successor], serve_stale=True))
    story.ok(pb.JobRunFailure(job_run_id="r2", error_class=RETRYABLE, message="boom"))
    assert state.served_instance("d/1") is state.instances[old]
    story.ok(pb.JobRunBuffer(job_run_id="r3", job_label="daily", instance_uuids=[successor], serve_stale=True))
    story.ok(pb.JobRunSuccess(job_run_id="r3", input_instance_uuids=[story.uuid("raw/1")]))
    switched = state.head_seq
    assert state.served_instance("d/1") is state.instances[successor]  # the pointer moved in that one event
    assert state.serving == {}
    # As of any seq, reads of the past tell the same.
    assert served_at(state, "d/1", stale_seq - 1) == old
    assert served_at(state, "d/1", stale_seq) == old
    assert served_at(state, "d/1", switched - 1) == old
    assert served_at(state, "d/1", switched) == successor
    assert PastState(state, stale_seq, lambda: 0).serving == {"d/1": old}


def test_a_job_that_withdraws_on_upstream_change_is_tainted_as_before() -> None:
    story, old, _ = _stale_story(serve_stale=False)
    assert story.state.instances[old].state == InstanceState.TAINTED
    assert story.state.served_instance("d/1") is None


def test_a_persons_taint_withdraws_a_stale_instance_still_serving() -> None:
    story, old, _ = _stale_story(serve_stale=True)
    successor = story.uuid("d/1")
    story.ok(pb.PartitionTaint(partition_ref="d/1", reason="wrong numbers"))
    state = story.state
    assert state.instances[old].state == InstanceState.TAINTED
    assert story.uuid("d/1") == successor  # its successor was canonical already
    assert state.served_instance("d/1") is None and state.serving == {}
    assert served_at(state, "d/1", state.head_seq) is None
    assert served_at(state, "d/1", state.head_seq - 1) == old


def test_keep_serving_taint_makes_the_named_instance_stale_and_its_consumers_too() -> None:
    story = Story()
    (daily,) = _batch(story, "r1", ["d/1"], serve_stale=True)
    story.ok(pb.JobRunSuccess(job_run_id="r1"))
    story.want("wm", "m/1")
    monthly = story.uuid("m/1")
    story.ok(pb.JobRunBuffer(job_run_id="r2", job_label="monthly", instance_uuids=[monthly], serve_stale=True))
    story.ok(pb.JobRunSuccess(job_run_id="r2", input_instance_uuids=[daily]))
    story.ok(pb.PartitionTaint(partition_ref="d/1", reason="code changed", keep_serving=True))
    state = story.state
    assert state.serving == {"d/1": daily, "m/1": monthly}
    assert all(state.instances[uuid].state == InstanceState.LIVE for uuid in (daily, monthly))
    # A stale instance has its successor already: keeping it serving again is refused.
    story.rejected(pb.PartitionTaint(partition_ref="d/1", keep_serving=True), "only a Live instance")


def test_a_build_that_read_an_input_made_stale_meanwhile_does_not_go_live() -> None:
    story = Story()
    (daily,) = _batch(story, "r1", ["d/1"], serve_stale=True)
    story.ok(pb.JobRunSuccess(job_run_id="r1"))
    story.want("wm", "m/1")
    story.ok(pb.JobRunBuffer(job_run_id="r2", job_label="monthly", instance_uuids=[story.uuid("m/1")]))
    story.ok(pb.PartitionTaint(partition_ref="d/1", reason="code changed", keep_serving=True))
    story.ok(pb.JobRunSuccess(job_run_id="r2", input_instance_uuids=[daily]))
    assert story.instance("m/1").state == InstanceState.MISSING  # a fresh instance is wanted instead


def test_retention_keeps_a_stale_instance_while_it_serves() -> None:
    story, old, _ = _stale_story(serve_stale=True)
    story.ok(pb.InstanceRetention(drop_superseded_before_seq=story.state.head_seq + 1))
    assert old in story.state.instances
    assert story.state.served_instance("d/1") is story.state.instances[old]


def test_a_want_of_a_stale_ref_waits_for_its_successor() -> None:
    story, _, _ = _stale_story(serve_stale=True)
    story.want("w2", "d/1")
    assert story.state.wants["w2"].state == WantState.IDLE


def test_replay_of_a_stale_period_gives_the_same_digest() -> None:
    story, _, _ = _stale_story(serve_stale=True)
    story.ok(pb.PartitionTaint(partition_ref="d/1", reason="bad"))
    replayed = BuildState()
    for seq, event in enumerate(story.events, start=1):
        replayed.apply(seq, event)
    assert state_digest(replayed) == state_digest(story.state)
