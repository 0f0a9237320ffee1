"""Worker groups in the fold: epochs, task messages, the owner of each bucket, fenced decisions."""

from __future__ import annotations

import pytest

from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.fold.build_state import BuildState
from partbuild.state.log.digest import state_digest
from partbuild.state.log.snapshot import decode_state, encode_state
from partbuild.state.rules.bucketing import bucket
from partbuild.state.rules.group import MAX_GROUP_BUCKETS, TaskState, epoch_message, next_epoch, task_state_pb

from foldkit import Story
from groupkit import (
    NAMESPACE,
    as_task,
    epoch,
    fenced,
    group_of,
    message,
    ref_in,
    settle,
    start,
    step,
    with_state,
)

REFS = [f"noop/{n}" for n in range(40)]


def settled() -> Story:
    """Wants for REFS; group g (a leads, b, c) over 6 buckets, balanced: a 1-2, b 4 and 6, c 3 and 5."""
    story = Story()
    story.want("w", *REFS)
    start(story, ["a", "b", "c"], "a", "e1")
    settle(story)
    assert {task: sorted(s.data) for task, s in group_of(story).states.items()} == {
        "a": [1, 2],
        "b": [4, 6],
        "c": [3, 5],
    }
    return story


def owned_ref(story: Story, task: str) -> str:
    """A wanted ref whose bucket `task` owns now."""
    group = group_of(story)
    return next(ref for ref in REFS if group.owners.get(bucket(NAMESPACE, ref, 6)) == task)


# ----------------------------------------------------------------- epochs


def test_the_first_epoch_gives_every_bucket_to_the_leader_and_fixes_the_layout() -> None:
    story = Story()
    start(story, ["a", "b"], "a", "e1", total=4)
    group = group_of(story)
    assert (group.epoch_id, group.epoch_seq, group.leader, group.members, group.epochs) == ("e1", 1, "a", ("a", "b"), 1)
    assert group.owners == {1: "a", 2: "a", 3: "a", 4: "a"} and group.states["b"].data == frozenset()
    assert story.state.bucket_layouts == {NAMESPACE: (4, 1)}


def test_a_rebalance_keeps_survivors_buckets_and_gives_the_dead_members_to_the_leader() -> None:
    story = settled()
    assert step(story, "a") is None  # balanced: nothing to share
    start(story, ["a", "c", "d"], "c", "e2")  # b died, d joined, c leads now
    group = group_of(story)
    assert {task: sorted(s.data) for task, s in group.states.items()} == {"a": [1, 2], "c": [3, 4, 5, 6], "d": []}
    assert group.epochs == 2 and group.epoch_ids == {"e1", "e2"} and "b" not in group.states
    settle(story)
    loads = sorted(len(s.data) for s in group_of(story).states.values())
    assert loads == [2, 2, 2] and not story.state.rejections


def test_pending_shares_and_a_dead_members_share_section_go_to_the_leader() -> None:
    story = Story()
    start(story, ["a", "b", "c"], "a", "e1")
    step(story, "a")  # a shares 5-6 to b and 3-4 to c (the least loaded in turn)
    assert group_of(story).states["a"].share == {6: "b", 5: "c", 4: "b", 3: "c"}
    step(story, "b")  # b picks up 4 and 6; c never picks up 3 and 5
    assert group_of(story).owners == {1: "a", 2: "a", 4: "b", 6: "b"}  # 3 and 5 have no owner in hand-off
    start(story, ["a", "b"], "b", "e2")  # c died; b leads
    states = group_of(story).states
    assert sorted(states["a"].data) == [1, 2] and sorted(states["b"].data) == [3, 4, 5, 6]
    assert all(not s.share for s in states.values())


