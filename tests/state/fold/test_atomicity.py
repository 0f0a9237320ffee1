"""Check-then-apply: a check that raises, or rejects, leaves the state as it was; an apply that raises breaks it.

For every event type, on a state with every kind of entity (active and finished
runs, wants and derivative wants, waiting, Live, tainted and superseded
instances):

- a valid event whose check raises an unexpected exception (a function the
  check calls, monkeypatched) is, in normal mode, a rejection that changes
  nothing but `head_seq` and `rejections`; with `strict=True` the exception
  propagates and nothing changes at all; once unpatched, the same event applies;
- a realistic invalid event is rejected and changes nothing but `head_seq` and
  `rejections`;
- an exception in an apply phase raises FoldError and the state refuses any
  further event and any snapshot.

The state also holds a worker group with a hand-off in progress, so the group
events and the fenced variants of decisions are checked the same way.

Every event type is also checked on the golden logs (tests/golden_log.py), which
hold every type: the first accepted event of each type, with its check made to
raise once it has resolved everything, and every rejected event. So a new event
type is covered by its golden-log entry; the cases below add patch points inside
the checks of the older ones.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from google.protobuf.message import Message

from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.fold import buckets, instances, job_runs, wants
from partbuild.state.fold import group as group_fold
from partbuild.state.fold import registry as fold
from partbuild.state.fold import sources as sources_fold
from partbuild.state.fold import subscriptions as subscriptions_fold
from partbuild.state.fold.build_state import BrokenBuildState, BuildState, FoldError
from partbuild.state.fold.records import InstanceState, JobRunState, WantState
from partbuild.state.log.digest import state_digest
from partbuild.state.log.events import manual
from partbuild.state.log.snapshot import SnapshotError, _fold_sources, encode_state
from partbuild.state.rules.bucketing import bucket
from partbuild.state.rules.group import share_step

from foldkit import Story, subscription
from golden_log import GOLDEN_LOGS, read
from groupkit import NAMESPACE, epoch, fenced, group_of, message, start, step, with_state


class Boom(Exception):
    """The unexpected exception a patched function raises."""


def rich_story() -> Story:
    """A state with every kind of entity: see the module docstring."""
    s = Story()
    s.observe("raw/a")
    s.observe("raw/c")
    s.want("w-weekly", "weekly")
    s.buffer("run-w", "weekly")
    s.missing("run-w", "daily/1", "daily/2")  # the weekly instance waits for both dailies
    s.derivative("w-daily", "w-weekly", "run-w", "daily/1", "daily/2")
    s.build("run-d1", "daily/1", [s.uuid("raw/a")])
    s.buffer("run-d2", "daily/2")
    s.ok(pb.JobRunHeartbeat(job_run_id="run-d2"))  # run-d2 is active (Running)
    s.ok(pb.PartitionTaint(partition_ref="raw/a", reason="late data"))  # raw/a and daily/1 superseded
    assert s.istate("weekly") == InstanceState.UPSTREAM_BUILDING and s.istate("daily/1") == InstanceState.MISSING
    assert s.state.job_runs["run-d2"].state == JobRunState.RUNNING and s.wstate("w-daily") == WantState.BUILDING
    assert s.state.dropped_instances == 0 and s.state.rejections == []
    start(s, ["a", "b"], "a", "e1", total=4)  # a worker group: a shares 3 and 4, b picks them up
    step(s, "a")
    step(s, "b")
    assert group_of(s).owners == {1: "a", 2: "a", 3: "b", 4: "b"} and group_of(s).states["a"].share
    s.ok(subscription("hooks"))
    return s


def not_owner(s: Story, ref: str) -> pb.DecisionFence:
    """The fence of the group member that does not own `ref`'s bucket."""
    owner = group_of(s).owners[bucket(NAMESPACE, ref, 4)]
    return fenced(s, "b" if owner == "a" else "a")


Build = Callable[[Story], Message]


@dataclass(frozen=True)
class Case:
    """A valid event of one type on `rich_story()`, and a function its check calls (module, name)."""

    kind: str
    event: Build
    patch: tuple[Any, str]
    source: pb.EventSource | None = None


def _success(s: Story) -> Message:
    daily2 = s.uuid("daily/2")
    output = pb.OutputResult(instance_uuid=daily2, location="/d2", input_instance_uuids=[s.uuid("raw/c")])
    return pb.JobRunSuccess(job_run_id="run-d2", outputs=[output])


