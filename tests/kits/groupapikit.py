"""A worker-group history for the API, CLI and metrics tests: two epochs, a pending hand-off, a fenced rejection."""

from __future__ import annotations

from dataclasses import dataclass

from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.database import Database
from partbuild.state.ops.members import Member
from partbuild.state.rules.bucketing import bucket

from foldkit import Story
from groupkit import as_task, fenced, group_of, ref_in, settle, start, step

GROUP = "g"
TOTAL = 6


@dataclass(frozen=True)
class GroupHistory:
    """The events and the seqs the tests ask about."""

    events: list[pb.Event]
    first_epoch_seq: int  # epoch 1: members a (leader) and b
    settled_seq: int  # a and b own 3 buckets each
    second_epoch_seq: int  # epoch 2: c joins with nothing
    head_seq: int  # a shared one bucket to c (not picked up), then b's late decision under epoch 1 was rejected
    owned: dict[str, list[int]]  # at the head
    pending: int  # the bucket a hands to c
    late_reason: str


def group_history(name: str = GROUP) -> GroupHistory:
    """Build the history with the protocol's own functions (every step is one the fold accepts)."""
    story = Story()
    start(story, ["a", "b"], "a", "e1", total=TOTAL, name=name)
    first = len(story.events)
    settle(story, name)
    settled = len(story.events)
    ref = ref_in(group_of(story, name).owned_by("b")[0], TOTAL)
    story.want(f"w-late-{name}", ref)
    late = pb.JobRunBuffer(
        job_run_id=f"late-run-{name}",
        job_label="noop",
        instance_uuids=[story.uuid(ref)],
        fence=fenced(story, "b", name),
    )
    start(story, ["a", "b", "c"], "a", "e2", name=name)
    second = len(story.events)
    shared = step(story, "a", name)
    assert shared is not None and len(shared.share) == 1
    reason = story.apply(late, source=as_task("b"))  # b was paused: its decision under epoch 1 comes late
    assert reason is not None and "old epoch" in reason
    group = group_of(story, name)
    assert bucket("partbuild", ref, TOTAL) in group.owned_by("b")
    return GroupHistory(
        events=list(story.events),
        first_epoch_seq=first,
        settled_seq=settled,
        second_epoch_seq=second,
        head_seq=len(story.events),
        owned={task: group.owned_by(task) for task in group.members},
        pending=next(iter(shared.share)),
        late_reason=reason,
    )


def append_group_history(db: Database, now_ms: int, name: str = GROUP) -> GroupHistory:
    """Append the history, with heartbeat rows: a and b fresh, c a minute old, z not a member.

    Its seqs are the log's on an empty log only (and so is the late decision's reason: instance
    UUIDs follow the log position).
    """
    history = group_history(name)
    db.log.append(history.events)
    rows = (("a", 1), ("b", 2), ("c", 60), ("z", 3))
    for pid, (task, age_s) in enumerate(rows, start=4000):
        db.members.join(Member(name, task, f"host-{task}", pid, now_ms - 600_000, now_ms - age_s * 1000))
    return history