EPOCH_REJECTIONS = [
    ("first epoch after another", lambda m: m.__setattr__("previous_epoch_id", "e0"), "has no epoch yet"),
    ("no members", lambda m: (m.ClearField("members"), m.ClearField("connector_state")), "lists no members"),
    ("dup member", lambda m: m.members.append("a"), "member 'a' is listed more than once"),
    ("leader outside", lambda m: m.__setattr__("leader_task_id", "z"), "leader 'z' is not a member"),
    ("too many buckets", lambda m: m.__setattr__("bucket_total", MAX_GROUP_BUCKETS + 1), "is not between 1 and"),
    ("no namespace", lambda m: m.__setattr__("namespace", ""), "bucket namespace is empty"),
    ("missing state", lambda m: m.connector_state.pop(), "has no state for member 'c'"),
    ("outsider state", lambda m: m.connector_state.add(task_id="z"), "state for 'z', which is not a member"),
    ("two states", lambda m: m.connector_state.add(task_id="b"), "two states for 'b'"),
    ("unsorted", lambda m: m.connector_state[0].data.__setitem__(0, 9), "not strictly ascending at bucket 2"),
    ("out of range", lambda m: m.connector_state[0].data.append(7), "names bucket 7, not between 1"),
    ("negative timestamp", lambda m: m.connector_state[1].__setattr__("state_timestamp_ms", -1), "negative"),
    ("share in epoch", lambda m: m.connector_state[0].share.__setitem__(1, "b"), "starts with buckets in its share"),
    ("share outside data", lambda m: m.connector_state[1].share.__setitem__(1, "a"), "not in its data"),
    ("overlap", lambda m: m.connector_state[1].data.append(6), "bucket 6 is given to both 'a' and 'b'"),
    ("not covering", lambda m: m.connector_state[0].data.pop(), "buckets 6 are given to no member"),
]


@pytest.mark.parametrize(("what", "spoil", "reason"), EPOCH_REJECTIONS, ids=[case[0] for case in EPOCH_REJECTIONS])
def test_a_malformed_first_epoch_is_rejected_with_its_reason(what: str, spoil: object, reason: str) -> None:
    story = Story()
    msg = epoch(story, ["a", "b", "c"], "a", "e1")
    spoil(msg)  # type: ignore[operator]
    story.rejected(msg, reason)
    assert story.state.groups == {} and story.state.bucket_layouts == {}


def test_a_stale_leaders_epoch_and_other_bad_next_epochs_are_rejected() -> None:
    story = settled()
    stale = epoch(story, ["a", "c"], "a", "e2-by-a")  # a builds on e1 ...
    start(story, ["b", "c"], "c", "e2")  # ... but c's epoch lands first (a lost its lock)
    reason = story.rejected(stale, "is built on epoch 'e1', but the current epoch is 'e2'")
    assert reason.endswith("a stale leader's epoch") and group_of(story).epoch_id == "e2"
    reused = epoch(story, ["b", "c"], "c", "e1")
    story.rejected(reused, "epoch id 'e1' was already used by group 'g'")
    moved = epoch(story, ["b", "c"], "c", "e3")
    moved.namespace = "elsewhere"
    story.rejected(moved, "works on namespace 'partbuild' in 6 buckets, fixed by its first epoch")


def test_an_epoch_that_moves_a_survivors_buckets_or_gives_a_new_member_any_is_rejected() -> None:
    story = settled()
    group = group_of(story)
    states = next_epoch(group.states, ["a", "b", "c", "d"], "a", 6)
    states["a"] = with_state(states["a"], data={1})
    states["d"] = with_state(states["d"], data={2})
    msg = epoch_message("g", "e2", "e1", NAMESPACE, 6, "a", states, 0)
    story.rejected(msg, "new member 'd' is given buckets 2: a new member starts empty")
    states = next_epoch(group.states, ["a", "b", "c"], "a", 6)
    states["a"], states["b"] = with_state(states["a"], data={1, 2, 4}), with_state(states["b"], data={6})
    msg = epoch_message("g", "e2", "e1", NAMESPACE, 6, "a", states, 0)
    reason = story.rejected(msg, "member 'b' would lose buckets 4 and gain none")
    assert "a surviving member keeps exactly the buckets it owned; ownerless buckets go to the leader 'a'" in reason


def test_an_epoch_must_be_written_by_its_leader() -> None:
    story = Story()
    msg = epoch(story, ["a", "b"], "a", "e1")
    assert story.apply(msg, source=as_task("b")) == "leader 'a' is written by worker 'b': a task speaks only for itself"
    assert story.apply(msg, source=as_task("a")) is None


# ----------------------------------------------------------------- task messages


