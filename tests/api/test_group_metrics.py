"""Worker-group operations: which fence rule a rejection broke, as /metrics counts it, from the fold's own reasons."""

from __future__ import annotations

from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.fold.group import FENCE_REJECTION_KINDS, fence_rejection_kind
from partbuild.state.rules.bucketing import bucket

from foldkit import Story
from groupkit import as_task, fenced, group_of, settle, start

REFS = [f"noop/{n}" for n in range(40)]


def _run(story: Story, run_id: str, ref: str, fence: pb.DecisionFence, **fields: object) -> pb.JobRunBuffer:
    return pb.JobRunBuffer(job_run_id=run_id, job_label="noop", instance_uuids=[story.uuid(ref)], fence=fence, **fields)


def test_every_fence_rejection_of_the_fold_is_classified_and_nothing_else_is() -> None:
    story = Story()
    story.want("w", *REFS)
    start(story, ["a", "b", "c"], "a", "e1")
    settle(story)
    owners = group_of(story).owners
    theirs = next(ref for ref in REFS if owners[bucket("partbuild", ref, 6)] == "c")
    old = fenced(story, "b")

    cases = {
        "no_group": pb.DecisionFence(group="nope", epoch_id="e1", task_id="b"),
        "unknown_epoch": pb.DecisionFence(group="g", epoch_id="zz", task_id="b"),
        "not_member": pb.DecisionFence(group="g", epoch_id="e1", task_id="z"),
        "not_owner": fenced(story, "b"),
    }
    found: dict[str, str | None] = {}
    for kind, fence in cases.items():
        found[kind] = story.apply(_run(story, f"r-{kind}", theirs, fence), source=as_task(fence.task_id))
    found["wrong_writer"] = story.apply(_run(story, "r-writer", theirs, fenced(story, "c")), source=as_task("b"))
    start(story, ["a", "c"], "a", "e2")  # b missed its heartbeats; its late decision names epoch e1
    found["old_epoch"] = story.apply(_run(story, "r-late", theirs, old), source=as_task("b"))
    assert set(found) == set(FENCE_REJECTION_KINDS)
    assert {kind: fence_rejection_kind(reason or "") for kind, reason in found.items()} == {
        kind: kind for kind in FENCE_REJECTION_KINDS
    }
    both = _run(
        story, "r-both", theirs, fenced(story, "c"), bucket=pb.BucketScope(namespace="x", bucket_id=1, bucket_total=1)
    )
    others = [
        story.apply(both, source=as_task("c")),
        story.apply(pb.WantCancel(want_id="no-such-want")),
        story.apply(pb.GroupEpoch(group="g", epoch_id="e3", previous_epoch_id="e1")),
    ]
    assert all(reason is not None and fence_rejection_kind(reason) is None for reason in others), others