def _wait(s: Story) -> Message:
    return pb.InstancesWaitUpstream(waits=[pb.InstanceWait(instance_uuid=s.uuid("daily/1"), upstream_refs=["raw/x"])])


CASES = [
    Case(
        "want_create",
        lambda s: pb.WantCreate(want_id="w-new", partition_refs=["daily/1", "new"], parent_want_id="w-weekly"),
        (wants, "describe_source"),  # called last, once every object is resolved
        manual("ann"),
    ),
    Case("want_cancel", lambda s: pb.WantCancel(want_id="w-weekly"), (wants, "_cancellation")),
    Case(
        "job_run_buffer",
        lambda s: pb.JobRunBuffer(job_run_id="run-new", job_label="daily", instance_uuids=[s.uuid("daily/1")]),
        (job_runs, "intern"),  # the job label, interned last
    ),
    Case("job_run_heartbeat", lambda s: pb.JobRunHeartbeat(job_run_id="run-d2"), (job_runs, "_active_run")),
    Case("job_run_success", _success, (job_runs, "_instances_of")),
    Case(
        "job_run_failure",
        lambda s: pb.JobRunFailure(job_run_id="run-d2", error_class=pb.ERROR_CLASS_PERMANENT, message="x"),
        (job_runs, "_instances_of"),
    ),
    Case("job_run_cancel", lambda s: pb.JobRunCancel(job_run_id="run-d2"), (job_runs, "_instances_of")),
    Case(
        "job_run_missing_deps",
        lambda s: pb.JobRunMissingDeps(job_run_id="run-d2", missing_refs=["raw/b"]),
        (job_runs, "is_live"),
    ),
    Case("partition_taint", lambda s: pb.PartitionTaint(partition_ref="raw/c"), (instances, "_taint_cascade")),
    Case(
        "partition_observed",
        lambda s: pb.PartitionObserved(partition_ref="raw/a", location="/raw/a/v2"),
        (instances, "ref_problem"),
    ),
    Case(
        "instance_retention",
        lambda s: pb.InstanceRetention(drop_superseded_before_seq=s.state.head_seq),
        (instances, "split_superseded"),
    ),
    Case("instances_wait_upstream", _wait, (instances, "is_live")),
    Case("clock_tick", lambda s: pb.ClockTick(), (fold.HANDLERS, "clock_tick")),
    Case(
        "bucket_run_start",
        lambda s: pb.BucketRunStart(bucket=pb.BucketScope(namespace="ns", bucket_id=2, bucket_total=3)),
        (buckets, "scope_problem"),
    ),
    Case("bucket_layout", lambda s: pb.BucketLayout(namespace="ns", bucket_total=5), (buckets, "id_problem")),
    Case("group_epoch", lambda s: epoch(s, ["a", "b", "c"], "a", "e2"), (group_fold, "epoch_problem")),
    Case(
        "group_task_message",
        lambda s: message(s, share_step(group_of(s).states, "a")),  # a drops what b picked up
        (group_fold, "step_problem"),
    ),
    Case(
        "source_scan_progress",
        lambda s: pb.SourceScanProgress(source="raw", pass_number=1, last_key=b"k", items=1),
        (sources_fold, "_bounds_problem"),
    ),
    Case("source_scan_request", lambda s: pb.SourceScanRequest(source="raw"), (sources_fold, "id_problem")),
    Case("subscription_create", lambda s: subscription("more"), (subscriptions_fold, "shard_count_problem")),
    Case(
        "subscription_change",
        lambda s: pb.SubscriptionChange(name="hooks", action=pb.SUBSCRIPTION_ACTION_PAUSE),
        (subscriptions_fold, "_existing"),
    ),
    Case(
        "subscription_reshard",
        lambda s: pb.SubscriptionReshard(name="hooks", shard_count=4, rq_partitions=24),
        (subscriptions_fold, "_grown"),
    ),
    Case(
        "subscription_offset_reset",
        lambda s: pb.SubscriptionOffsetReset(name="hooks", queue=pb.SUBSCRIPTION_QUEUE_MAIN, to_seq=1),
        (subscriptions_fold, "_existing"),
    ),
]


def golden_steps() -> Iterator[tuple[str, BuildState, int, pb.Event, bool]]:
    """(golden log, its state so far, seq, event, whether the fold rejects it) for the events checked here:
    the first accepted one of each type in each golden log, and every rejected one. Folds each after the yield."""
    for log in GOLDEN_LOGS:
        state, seen = BuildState(strict=True), set()
        for seq, payload in enumerate(read(log.name), 1):
            event = pb.Event.FromString(payload)
            rejected = state.problem(event) is not None
            if rejected or event.WhichOneof("payload") not in seen:
                seen.update(() if rejected else (event.WhichOneof("payload"),))
                yield log.name, state, seq, event, rejected
            state.apply(seq, event)