def test_task_messages_follow_the_share_protocol_and_ownership_is_answerable_at_every_seq() -> None:
    story = Story()
    start(story, ["a", "b"], "a", "e1", total=4)
    owners_at = {story.state.head_seq: dict(group_of(story).owners)}
    for task in ("a", "b", "a"):  # share, pick up, drop
        step(story, task)
        owners_at[story.state.head_seq] = dict(group_of(story).owners)
    assert owners_at == {
        1: {1: "a", 2: "a", 3: "a", 4: "a"},
        2: {1: "a", 2: "a"},  # 3 and 4 are in hand-off: nobody owns them
        3: {1: "a", 2: "a", 3: "b", 4: "b"},  # b picked them up
        4: {1: "a", 2: "a", 3: "b", 4: "b"},  # a dropped them: the same owners
    }
    for seq, owners in owners_at.items():  # the same from a replay as of that seq
        replayed = BuildState(strict=True)
        for at, event in enumerate(story.events[:seq], 1):
            replayed.apply(at, event)
        assert replayed.groups["g"].owners == owners
    assert group_of(story).state_seqs == {"a": 4, "b": 3}


def test_a_message_restating_the_senders_state_is_accepted() -> None:
    """The protocol's first message of a task in a new epoch: its state as the epoch gave it."""
    story = settled()
    story.ok(message(story, group_of(story).states["b"]), source=as_task("b"))


def _spoiled_states(story: Story, task: str, **change: object) -> pb.GroupTaskMessage:
    return message(story, with_state(group_of(story).states[task], **change))  # type: ignore[arg-type]


def test_a_task_may_change_only_its_own_state() -> None:
    story = settled()
    msg = message(story, group_of(story).states["b"])
    msg.connector_state[2].data.append(6)  # c "takes" 6
    story.rejected(msg, "task 'b' changes the data of 'c' (its state since seq 5)")
    msg = message(story, group_of(story).states["b"])
    msg.connector_state[0].state_timestamp_ms += 1
    story.rejected(msg, "changes the state timestamp of 'a' (its state since seq 6)")
    msg = message(story, group_of(story).states["b"])
    del msg.connector_state[2]
    story.rejected(msg, "connector_state has no state for member 'c'")
    msg = message(story, group_of(story).states["b"])
    assert story.apply(msg, source=as_task("c")) == "task 'b' is written by worker 'c': a task speaks only for itself"


STEP_REJECTIONS = [
    (
        "pick up unshared",
        "b",
        {"data": {1, 4, 6}},
        "task 'b' picks up bucket 1, which no task shares with it (owned by 'a')",
    ),
    ("drop without hand-off", "b", {"data": {4}}, "task 'b' drops bucket 6 without handing it off"),
    ("share not owned", "b", {"share": {1: "c"}}, "'b' shares bucket 1, which is not in its data"),
    ("share to outsider", "b", {"share": {6: "z"}}, "'b' shares bucket 6 with 'z', which is not a member"),
    ("share to self", "b", {"share": {6: "b"}}, "'b' shares bucket 6 with itself"),
]


@pytest.mark.parametrize(("what", "task", "change", "reason"), STEP_REJECTIONS, ids=[c[0] for c in STEP_REJECTIONS])
def test_an_illegal_step_is_rejected_with_its_reason(what: str, task: str, change: dict, reason: str) -> None:
    story = settled()
    before = group_of(story)
    story.rejected(_spoiled_states(story, task, **change), reason)
    assert group_of(story) is before


def test_a_share_is_never_withdrawn_re_addressed_or_dropped_before_its_pickup() -> None:
    story = settled()
    story.ok(_spoiled_states(story, "b", share={6: "c"}), source=as_task("b"))  # b hands 6 to c
    assert 6 not in group_of(story).owners
    story.rejected(_spoiled_states(story, "b", share={}), "task 'b' withdraws its share of bucket 6 to 'c'")
    story.rejected(_spoiled_states(story, "b", share={6: "a"}), "re-addresses its share of bucket 6 from 'c' to 'a'")
    story.rejected(_spoiled_states(story, "b", data={4}, share={}), "drops bucket 6 before its target 'c' picked it up")
    story.rejected(_spoiled_states(story, "a", data={1, 2, 6}), "picks up bucket 6, which no task shares with it")
    story.ok(_spoiled_states(story, "c", data={3, 5, 6}), source=as_task("c"))  # c picks it up
    assert group_of(story).owners[6] == "c"
    story.rejected(_spoiled_states(story, "c", share={6: "a"}), "shares bucket 6 while 'b' still holds it")
    story.ok(_spoiled_states(story, "b", data={4}, share={}), source=as_task("b"))  # b drops it
    story.ok(_spoiled_states(story, "c", share={6: "a"}), source=as_task("c"))  # now c may pass it on


