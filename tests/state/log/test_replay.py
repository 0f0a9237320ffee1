"""Replay through the real store: snapshot + tail, state as of a seq, incompatible snapshots."""

from __future__ import annotations

import sqlite3

import pytest

from partbuild.examples.clicks.simulate import SimulationPlan, simulate
from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.fold.build_state import BuildState
from partbuild.state.fold.records import InstanceState
from partbuild.state.log.digest import state_digest
from partbuild.state.log.events import envelope
from partbuild.state.log.replay import load_state, replay_into, save_snapshot, state_as_of
from partbuild.state.log.snapshot import encode_state, snapshot_format
from partbuild.state.log.store import EventLog
from partbuild.state.queries.lineage import ref_history

PLAN = SimulationPlan(weeks=26, sites=2)


def _fill(log: EventLog) -> int:
    events = list(simulate(PLAN))
    for start in range(0, len(events), 500):
        log.append(events[start : start + 500], expected_head=start)
    return len(events)


def _full_replay(log: EventLog, upto: int | None = None) -> BuildState:
    state = BuildState(strict=True)
    replay_into(state, log, upto_seq=upto)
    return state


def test_simulated_history_replays_without_rejections(event_log: EventLog) -> None:
    total = _fill(event_log)
    state = _full_replay(event_log)
    assert state.head_seq == total
    assert state.rejections == []
    counts = state.counts()
    assert counts["wants"]["successful"] == len(state.wants)
    assert counts["instances"]["tainted"] > 0 and counts["job_runs"]["failed"] > 0


def test_snapshot_plus_tail_equals_full_replay(event_log: EventLog) -> None:
    total = _fill(event_log)
    snapshots = event_log.snapshots
    cut = total // 3
    save_snapshot(_full_replay(event_log, cut), snapshots)

    loaded, report = load_state(event_log, snapshots)
    assert (report.snapshot_seq, report.replayed) == (cut, total - cut)
    assert state_digest(loaded) == state_digest(_full_replay(event_log))


def test_state_as_of_uses_older_snapshot_and_stops_at_seq(event_log: EventLog) -> None:
    total = _fill(event_log)
    snapshots = event_log.snapshots
    for cut in (total // 4, total // 2):
        save_snapshot(_full_replay(event_log, cut), snapshots)
    target = total // 3  # between the two snapshots: only the older one may be used
    past = state_as_of(event_log, snapshots, target)
    assert past.head_seq == target
    assert state_digest(past) == state_digest(_full_replay(event_log, target))


def test_incompatible_or_corrupt_snapshots_are_ignored(event_log: EventLog) -> None:
    total = _fill(event_log)
    snapshots = event_log.snapshots
    good_cut = total // 4
    save_snapshot(_full_replay(event_log, good_cut), snapshots)
    # Written by other code: a different format tag is never even returned.
    snapshots.save(total - 10, "buildstate/0/older-code", encode_state(_full_replay(event_log, total - 10)))
    # Same tag but garbage bytes: decoded, refused, and an older snapshot is used instead.
    snapshots.save(total // 2, snapshot_format(), b"definitely not a snapshot")

    loaded, report = load_state(event_log, snapshots)
    assert report.snapshot_seq == good_cut
    assert report.ignored_snapshots == 1
    assert state_digest(loaded) == state_digest(_full_replay(event_log))


def test_temporal_questions_about_a_rebuilt_partition(event_log: EventLog) -> None:
    _fill(event_log)
    now = _full_replay(event_log)
    # The first taint in the simulation hits site 0's first daily partition of week 25.
    tainted_ref = "agg/daily_clicks/site=0/date=2026-06-22"
    old, new = ref_history(now, tainted_ref)[1], ref_history(now, tainted_ref)[0]
    assert old.state == InstanceState.TAINTED and new.state == InstanceState.LIVE
    before_taint = state_as_of(event_log, None, old.superseded_seq - 1)
    assert before_taint.canonical[tainted_ref] == old.uuid
    assert before_taint.instances[old.uuid].state == InstanceState.LIVE
    assert new.uuid not in before_taint.instances


def test_unparseable_rows_replay_as_rejections(event_log: EventLog) -> None:
    event_log.append([envelope(pb.WantCreate(want_id="w", partition_refs=["a"]))])
    event_log.append([pb.Event()])  # no payload: a rejection, not a crash
    state = _full_replay(event_log)
    assert [r.seq for r in state.rejections] == [2]
    assert "w" in state.wants


def test_bytes_that_do_not_parse_are_a_rejection_and_replay_goes_on(sqlite_url: str) -> None:
    """A stored payload that is not an Event (written by something else): replay records it as the fold
    would (`apply_payload`) and folds the events after it."""
    with EventLog.open(sqlite_url, auto_upgrade=True) as log:
        log.append([envelope(pb.WantCreate(want_id=want, partition_refs=[want])) for want in ("a", "b", "c")])
    with sqlite3.connect(sqlite_url.removeprefix("sqlite:///")) as conn:
        conn.execute("UPDATE events SET payload = ? WHERE seq = 2", (b"\xff\xff",))
    with EventLog.open(sqlite_url) as log:
        state = BuildState()
        assert replay_into(state, log) == 3
        one_by_one = BuildState()
        for seq, payload in log.iter_payloads():
            one_by_one.apply_payload(seq, payload)
    assert state.head_seq == 3 and sorted(state.wants) == ["a", "c"]
    assert [(r.seq, r.event_type) for r in state.rejections] == [(2, "unparseable")]
    assert [r.__getstate__() for r in state.rejections] == [r.__getstate__() for r in one_by_one.rejections]
    assert state_digest(state) == state_digest(one_by_one)


@pytest.mark.parametrize("upto", [0, 1])
def test_state_as_of_start_of_log(event_log: EventLog, upto: int) -> None:
    _fill(event_log)
    assert state_as_of(event_log, event_log.snapshots, upto).head_seq == upto