def test_every_event_type_has_a_case() -> None:
    """Every type has its atomicity checked: on the golden logs, and for most also at a patch point below."""
    payload_types = {f.name for f in pb.Event.DESCRIPTOR.oneofs_by_name["payload"].fields}
    golden = {event.WhichOneof("payload") for _, _, _, event, rejected in golden_steps() if not rejected}
    assert {case.kind for case in CASES} <= golden == payload_types == set(fold.HANDLERS)


def test_on_the_golden_logs_a_check_that_raises_changes_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each type's check run to its end, then an exception: a rejection (strict: raised), nothing else changed."""
    for name, state, seq, event, rejected in golden_steps():
        if rejected:
            continue
        kind = event.WhichOneof("payload")
        check, apply = fold.HANDLERS[kind]

        def check_then_raise(*args: Any, check: Any = check) -> Any:
            check(*args)
            raise Boom("unexpected")

        before, head, rejections = _frozen(state), state.head_seq, len(state.rejections)
        with monkeypatch.context() as patched:
            patched.setitem(fold.HANDLERS, kind, (check_then_raise, apply))
            with pytest.raises(Boom):
                state.apply(seq, event)
            assert _frozen(state) == before, (name, seq)
            state.strict = False
            try:
                assert state.apply(seq, event) == f"internal error while applying: {Boom('unexpected')!r}"
            finally:
                state.strict = True
        assert_only_rejection_added(state, before, head, rejections)
        state.head_seq, state.rejections = head, state.rejections[:rejections]  # the step folds it for real


def test_on_the_golden_logs_a_rejected_event_changes_nothing_but_head_seq_and_rejections() -> None:
    for name, state, seq, event, rejected in golden_steps():
        if rejected:
            before, head, rejections = _frozen(state), state.head_seq, len(state.rejections)
            assert state.apply(seq, event) is not None, (name, seq)
            assert_only_rejection_added(state, before, head, rejections)
            state.head_seq, state.rejections = head, state.rejections[:rejections]  # the step folds it again


def _raise_boom(*args: object, **kwargs: object) -> Any:
    raise Boom("unexpected")


def _patch_check(monkeypatch: pytest.MonkeyPatch, case: Case) -> None:
    target, name = case.patch
    if isinstance(target, dict):  # the table itself: ClockTick's check calls nothing
        monkeypatch.setitem(target, name, (_raise_boom, target[name][1]))
    else:
        assert callable(getattr(target, name)), name
        monkeypatch.setattr(target, name, _raise_boom)


def _frozen(state: BuildState) -> tuple[str, bytes]:
    """The digest and the complete pickled state (derived indexes included)."""
    return state_digest(state), pickle.dumps(state, protocol=pickle.HIGHEST_PROTOCOL)


def assert_only_rejection_added(state: BuildState, before: tuple[str, bytes], head: int, rejections: int) -> None:
    """`state` equals the state frozen in `before` once the newest rejection and head_seq are rolled back."""
    assert len(state.rejections) == rejections + 1
    assert state.head_seq == state.rejections[-1].seq > head
    applied_head, kept = state.head_seq, state.rejections
    state.head_seq, state.rejections = head, kept[:rejections]
    try:
        assert _frozen(state) == before
    finally:
        state.head_seq, state.rejections = applied_head, kept


@pytest.mark.parametrize("case", CASES, ids=[case.kind for case in CASES])
def test_a_check_that_raises_is_a_rejection_that_changes_nothing_else(
    case: Case, monkeypatch: pytest.MonkeyPatch
) -> None:
    s = rich_story()
    s.state.strict = False
    message = case.event(s)
    before, head = _frozen(s.state), s.state.head_seq
    with monkeypatch.context() as patched:
        _patch_check(patched, case)
        reason = s.apply(message, source=case.source)
    assert reason == f"internal error while applying: {Boom('unexpected')!r}"
    assert (s.state.rejections[-1].event_type, s.state.rejections[-1].reason) == (case.kind, reason)
    assert_only_rejection_added(s.state, before, head, 0)
    # The event itself was valid: unpatched, it applies.
    assert s.apply(message, source=case.source) is None