def test_old_epoch_unknown_epoch_non_member_and_unknown_group_messages_are_rejected() -> None:
    story = settled()
    late = message(story, group_of(story).states["b"])
    start(story, ["a", "c"], "a", "e2")  # b is gone
    story.rejected(late, "epoch 'e1' is an old epoch of group 'g'; the current one is 'e2' (since seq")
    late.epoch_id = "e9"
    story.rejected(late, "epoch 'e9' is not an epoch of group 'g'")
    late.epoch_id = "e2"
    story.rejected(late, "task 'b' is not a member of group 'g' in epoch 'e2'")
    late.group = "nope"
    story.rejected(late, "group 'nope' has no epoch")


# ----------------------------------------------------------------- fenced decisions


def _buffer(story: Story, run_id: str, ref: str, task: str, **fields: object) -> pb.JobRunBuffer:
    fence = fields.pop("fence", None) or fenced(story, task)
    return pb.JobRunBuffer(job_run_id=run_id, job_label="noop", instance_uuids=[story.uuid(ref)], fence=fence, **fields)


def test_a_fenced_run_is_accepted_only_from_the_owner_of_its_buckets() -> None:
    story = settled()
    mine, theirs = owned_ref(story, "b"), owned_ref(story, "c")
    story.ok(_buffer(story, "r1", mine, "b"), source=as_task("b"))
    reason = story.rejected(_buffer(story, "r2", theirs, "b"), "fenced decision: task 'b' does not own bucket")
    assert f"(owned by 'c'), the bucket of instance {story.uuid(theirs)} of {theirs!r}" in reason
    outsider = pb.DecisionFence(group="g", epoch_id="e1", task_id="z")
    story.rejected(_buffer(story, "r3", theirs, "z", fence=outsider), "task 'z' is not a member of group 'g'")
    both = _buffer(story, "r4", theirs, "c", bucket=pb.BucketScope(namespace="x", bucket_id=1, bucket_total=1))
    story.rejected(both, "fenced by a worker group or scoped to a static bucket, not both")
    assert story.apply(_buffer(story, "r5", theirs, "c"), source=as_task("b")) == (
        "fenced decision of task 'c' is written by worker 'b': a task speaks only for itself"
    )


def test_a_bucket_in_hand_off_has_no_owner_and_a_paused_workers_late_decisions_are_rejected() -> None:
    story = settled()
    ref = owned_ref(story, "b")
    moving = bucket(NAMESPACE, ref, 6)
    paused = _buffer(story, "late", ref, "b")  # b decides, then is paused before appending
    story.ok(_spoiled_states(story, "b", share={moving: "c"}), source=as_task("b"))
    story.rejected(_buffer(story, "r1", ref, "b"), f"does not own bucket {moving} of group 'g' (owned by nobody")
    start(story, ["a", "c"], "a", "e2")  # b missed its heartbeats
    assert story.apply(paused, source=as_task("b")) is not None
    assert "epoch 'e1' is an old epoch of group 'g'" in story.state.rejections[-1].reason
    story.ok(_buffer(story, "r2", ref, "a"), source=as_task("a"))  # the leader owns the orphan now


def test_the_new_owner_fails_a_dead_members_stale_run() -> None:
    story = settled()
    ref = owned_ref(story, "b")
    story.ok(_buffer(story, "r-b", ref, "b"), source=as_task("b"))
    start(story, ["a", "c"], "a", "e2")
    failure = pb.JobRunFailure(job_run_id="r-b", message="heartbeat timeout", fence=fenced(story, "c"))
    story.rejected(failure, "fenced decision: task 'c' does not own bucket")
    failure.fence.CopyFrom(fenced(story, "a"))
    story.ok(failure, source=as_task("a"))
    assert story.istate(ref).name == "UP_FOR_RETRY"


