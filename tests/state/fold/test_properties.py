"""Property-based tests of the fold: random event logs, valid and invalid, against BuildState.

The logs are symbolic steps materialized into fixed events (tests/kits/stepkit.py); the
properties are then checked on them (tests/kits/invariantkit.py):

1. replay with `strict=True` never raises (a handler bug would raise instead of
   becoming a rejection);
2. two replays (Event objects, and serialized payloads through one reused
   scratch message as `replay_into` does) give the same digest and the same
   complete state, derived indexes included (replays in processes with other
   PYTHONHASHSEEDs: tests/e2e/test_fold_digest_processes.py);
3. snapshot + tail (at one or two hypothesis-chosen cut points) equals the full
   replay, digest and complete state;
4. `check_invariants` holds after every event, every applied event moves
   entities only along allowed lifecycle edges (`check_transitions`), and a
   taint reaches exactly what it should (`check_taint_outcome`);
5. a rejected event changes nothing but `head_seq` and `rejections`; events the
   generator built to be invalid are rejected, those built to be valid applied.
"""

from __future__ import annotations

import pickle

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.fold.build_state import BuildState
from partbuild.state.fold.records import InstanceState
from partbuild.state.log.digest import state_digest
from partbuild.state.log.snapshot import decode_state, encode_state

from invariantkit import (
    check_invariants,
    check_taint_outcome,
    check_transitions,
    check_unchanged_but_rejection,
    marks,
    state_view,
)
from stepkit import Entry, Materializer, Step, apply_entry, materialize, replay, steps_strategy

# About 5 s each on a 2-core machine; the logs are long, so one example exercises many lifecycles.
FAST = settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)


@FAST
@given(steps=steps_strategy, data=st.data())
def test_replays_agree_and_snapshot_plus_tail_equals_full_replay(steps: list[Step], data: st.DataObject) -> None:
    """Strict replay never raises; replays agree; snapshots (one or two, chained) + tail agree."""
    materializer = Materializer()
    entries = materializer.run(steps)
    full = replay(entries)
    via_bytes = replay(entries, via_bytes=True)
    digest = state_digest(full)
    assert state_digest(via_bytes) == digest
    assert state_digest(materializer.state) == digest
    view = state_view(full)
    assert state_view(via_bytes) == view
    assert state_view(materializer.state) == view

    # Clamped rather than bounded by len(entries), so dropping a step while shrinking keeps the draws valid.
    first = min(data.draw(st.integers(0, 200), label="snapshot after entry"), len(entries))
    second = min(first + data.draw(st.integers(0, 200), label="entries until a second snapshot"), len(entries))
    state = decode_state(encode_state(replay(entries[:first])))
    state = decode_state(encode_state(replay(entries[first:second], state)))
    resumed = replay(entries[second:], state, via_bytes=True)
    assert state_digest(resumed) == digest
    assert state_view(resumed) == view


@FAST
@given(steps=steps_strategy)
def test_invariants_hold_and_rejections_change_nothing(steps: list[Step]) -> None:
    """After every event the invariants hold; a rejected event only bumps head_seq and adds its Rejection."""
    entries = materialize(steps)
    state = BuildState(strict=True)
    clock = 0
    applied = rejected = 0
    for entry in entries:
        head, rejection_count = state.head_seq, len(state.rejections)
        before = pickle.dumps(state, protocol=pickle.HIGHEST_PROTOCOL)
        lifecycle = marks(state)
        reason = apply_entry(state, entry)
        assert state.head_seq == entry.seq
        if reason is None:
            applied += 1
            assert entry.expect != "reject", f"invalid event was applied: {entry.action}"
            assert len(state.rejections) == rejection_count
            parsed = pb.Event.FromString(entry.payload)
            clock = max(clock, parsed.timestamp_ms)
            check_transitions(lifecycle, state, entry.seq, parsed.WhichOneof("payload"))
            if parsed.HasField("partition_taint"):
                check_taint_outcome(state, entry.seq, parsed.partition_taint)
        else:
            rejected += 1
            assert entry.expect != "apply", f"valid event rejected ({reason}): {entry.action}"
            assert reason
            assert len(state.rejections) == rejection_count + 1
            assert state.rejections[-1].seq == entry.seq and state.rejections[-1].reason == reason
            check_unchanged_but_rejection(before, state, head, rejection_count, entry.action)
        assert state.clock_ms == clock
        check_invariants(state)
    event(f"applied events: {min(applied // 10 * 10, 40)}+")
    event(f"rejected events: {min(rejected // 10 * 10, 40)}+")
    for name, count in state.counts()["wants"].items():
        if count:
            event(f"final state has a want {name}")
    if state.dropped_instances:
        event("retention dropped instances")
    if any(i.state == InstanceState.TAINTED for i in state.instances.values()):
        event("an instance was tainted")


@settings(max_examples=200, deadline=None)
@given(blobs=st.lists(st.binary(max_size=64), max_size=20))
def test_random_bytes_never_raise(blobs: list[bytes]) -> None:
    """Arbitrary payloads are applied or rejected, never raise, and replay to the same digest."""
    state = BuildState(strict=True)
    scratch = pb.Event()
    for seq, blob in enumerate(blobs, start=1):
        state.apply_payload(seq, blob, scratch)
        check_invariants(state)
    assert state.head_seq == len(blobs)
    again = replay([Entry(seq, blob, None, None, ()) for seq, blob in enumerate(blobs, start=1)])
    assert state_view(again) == state_view(state)