@pytest.mark.parametrize("case", CASES, ids=[case.kind for case in CASES])
def test_in_strict_mode_a_check_that_raises_propagates_and_changes_nothing(
    case: Case, monkeypatch: pytest.MonkeyPatch
) -> None:
    s = rich_story()
    message = case.event(s)
    before = _frozen(s.state)
    with monkeypatch.context() as patched:
        _patch_check(patched, case)
        with pytest.raises(Boom):
            s.apply(message, source=case.source)
    assert _frozen(s.state) == before  # head_seq included: the event was not folded at all
    assert s.apply(message, source=case.source) is None


def _ghost_output(s: Story) -> Message:
    daily2 = s.uuid("daily/2")
    outputs = [pb.OutputResult(instance_uuid=daily2, location="/d2"), pb.OutputResult(instance_uuid=daily2)]
    return pb.JobRunSuccess(job_run_id="run-d2", input_instance_uuids=[s.uuid("raw/c")], outputs=outputs)


def _second_wait_not_schedulable(s: Story) -> Message:
    waits = [
        pb.InstanceWait(instance_uuid=s.uuid("daily/1"), upstream_refs=["raw/x"]),
        pb.InstanceWait(instance_uuid=s.uuid("daily/2"), upstream_refs=["raw/x"]),  # Building
    ]
    return pb.InstancesWaitUpstream(waits=waits)


def _epoch_moving_a_survivors_bucket(s: Story) -> Message:
    msg = epoch(s, ["a", "b"], "a", "e2")
    del msg.connector_state[1].data[-1]  # b's 4 ...
    msg.connector_state[0].data.append(4)  # ... given to the leader
    return msg


def _message_changing_another_state(s: Story) -> Message:
    states = group_of(s).states
    msg = message(s, with_state(states["a"]))
    msg.connector_state[1].data.remove(4)
    return msg


# Invalid events that fail late in their check, after part of what they name was resolved.
INVALID: list[tuple[str, Build, str]] = [
    (
        "want_create",
        lambda s: pb.WantCreate(want_id="w-x", partition_refs=["a"], parent_want_id="w-daily", root_want_id="w-x"),
        "is not the parent's root",
    ),
    ("want_cancel", lambda s: pb.WantCancel(want_id="w-weekly-missing"), "does not exist"),
    (
        "job_run_buffer",
        lambda s: pb.JobRunBuffer(job_run_id="r", job_label="j", instance_uuids=[s.uuid("daily/1"), s.uuid("weekly")]),
        "not buildable",
    ),
    ("job_run_heartbeat", lambda s: pb.JobRunHeartbeat(job_run_id="run-d1"), "already succeeded"),
    ("job_run_success", _ghost_output, "listed more than once"),
    ("job_run_failure", lambda s: pb.JobRunFailure(job_run_id="run-d2", retry_after_ms=-1), "must not be negative"),
    ("job_run_cancel", lambda s: pb.JobRunCancel(job_run_id="run-w"), "already dep_miss"),
    (
        "job_run_missing_deps",
        lambda s: pb.JobRunMissingDeps(job_run_id="run-d2", missing_refs=["raw/b", "daily/2"]),
        "missing input of its own build",
    ),
    ("partition_taint", lambda s: pb.PartitionTaint(partition_ref="weekly"), "only a Live instance"),
    ("partition_observed", lambda s: pb.PartitionObserved(partition_ref="daily/2", location="/x"), "being built"),
    ("instance_retention", lambda s: pb.InstanceRetention(drop_superseded_created_before_seq=0), "must be positive"),
    ("instances_wait_upstream", _second_wait_not_schedulable, "only a schedulable one can wait"),
    (
        "bucket_run_start",
        lambda s: pb.BucketRunStart(bucket=pb.BucketScope(namespace="ns", bucket_id=4, bucket_total=3)),
        "is not between 1 and bucket_total 3",
    ),
    ("bucket_layout", lambda s: pb.BucketLayout(namespace="ns", bucket_total=-1), "is not between 1 and"),
    ("group_epoch", _epoch_moving_a_survivors_bucket, "member 'b' would lose buckets 4"),
    ("group_task_message", _message_changing_another_state, "changes the data of 'b'"),
    (
        "source_scan_progress",
        lambda s: pb.SourceScanProgress(source="raw", pass_number=1, after_key=b"k"),
        "must begin at the start of shard 0",
    ),
    ("source_scan_request", lambda s: pb.SourceScanRequest(source="r" * 300), "longer than 256"),
    ("subscription_create", lambda s: subscription("more", shard_count=5), "5 shards cannot split 12"),
    (
        "subscription_change",
        lambda s: pb.SubscriptionChange(name="hooks", action=pb.SUBSCRIPTION_ACTION_RESUME),
        "is active",
    ),
    ("subscription_reshard", lambda s: pb.SubscriptionReshard(name="hooks", shard_count=4, rq_partitions=18), "18"),
    (
        "subscription_offset_reset",
        lambda s: pb.SubscriptionOffsetReset(name="hooks", queue=pb.SUBSCRIPTION_QUEUE_RQ, to_seq=10**6),
        "to_seq is 0 to",
    ),
    # Fenced decisions by a member that does not own the bucket: refused once everything else was resolved.
    (
        "job_run_buffer",
        lambda s: pb.JobRunBuffer(
            job_run_id="r", job_label="j", instance_uuids=[s.uuid("daily/1")], fence=not_owner(s, "daily/1")
        ),
        "fenced decision: task",
    ),
    (
        "job_run_failure",
        lambda s: pb.JobRunFailure(job_run_id="run-d2", fence=not_owner(s, "daily/2")),
        "fenced decision: task",
    ),
    (
        "instances_wait_upstream",
        lambda s: pb.InstancesWaitUpstream(
            waits=[pb.InstanceWait(instance_uuid=s.uuid("daily/1"), upstream_refs=["raw/x"])],
            fence=not_owner(s, "daily/1"),
        ),
        "fenced decision: task",
    ),
    (
        "want_create",
        lambda s: pb.WantCreate(
            want_id="w-f", partition_refs=["a"], fence=pb.DecisionFence(group="g", epoch_id="e0", task_id="a")
        ),
        "fenced decision: epoch 'e0' is not an epoch of group 'g'",
    ),
]


