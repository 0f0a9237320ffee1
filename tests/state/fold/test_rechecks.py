"""Checks run again on Live instances in the fold (state/fold/rechecks.py): requests, answers, the taint, the past.

A ChecksRequest names a Live instance a job built; one ChecksRerun answers it, recording its results
with the instance's other check results; a PartitionTaint naming the instance taints it (and what was
built from it) only while it is still canonical.
"""

from __future__ import annotations

from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.fold.build_state import BuildState
from partbuild.state.fold.past import PastState
from partbuild.state.fold.records import InstanceState
from partbuild.state.log.digest import state_digest
from partbuild.state.log.events import manual
from partbuild.state.log.snapshot import decode_state, encode_state

from foldkit import Story

I = InstanceState


def result(name: str, passed: bool, *, blocking: bool = True, errored: bool = False) -> pb.CheckResult:
    return pb.CheckResult(name=name, passed=passed, blocking=blocking, errored=errored, description=f"{name}?")


def rerun(request_id: str, uuid: str, *results: pb.CheckResult) -> pb.ChecksRerun:
    return pb.ChecksRerun(request_id=request_id, checks=pb.InstanceChecks(instance_uuid=uuid, results=results))


def built(s: Story) -> tuple[str, str]:
    """A Live daily and a Live weekly built from it: their UUIDs."""
    s.want("w1", "d/1", "wk/1")
    daily = s.build("r1", "d/1")
    weekly = s.build("r2", "wk/1", inputs=[daily])
    return daily, weekly


def ask(s: Story, request_id: str, uuid: str) -> None:
    s.ok(pb.ChecksRequest(request_id=request_id, instance_uuid=uuid, comment="again"), source=manual("ann"))


def test_a_request_is_pending_until_one_answer_records_its_results_on_the_instance() -> None:
    s = Story()
    daily, _ = built(s)
    ask(s, "q1", daily)
    asked_at = len(s.events)
    assert s.state.check_requests == {"q1": (daily, asked_at, 0)}
    assert list(s.state.pending_check_requests) == ["q1"]
    s.ok(rerun("q1", daily, result("rows", True), result("urls", False, blocking=False)))
    answered_at = len(s.events)
    assert s.state.check_requests == {"q1": (daily, asked_at, answered_at)} and not s.state.pending_check_requests
    ((seq, rows),) = s.state.check_results[daily]
    assert seq == answered_at and [row[:4] for row in rows] == [
        ("rows", True, True, False),
        ("urls", False, False, False),
    ]
    assert s.instance("d/1").state == I.LIVE  # results alone taint nothing
    s.rejected(rerun("q1", daily, result("rows", True)), f"already answered at seq {answered_at}")


def test_a_failing_rerun_may_carry_failures_and_errors_and_a_skip_records_nothing() -> None:
    s = Story()
    daily, weekly = built(s)
    ask(s, "q1", daily)
    s.ok(rerun("q1", daily, result("rows", False), result("boom", False, errored=True)))
    assert [row[3] for row in s.state.check_results[daily][0][1]] == [False, True]
    ask(s, "q2", weekly)
    s.ok(pb.ChecksRerun(request_id="q2", skipped="job weekly declares no checks"))
    assert weekly not in s.state.check_results and not s.state.pending_check_requests


def test_the_fold_refuses_requests_it_cannot_answer() -> None:
    s = Story()
    daily, _ = built(s)
    s.observe("raw/1")
    raw = s.uuid("raw/1")
    s.rejected(pb.ChecksRequest(request_id="", instance_uuid=daily), "checks request id is empty")
    s.rejected(pb.ChecksRequest(request_id="q", instance_uuid="nope"), "unknown partition instance 'nope'")
    s.rejected(pb.ChecksRequest(request_id="q", instance_uuid=raw), "is source data")
    s.rejected(pb.ChecksRequest(request_id="q", instance_uuid=daily, comment="x" * 2001), "comment is longer")
    ask(s, "q1", daily)
    s.rejected(pb.ChecksRequest(request_id="q1", instance_uuid=daily), "checks request 'q1' already exists")
    s.rejected(pb.ChecksRequest(request_id="q2", instance_uuid=daily), "already requested (request 'q1', pending)")
    s.ok(pb.PartitionTaint(partition_ref="d/1", reason="bad"))
    s.rejected(pb.ChecksRequest(request_id="q3", instance_uuid=daily), "is tainted; only a Live instance")


def test_the_fold_refuses_answers_that_do_not_fit_their_request() -> None:
    s = Story()
    daily, weekly = built(s)
    ask(s, "q1", daily)
    s.rejected(rerun("nope", daily, result("rows", True)), "unknown checks request 'nope'")
    s.rejected(rerun("q1", weekly, result("rows", True)), f"is about instance {daily}")
    s.rejected(pb.ChecksRerun(request_id="q1"), "carries results or says why it skipped")
    s.rejected(rerun("q1", daily), "carries results or says why it skipped")
    s.rejected(rerun("q1", daily, result("rows", True), result("rows", True)), "listed more than once")
    s.rejected(rerun("q1", daily, result("rows", True, errored=True)), "both passed and errored")
    skipped_with_results = rerun("q1", daily, result("rows", True))
    skipped_with_results.skipped = "no"
    s.rejected(skipped_with_results, "a checks rerun that skipped carries no results")
    assert list(s.state.pending_check_requests) == ["q1"] and daily not in s.state.check_results


def test_a_taint_naming_its_instance_cascades_while_canonical_and_is_refused_once_it_moved() -> None:
    s = Story()
    daily, weekly = built(s)
    ask(s, "q1", daily)
    s.ok(rerun("q1", daily, result("rows", False)))
    s.ok(pb.PartitionTaint(partition_ref="d/1", reason="check rows failed", instance_uuid=daily))
    assert s.state.instances[daily].state == I.TAINTED and s.state.instances[daily].note == "check rows failed"
    assert s.state.instances[weekly].state == I.TAINTED
    assert s.state.instances[weekly].note == "upstream d/1 tainted: check rows failed"
    # A second (stale) writer's taint of the same instance: the canonical instance moved on.
    s.rejected(
        pb.PartitionTaint(partition_ref="d/1", reason="again", instance_uuid=daily), "no longer the canonical instance"
    )


def test_requests_read_as_of_each_seq_as_a_replay_to_it_and_survive_digest_and_snapshot() -> None:
    s = Story()
    daily, _ = built(s)
    before = state_digest(s.state)
    ask(s, "q1", daily)
    assert state_digest(s.state) != before  # requests are digested
    s.ok(rerun("q1", daily, result("rows", True)))
    for seq in range(1, len(s.events) + 1):
        replay = BuildState()
        for at, event in enumerate(s.events[:seq], start=1):
            replay.apply(at, event)
        past = PastState(s.state, seq, lambda: 0)
        assert dict(past.check_requests) == replay.check_requests, seq
        assert past.pending_check_requests == replay.pending_check_requests, seq
        assert dict(past.check_results) == replay.check_results, seq
    restored = decode_state(encode_state(s.state))
    assert restored.check_requests == s.state.check_requests and state_digest(restored) == state_digest(s.state)
