"""The histories the fold keeps for reads of the past: packed entries, kept fields, versions, the clock."""

from __future__ import annotations

from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.fold.build_state import BuildState
from partbuild.state.fold.history import (
    CLOCK_MARK_EVERY,
    HEARTBEAT_PAIR,
    clock_mark,
    entries,
    entry,
    field_at,
    heartbeat_at,
    keep_field,
    keep_versions,
    run_entries,
    run_entry,
    versions_at,
)
from partbuild.state.fold.past import PastState
from partbuild.state.fold.records import InstanceState, JobRunState
from partbuild.state.log.events import envelope

from foldkit import Story


def test_entries_come_back_newest_first_with_their_seqs_and_states() -> None:
    history = 0
    for seq, state in ((3, 1), (17, 4), (2**40, 7)):
        history = history << 48 | entry(seq, state)
    assert list(entries(history)) == [(2**40, 7), (17, 4), (3, 1)]
    runs = run_entry(5, JobRunState.RUNNING, 1_790_000_000_123) << 92 | run_entry(9, JobRunState.FAILED, 17)
    assert list(run_entries(runs)) == [(9, JobRunState.FAILED, 17), (5, 1, 1_790_000_000_123)]
    assert list(entries(0)) == []


def test_a_runs_heartbeat_as_of_a_seq_is_a_search_of_its_packed_pairs() -> None:
    beats = bytearray()
    for seq in range(10, 100_010, 10):
        beats += HEARTBEAT_PAIR.pack(seq, 1_790_000_000_000 + seq)
    assert len(beats) == 16 * 10_000  # 16 bytes a heartbeat, however many: no copy per heartbeat
    assert heartbeat_at(beats, 9) == (0, 0) and heartbeat_at(None, 50) == (0, 0)
    assert heartbeat_at(beats, 10) == (10, 1_790_000_000_010)
    assert heartbeat_at(beats, 55_555) == (55_550, 1_790_000_055_550)
    assert heartbeat_at(beats, 10**9) == (100_000, 1_790_000_100_000)


def test_a_record_changed_once_keeps_no_history_and_a_retried_one_keeps_its_changes() -> None:
    s = Story()
    s.observe("raw/a")
    raw = s.state.instances[s.uuid("raw/a")]
    histories = s.state.instance_histories
    assert raw.state == InstanceState.LIVE and raw.uuid not in histories  # Live when created: nothing kept
    s.want("w", "out/a")
    built = s.build("run-1", "out/a", [raw.uuid])
    instance = s.state.instances[built]
    assert instance.state == InstanceState.LIVE and built not in histories  # Building is its attempt's
    s.want("w2", "out/b")
    uuid = s.uuid("out/b")
    s.buffer("run-2", "out/b")
    s.ok(pb.JobRunFailure(job_run_id="run-2", error_class=pb.ERROR_CLASS_RETRYABLE, message="flaky"))
    s.buffer("run-3", "out/b")
    retried = s.state.instances[uuid]
    # Kept: Up-for-retry only; Missing at its creation and Building at each attempt are implied.
    assert retried.state == InstanceState.BUILDING
    assert [InstanceState(state) for _, state in entries(histories[uuid])] == [InstanceState.UP_FOR_RETRY]


def test_a_kept_field_is_found_as_of_any_seq() -> None:
    state = BuildState()
    keep_field(state, "u", 5, "note", "first")
    keep_field(state, "u", 9, "waits", ("a", "b"))
    keep_field(state, "u", 12, "note", None)
    assert field_at(state, "u", "note", 4) is None
    assert field_at(state, "u", "note", 11) == ("first", 5)
    assert field_at(state, "u", "note", 12) == (None, 12)
    assert field_at(state, "u", "waits", 100) == (("a", "b"), 9)
    assert field_at(state, "other", "note", 100) is None


def test_small_records_are_versioned_and_read_back_as_of_a_seq() -> None:
    state = BuildState(strict=True)
    layout = pb.BucketLayout(namespace="ns", bucket_total=4)
    assert state.apply(1, envelope(layout)) is None
    assert state.apply(2, envelope(pb.ClockTick())) is None
    assert state.apply(3, envelope(pb.BucketLayout(namespace="ns", bucket_total=8))) is None
    assert versions_at(state, "bucket_layouts", 0) == {}
    assert versions_at(state, "bucket_layouts", 2) == {"ns": (4, 1)}
    assert versions_at(state, "bucket_layouts", 3) == {"ns": (8, 3)}
    assert len(state.versions["bucket_layouts"]["ns"]) == 2  # the tick changed nothing: no version


def test_the_clock_as_of_a_seq_starts_from_the_mark_at_or_before_it() -> None:
    state = BuildState()
    for seq in range(1, 3 * CLOCK_MARK_EVERY + 5):
        assert state.apply(seq, envelope(pb.ClockTick(), timestamp_ms=1_000 * seq)) is None
    assert clock_mark(state, CLOCK_MARK_EVERY - 2) == (0, 0)
    assert clock_mark(state, CLOCK_MARK_EVERY - 1) == (CLOCK_MARK_EVERY - 1, 1_000 * (CLOCK_MARK_EVERY - 1))
    mark_seq, clock = clock_mark(state, 2 * CLOCK_MARK_EVERY + 10)
    assert (mark_seq, clock) == (2 * CLOCK_MARK_EVERY - 1, 1_000 * mark_seq)
    past = PastState(state, 77, lambda: 123)
    assert past.clock_ms == 123 and past.head_seq == 77


def test_instances_retention_dropped_are_still_counted_as_of_the_seqs_they_were_held() -> None:
    """`keep_dropped`: counts as of any seq equal replay's, before and after the drop, whatever the dropped went
    through (retried, built, tainted; canceled and replaced)."""
    s = Story()
    s.want("w", "d/1", "d/2")
    s.buffer("r1", "d/1")
    s.fail("r1", permanent=False)
    s.build("r2", "d/1")
    s.ok(pb.PartitionTaint(partition_ref="d/1", reason="late"))
    s.buffer("r3", "d/2")
    s.ok(pb.JobRunCancel(job_run_id="r3", reason="stop", replace_instances=True))
    s.want("w2", "d/1")
    s.ok(pb.InstanceRetention(drop_superseded_before_seq=s.state.head_seq + 1))
    assert s.state.dropped_instances == 2 and s.state.dropped_changes
    s.build("r4", "d/1")
    for seq in range(1, s.state.head_seq + 1):
        replayed = BuildState(strict=True)
        for at, event in enumerate(s.events[:seq], 1):
            replayed.apply(at, event)
        assert PastState(s.state, seq, lambda: 0).counts() == replayed.counts(), seq


def test_an_equal_value_that_pickles_apart_keeps_no_new_version() -> None:
    """Two equal values may pickle to other bytes (an equal set of strings iterates in another order in another
    process; a dict in another insertion order here): a version is kept when the value changed, not its bytes."""
    state = BuildState()
    state.groups = {"g": {"a": 1, "b": 2}}
    keep_versions(state, 1, ("groups",))
    state.groups["g"] = {"b": 2, "a": 1}  # equal, pickled apart
    keep_versions(state, 2, ("groups",))
    assert [seq for seq, _ in state.versions["groups"]["g"]] == [1]
    state.groups["g"] = {"b": 2, "a": 3}
    keep_versions(state, 3, ("groups",))
    assert [seq for seq, _ in state.versions["groups"]["g"]] == [1, 3]
