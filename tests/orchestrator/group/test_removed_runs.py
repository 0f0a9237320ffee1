"""A removed group member's runs: its new owner fails them at once, without waiting for the heartbeat timeout
(the fold refuses the removed member's own heartbeats and outcomes, so waiting would only delay the retry)."""

from __future__ import annotations

from partbuild.orchestrator.decide import stale_runs
from partbuild.orchestrator.graph import Graph, Job, RetryPolicy
from partbuild.orchestrator.group.ownership import GroupOwnership
from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.rules.bucketing import bucket

from foldkit import Story
from groupkit import NAMESPACE, as_task, fenced, group_of, settle, start

REFS = [f"noop/{n}" for n in range(40)]
TIMEOUT_MS = 30_000


def _graph(max_attempts: int = 3) -> Graph:
    return Graph([Job("noop", ["noop/{n}"], lambda _ctx: None, retry=RetryPolicy(max_attempts))])


def _story_with_bs_run() -> tuple[Story, str]:
    """Group g (a leads, b, c) settled; b runs r-b over one of its refs."""
    story = Story()
    story.want("w", *REFS)
    start(story, ["a", "b", "c"], "a", "e1")
    settle(story)
    group = group_of(story)
    ref = next(ref for ref in REFS if group.owners.get(bucket(NAMESPACE, ref, 6)) == "b")
    run = pb.JobRunBuffer(
        job_run_id="r-b", job_label="noop", instance_uuids=[story.uuid(ref)], fence=fenced(story, "b")
    )
    story.ok(run, source=as_task("b"))
    story.ok(pb.JobRunHeartbeat(job_run_id="r-b"), source=as_task("b"))
    return story, ref


def test_the_new_owner_fails_a_removed_members_run_at_once_and_the_fold_accepts_it() -> None:
    story, ref = _story_with_bs_run()
    now = story.clock_ms + 1  # the run's heartbeat is fresh
    leader = GroupOwnership("g", "a")
    assert stale_runs(story.state, _graph(), now, TIMEOUT_MS, alive=[], ownership=leader) == []  # b is a member
    start(story, ["a", "c"], "a", "e2")  # b missed its member timeout: a owns its buckets now
    other = GroupOwnership("g", "c")
    assert stale_runs(story.state, _graph(), now, TIMEOUT_MS, alive=[], ownership=other) == []  # not c's bucket
    (event,) = stale_runs(story.state, _graph(), now, TIMEOUT_MS, alive=[], ownership=leader)
    failure = event.job_run_failure
    assert failure.job_run_id == "r-b" and failure.error_class == pb.ERROR_CLASS_RETRYABLE
    assert failure.message == "its worker b is no longer a member of group g: the process running it is gone"
    assert (failure.fence.task_id, failure.fence.epoch_id) == ("a", "e2")
    story.ok(failure, source=as_task("a"))
    assert story.istate(ref).name == "UP_FOR_RETRY"


def test_a_removed_members_run_on_its_last_attempt_fails_for_good() -> None:
    story, ref = _story_with_bs_run()
    start(story, ["a", "c"], "a", "e2")
    leader = GroupOwnership("g", "a")
    (event,) = stale_runs(story.state, _graph(max_attempts=1), story.clock_ms, TIMEOUT_MS, [], leader)
    assert event.job_run_failure.error_class == pb.ERROR_CLASS_PERMANENT
    story.ok(event.job_run_failure, source=as_task("a"))
    assert story.istate(ref).name == "FAILED"