def test_every_event_type_that_can_be_invalid_has_an_invalid_case() -> None:
    """Below, or as a rejected event of a golden log."""
    golden = {event.WhichOneof("payload") for _, _, _, event, rejected in golden_steps() if rejected}
    assert {kind for kind, _, _ in INVALID} | golden == set(fold.HANDLERS) - {"clock_tick"}  # a tick is always valid


@pytest.mark.parametrize(("kind", "build", "reason"), INVALID, ids=[kind for kind, _, _ in INVALID])
def test_a_rejected_event_changes_nothing_but_head_seq_and_rejections(kind: str, build: Build, reason: str) -> None:
    s = rich_story()
    message = build(s)
    before, head = _frozen(s.state), s.state.head_seq
    s.rejected(message, reason)
    assert s.state.rejections[-1].event_type == kind
    assert_only_rejection_added(s.state, before, head, 0)


def test_an_apply_phase_that_raises_breaks_the_state_for_good(monkeypatch: pytest.MonkeyPatch) -> None:
    """Half-applied: FoldError (in normal mode too), then no further event, snapshot or rejection."""
    s = rich_story()
    s.state.strict = False
    with monkeypatch.context() as patched:
        # The success is half-applied: the run moved, its instances did not.
        patched.setattr(job_runs, "move_instance_and_waiters", _raise_boom)
        with pytest.raises(FoldError, match="job_run_success event at seq") as raised:
            s.apply(_success(s))
    assert isinstance(raised.value.__cause__, Boom)
    state = s.state
    assert isinstance(state, BrokenBuildState) and state.broken and state.broken_seq == len(s.events)
    assert state.canonical_instance("daily/2") is not None  # reads still work, for a post-mortem
    with pytest.raises(FoldError):
        s.apply(pb.ClockTick())
    with pytest.raises(FoldError):
        state.apply_payload(len(s.events) + 1, b"\xff\xff")  # not even a rejection is recorded
    with pytest.raises(FoldError):  # through a bound method taken before it broke, as replay_into holds one
        BuildState.apply_payload(state, len(s.events) + 1, b"\xff\xff")
    with pytest.raises(SnapshotError, match="half-applied"):
        encode_state(state)
    assert not BuildState().broken


def test_snapshot_format_fingerprints_every_fold_module() -> None:
    """A change to any module of the fold package (a new one included) makes older snapshots invisible."""
    package = Path(fold.__file__).parent
    assert set(package.glob("*.py")) <= set(_fold_sources())
    assert {"__init__.py", "transitions.py", "wants.py", "job_runs.py", "instances.py"} <= {
        path.name for path in _fold_sources()
    }