def _removed(story: Story, ref: str) -> None:
    """b buffers r-b over `ref` and starts it; the leader then removes b (b was paused past the timeout)."""
    story.ok(_buffer(story, "r-b", ref, "b"), source=as_task("b"))
    story.ok(pb.JobRunHeartbeat(job_run_id="r-b"), source=as_task("b"))
    start(story, ["a", "c"], "a", "e2")


def test_a_removed_members_runs_are_fenced_off_until_their_owner_fails_them() -> None:
    """A paused member resumed after its removal cannot heartbeat or finish the runs the group gave away."""
    story = settled()
    ref = owned_ref(story, "b")
    _removed(story, ref)
    assert group_of(story).fences_runs_since == 2  # since the first epoch (the want is seq 1)
    own = (
        pb.JobRunHeartbeat(job_run_id="r-b"),
        pb.JobRunSuccess(job_run_id="r-b"),
        pb.JobRunFailure(job_run_id="r-b", message="executor error"),
        pb.JobRunMissingDeps(job_run_id="r-b", missing_refs=["raw/x"]),
    )
    for late in own:
        reason = story.rejected(late, "job run 'r-b' was buffered by task 'b', which is no longer a member")
        assert "of group 'g' (epoch 'e2' since seq" in reason and "only the owner of their buckets" in reason
    assert story.state.job_runs["r-b"].state.name == "RUNNING" and story.istate(ref).name == "BUILDING"
    failure = pb.JobRunFailure(job_run_id="r-b", message="its worker b is gone", fence=fenced(story, "a"))
    story.ok(failure, source=as_task("a"))
    assert story.istate(ref).name == "UP_FOR_RETRY" and story.state.run_fences == {}


def test_an_operator_may_cancel_a_removed_members_run_and_members_runs_are_unaffected() -> None:
    story = settled()
    ref, kept = owned_ref(story, "b"), owned_ref(story, "c")
    story.ok(_buffer(story, "r-c", kept, "c"), source=as_task("c"))
    _removed(story, ref)
    assert set(story.state.run_fences) == {"r-b", "r-c"}
    story.ok(pb.JobRunHeartbeat(job_run_id="r-c"), source=as_task("c"))  # c stayed a member
    story.ok(pb.JobRunSuccess(job_run_id="r-c"), source=as_task("c"))
    story.ok(pb.JobRunCancel(job_run_id="r-b", reason="operator", replace_instances=True))
    assert story.state.run_fences == {}


def test_the_fence_on_removed_members_runs_needs_an_epoch_that_asks_and_then_holds() -> None:
    """Epochs written before the flag leave a removed member's runs alone (old logs replay as they did); once an
    epoch asked, later epochs without the flag (an older leader's) keep the fence."""
    story = Story()
    story.want("w", *REFS)
    first = epoch(story, ["a", "b", "c"], "a", "e1")
    first.fences_removed_runs = False
    story.ok(first, source=as_task("a"))
    settle(story)
    ref, mine = owned_ref(story, "b"), owned_ref(story, "a")
    story.ok(_buffer(story, "r-b", ref, "b"), source=as_task("b"))
    old_style = epoch(story, ["a", "b", "c"], "a", "e2")  # an old leader: no flag, nobody removed
    old_style.fences_removed_runs = False
    story.ok(old_style, source=as_task("a"))
    removal = epoch(story, ["a", "c"], "a", "e3")
    removal.fences_removed_runs = False
    story.ok(removal, source=as_task("a"))
    assert group_of(story).fences_runs_since == 0
    story.ok(pb.JobRunHeartbeat(job_run_id="r-b"), source=as_task("b"))  # as before the rule
    story.ok(_buffer(story, "r-a", mine, "a"), source=as_task("a"))
    fencing = epoch(story, ["a", "c", "d"], "a", "e4")
    story.ok(fencing, source=as_task("a"))
    since = story.state.head_seq
    story.rejected(pb.JobRunHeartbeat(job_run_id="r-b"), "which is no longer a member of group 'g'")
    forgetful = epoch(story, ["a", "d"], "a", "e5")
    forgetful.fences_removed_runs = False
    story.ok(forgetful, source=as_task("a"))
    assert group_of(story).fences_runs_since == since
    story.rejected(pb.JobRunSuccess(job_run_id="r-b"), "buffered by task 'b'")
    story.ok(pb.JobRunSuccess(job_run_id="r-a"), source=as_task("a"))


def test_fenced_waits_need_ownership_and_fenced_derivative_wants_only_membership() -> None:
    story = settled()
    mine, theirs = owned_ref(story, "c"), owned_ref(story, "b")
    wait = pb.InstancesWaitUpstream(
        waits=[pb.InstanceWait(instance_uuid=story.uuid(theirs), upstream_refs=["raw/x"])], fence=fenced(story, "c")
    )
    story.rejected(wait, "fenced decision: task 'c' does not own bucket")
    wait.waits[0].instance_uuid = story.uuid(mine)
    story.ok(wait, source=as_task("c"))
    want = pb.WantCreate(want_id="d1", partition_refs=["raw/x", theirs], fence=fenced(story, "c"))
    story.ok(want, source=as_task("c"))  # a derivative want may name other buckets' refs
    outsider = pb.WantCreate(want_id="d2", partition_refs=["raw/y"], fence=fenced(story, "c"))
    outsider.fence.task_id = "z"
    story.rejected(outsider, "fenced decision: task 'z' is not a member of group 'g' in epoch 'e1'")


def test_unfenced_decisions_are_judged_as_before() -> None:
    story = settled()
    story.buffer("plain", owned_ref(story, "b"))  # no fence, no scope: an ungrouped worker, unchanged


# ----------------------------------------------------------------- namespaces and layouts


def test_a_groups_namespace_is_its_own() -> None:
    story = settled()
    scope = pb.BucketScope(namespace=NAMESPACE, bucket_id=1, bucket_total=6)
    reason = story.rejected(pb.BucketRunStart(bucket=scope, static_bucket=True), "is shared by worker group 'g'")
    assert reason.endswith("its buckets are owned through the group, not by a static bucket")
    ref = ref_in(1)
    scoped = pb.JobRunBuffer(job_run_id="s", job_label="noop", instance_uuids=[story.uuid(ref)], bucket=scope)
    story.rejected(scoped, "is shared by worker group 'g'")
    story.rejected(pb.BucketLayout(namespace=NAMESPACE, bucket_total=4), "split into 6 buckets by worker group 'g'")
    story.ok(pb.BucketLayout(namespace=NAMESPACE, bucket_total=6))  # the same count changes nothing
    other = epoch(story, ["x"], "x", "f1", name="g2")
    story.rejected(other, "namespace 'partbuild' is already shared by worker group 'g'")
    story.ok(epoch(story, ["x"], "x", "f1", name="g2", namespace="other"), source=as_task("x"))


def test_a_group_must_agree_with_its_namespaces_layout() -> None:
    story = Story()
    story.ok(pb.BucketRunStart(bucket=pb.BucketScope(namespace=NAMESPACE, bucket_id=1, bucket_total=3)))
    reason = story.rejected(epoch(story, ["a"], "a", "e1", total=6), "namespace 'partbuild' is split into 3 buckets")
    assert reason.endswith("a group over it must use 3 too, or re-shard it first")
    start(story, ["a"], "a", "e1", total=3)
    assert story.state.bucket_layouts[NAMESPACE] == (3, 1)  # kept: the group agreed with it


# ----------------------------------------------------------------- digest and snapshots


def test_snapshots_round_trip_groups_and_the_digest_covers_them() -> None:
    story = settled()
    digest = state_digest(story.state)
    restored = decode_state(encode_state(story.state))
    assert state_digest(restored) == digest and restored.groups == story.state.groups
    restating = pb.Event(group_task_message=message(story, group_of(story).states["c"]))
    assert restored.apply(story.state.head_seq + 1, restating) is None
    assert state_digest(restored) != digest  # c's state seq moved: the digest sees group state
    no_group = Story()
    no_group.want("w", *REFS)
    plain = state_digest(no_group.state)
    assert plain == state_digest(decode_state(encode_state(no_group.state)))


def test_task_state_wire_form_round_trips() -> None:
    state = TaskState("a", 5, frozenset({3, 1, 2}), {2: "b"})
    msg = task_state_pb(state)
    assert list(msg.data) == [1, 2, 3] and dict(msg.share) == {2: "b"}
