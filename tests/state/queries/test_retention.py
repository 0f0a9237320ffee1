"""Retention, the state side: InstanceRetention through real logs, its preview, and the cutoff search.

A story (raw data observed, dailies and a weekly built from it, a taint, new
versions of source data, rebuilds) is written to a real log (SQLite and
PostgreSQL) with an InstanceRetention in the middle and more events after it.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.fold.build_state import BuildState
from partbuild.state.fold.records import InstanceState
from partbuild.state.log.digest import state_digest
from partbuild.state.log.events import envelope, system
from partbuild.state.log.replay import load_state, replay_into, save_snapshot, state_as_of
from partbuild.state.log.snapshot import decode_state, encode_state
from partbuild.state.log.store import EventLog, StoredEvent
from partbuild.state.queries.lineage import attempts_for, builder_of, lineage, ref_history
from partbuild.state.queries.retention import cutoff_seq_before, cutoff_sparing_active_runs, retention_candidates

from foldkit import Story
from stepkit import Step, materialize, replay, steps_strategy


@dataclass
class Written:
    """A story written to a log: the seq of its InstanceRetention, and UUIDs worth looking at."""

    retention_seq: int
    cutoff: int
    uuids: dict[str, str]


def _story() -> tuple[Story, int, dict[str, str]]:
    """The story up to (not including) the retention event; returns it, the cutoff and named UUIDs."""
    s = Story()
    s.observe("raw/1")
    s.observe("raw/2")
    s.want("w-daily", "daily/1", "daily/2")
    s.buffer("run-d", "daily/1", "daily/2")
    u = {"raw1": s.uuid("raw/1"), "raw2": s.uuid("raw/2"), "daily1": s.uuid("daily/1"), "daily2": s.uuid("daily/2")}
    output = [pb.OutputResult(instance_uuid=u["daily1"], input_instance_uuids=[u["raw1"]])]
    s.ok(pb.JobRunSuccess(job_run_id="run-d", input_instance_uuids=[u["raw2"]], outputs=output))
    s.want("w-weekly", "weekly")
    u["weekly"] = s.build("run-w", "weekly", [u["daily1"], u["daily2"]])
    s.ok(pb.PartitionTaint(partition_ref="raw/1", reason="late"))  # raw/1, daily/1 and weekly superseded
    s.observe("raw/2", "/data/raw/2/v2")  # a new version: raw/2 superseded while Live; daily/2 stays built from it
    cutoff = s.state.head_seq + 1  # the instances superseded so far were superseded before it
    s.observe("raw/1", "/data/raw/1/v2")  # the canonical raw/1 the taint created becomes Live
    s.want("w-again", "weekly", "daily/1")
    u["daily1b"] = s.build("run-d1b", "daily/1", [s.uuid("raw/1")])
    u["weekly2"] = s.build("run-wb", "weekly", [u["daily1b"], u["daily2"]])
    s.observe("raw/3")
    u["raw3"] = s.uuid("raw/3")
    s.observe("raw/3", "/data/raw/3/v2")  # superseded, but after the cutoff: kept
    u.update(raw1b=s.uuid("raw/1"), raw2b=s.uuid("raw/2"))
    return s, cutoff, u


def _write(log: EventLog) -> Written:
    """The story, its retention event and a tail of events after it, appended to `log` in three batches."""
    s, cutoff, uuids = _story()
    log.append(s.events, expected_head=0)
    retention_seq = log.head() + 1
    log.append([envelope(pb.InstanceRetention(drop_superseded_before_seq=cutoff), source=system("retention"))])
    # After it: events on instances whose inputs, consumers and previous instances were dropped.
    tail = Story(start_ms=s.clock_ms)
    tail.state = _replay(log)
    tail.events = [pb.Event()] * log.head()  # Story numbers events by their count
    tail.ok(pb.PartitionTaint(partition_ref="daily/2", reason="upstream raw/2 was replaced"))  # and weekly2
    tail.want("w-last", "daily/2")
    tail.build("run-d2c", "daily/2", [uuids["raw2b"]])
    log.append(tail.events[retention_seq:], expected_head=retention_seq)
    return Written(retention_seq, cutoff, uuids)


def _replay(log: EventLog, upto: int | None = None) -> BuildState:
    state = BuildState(strict=True)
    replay_into(state, log, upto_seq=upto)
    assert state.rejections == []
    return state


def test_replays_across_a_retention_agree_with_and_without_snapshots(event_log: EventLog) -> None:
    written = _write(event_log)
    full = _replay(event_log)
    assert full.dropped_instances == 4 and state_digest(_replay(event_log)) == state_digest(full)
    snapshots = event_log.snapshots
    for cut in (written.retention_seq - 1, written.retention_seq):  # just before it, and just after
        save_snapshot(_replay(event_log, cut), snapshots)
        loaded, report = load_state(event_log, snapshots, upto_seq=event_log.head())
        assert report.snapshot_seq == cut and report.replayed == event_log.head() - cut
        assert state_digest(loaded) == state_digest(full)
    # A snapshot taken before the retention, decoded, then the tail: the same state again.
    before = decode_state(encode_state(_replay(event_log, written.retention_seq - 1)))
    replay_into(before, event_log)
    assert state_digest(before) == state_digest(full)


def test_retention_drops_old_superseded_instances_only(event_log: EventLog) -> None:
    written = _write(event_log)
    u = written.uuids
    before = _replay(event_log, written.retention_seq - 1)
    after = _replay(event_log, written.retention_seq)
    gone = set(before.instances) - set(after.instances)
    assert gone == {u["raw1"], u["daily1"], u["weekly"], u["raw2"]}
    assert set(after.instances) <= set(before.instances) and after.dropped_instances == len(gone)
    # Every canonical instance is untouched but for forgetting dropped consumers; one superseded after
    # the cutoff stays.
    assert after.canonical == before.canonical
    for uuid in before.canonical.values():
        kept, old = after.instances[uuid], before.instances[uuid]
        assert [c for c in old.consumers or () if c not in gone] == list(kept.consumers or [])
        kept_fields = dict(zip(kept.__slots__, kept.__getstate__(), strict=True))
        old_fields = dict(zip(old.__slots__, old.__getstate__(), strict=True))
        assert {**kept_fields, "consumers": None} == {**old_fields, "consumers": None}
    assert before.instances[u["daily2"]].consumers == [u["weekly"], u["weekly2"]]
    assert after.instances[u["raw3"]].superseded_seq and after.superseded == [u["raw3"]]
    assert after.instance_counts == [
        sum(1 for i in after.instances.values() if i.state == state) for state in InstanceState
    ]
    # An as-of state before the retention still holds what it dropped.
    past = state_as_of(event_log, event_log.snapshots, written.retention_seq - 1)
    assert gone <= set(past.instances) and past.dropped_instances == 0


def test_queries_show_dropped_instances_as_dropped_and_never_raise(event_log: EventLog) -> None:
    written = _write(event_log)
    u = written.uuids
    state = _replay(event_log)
    # The second weekly read the second daily/1 and the first daily/2, which read the dropped first raw/2.
    up = lineage(state, u["weekly2"], direction="upstream", depth=3)
    assert up.nodes == {
        u["weekly2"]: state.instances[u["weekly2"]],
        u["daily1b"]: state.instances[u["daily1b"]],
        u["daily2"]: state.instances[u["daily2"]],
        u["raw1b"]: state.instances[u["raw1b"]],
        u["raw2"]: None,  # dropped by retention
    }
    assert set(up.edges) == {(u["daily1b"], u["weekly2"]), (u["daily2"], u["weekly2"]), (u["raw1b"], u["daily1b"])} | {
        (u["raw2"], u["daily2"])
    }
    assert up.depth_of[u["raw2"]] == 2
    # Surviving inputs no longer list the dropped instances among their consumers.
    assert list(state.instances[u["daily2"]].consumers or ()) == [u["weekly2"]]
    assert list(state.instances[u["raw1b"]].consumers or ()) == [u["daily1b"]]
    assert set(lineage(state, u["daily2"], direction="downstream", depth=5).nodes) == {u["daily2"], u["weekly2"]}
    # History stops where retention dropped the older instances.
    assert [i.uuid for i in ref_history(state, "raw/1")] == [u["raw1b"]]
    assert [i.uuid for i in ref_history(state, "raw/2")] == [u["raw2b"]]
    assert [i.uuid for i in ref_history(state, "weekly")] == [state.canonical["weekly"], u["weekly2"]]
    seen = {uuid for s in (state_as_of(event_log, None, written.retention_seq - 1), state) for uuid in s.instances}
    for uuid in seen:
        builder_of(state, uuid)
        attempts_for(state, uuid)
        if uuid in state.instances:
            for direction in ("upstream", "downstream", "both"):
                lineage(state, uuid, direction=direction, depth=10)  # type: ignore[arg-type]
        else:
            assert builder_of(state, uuid) is None and attempts_for(state, uuid) == []
            with pytest.raises(KeyError):
                lineage(state, uuid)
    # Job runs are never dropped: a run still names the instances it built, held or not.
    assert state.job_runs["run-d"].instance_uuids == (u["daily1"], u["daily2"])
    assert [r.job_run_id for r in attempts_for(state, u["daily2"])] == ["run-d"]


def test_retention_candidates_agree_with_the_fold(event_log: EventLog) -> None:
    written = _write(event_log)
    before = _replay(event_log, written.retention_seq - 1)
    for cutoff in range(-1, before.head_seq + 3):
        candidates = retention_candidates(before, cutoff)
        folded = decode_state(encode_state(before))
        reason = folded.apply(before.head_seq + 1, envelope(pb.InstanceRetention(drop_superseded_before_seq=cutoff)))
        assert (reason is None) == (cutoff > 0)
        disappeared = [uuid for uuid in before.instances if uuid not in folded.instances]
        assert sorted(i.uuid for i in candidates) == sorted(disappeared)
        assert [i.uuid for i in candidates] == [uuid for uuid in before.superseded if uuid in disappeared]
        assert folded.dropped_instances == len(candidates)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(steps=steps_strategy, data=st.data())
def test_retention_never_drops_what_is_canonical_building_or_waiting(steps: list[Step], data: st.DataObject) -> None:
    """On generated logs: the preview is what the fold drops, and that is never canonical, built or waiting."""
    state = replay(materialize(steps))
    protected = set(state.canonical.values())
    protected.update(uuid for run_id in state.active_run_ids for uuid in state.job_runs[run_id].instance_uuids)
    protected.update(uuid for waiters in state.waiters.values() for uuid in waiters)
    cutoff = data.draw(st.integers(1, state.head_seq + 2), label="cutoff")
    candidates = retention_candidates(state, cutoff)
    assert not protected & {i.uuid for i in candidates}
    assert all(0 < i.superseded_seq < cutoff and i.waiting_on is None for i in candidates)
    folded = decode_state(encode_state(state))
    assert folded.apply(state.head_seq + 1, envelope(pb.InstanceRetention(drop_superseded_before_seq=cutoff))) is None
    assert set(state.instances) - set(folded.instances) == {i.uuid for i in candidates}


def test_a_cutoff_sparing_active_runs_keeps_the_inputs_a_running_job_may_name() -> None:
    """Superseded while a job that read it runs: the plain cutoff drops it (the success is then rejected)."""
    s = Story()
    s.observe("raw")
    raw = s.uuid("raw")
    s.want("w", "daily")
    s.buffer("run", "daily")  # the job reads raw's Live instance...
    s.observe("raw", "/data/raw/v2")  # ...which a new version supersedes while it runs
    cutoff = s.state.head_seq + 1
    assert [i.uuid for i in retention_candidates(s.state, cutoff)] == [raw]
    spared = cutoff_sparing_active_runs(s.state, cutoff)
    assert spared == s.state.job_runs["run"].created_seq + 1 and retention_candidates(s.state, spared) == []
    assert cutoff_sparing_active_runs(s.state, 1) == 1

    plain = decode_state(encode_state(s.state))
    plain.apply(s.state.head_seq + 1, envelope(pb.InstanceRetention(drop_superseded_before_seq=cutoff)))
    success = envelope(pb.JobRunSuccess(job_run_id="run", input_instance_uuids=[raw]))
    assert plain.apply(s.state.head_seq + 2, success) == f"input instance {raw!r} is unknown"
    s.ok(pb.InstanceRetention(drop_superseded_before_seq=spared))
    s.succeed("run", [raw])
    # No active run left: nothing to spare, the cutoff stands.
    assert cutoff_sparing_active_runs(s.state, s.state.head_seq) == s.state.head_seq


# ----------------------------------------------------------------------------- cutoff_seq_before


def _count_reads(log: EventLog, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Record the after_seq of every log.read call."""
    calls: list[int] = []
    read = log.read

    def counting(after_seq: int, limit: int) -> list[StoredEvent]:
        calls.append(after_seq)
        return read(after_seq, limit)

    monkeypatch.setattr(log, "read", counting)
    return calls


def _batches(log: EventLog, sizes: list[int]) -> list[int]:
    """Append batches of clock ticks, each recorded at a later millisecond than the one before; their stamps."""
    stamps: list[int] = []
    for size in sizes:
        while stamps and int(time.time() * 1000) <= stamps[-1]:
            time.sleep(0.002)
        first = log.head() + 1
        log.append([envelope(pb.ClockTick()) for _ in range(size)])
        (row,) = log.read(after_seq=first - 1, limit=1)
        stamps.append(row.recorded_at_ms)
    return stamps


def test_cutoff_on_an_empty_log_drops_nothing(event_log: EventLog, monkeypatch: pytest.MonkeyPatch) -> None:
    reads = _count_reads(event_log, monkeypatch)
    assert cutoff_seq_before(event_log, int(time.time() * 1000)) == 1
    assert cutoff_seq_before(event_log, 0) == 1
    assert reads == []


def test_cutoff_is_the_first_seq_recorded_at_or_after_the_instant(
    event_log: EventLog, monkeypatch: pytest.MonkeyPatch
) -> None:
    sizes = [3, 1, 5, 2, 7, 1, 4]
    stamps = _batches(event_log, sizes)
    head = event_log.head()
    assert head == sum(sizes) and stamps == sorted(set(stamps))
    firsts = [1 + sum(sizes[:n]) for n in range(len(sizes))]  # first seq of each batch
    reads = _count_reads(event_log, monkeypatch)
    most_reads = math.ceil(math.log2(head + 1))  # one point read per halving of 1..head+1

    def cutoff(before_ms: int) -> int:
        reads.clear()
        found = cutoff_seq_before(event_log, before_ms)
        assert 0 < len(reads) <= most_reads
        return found

    assert cutoff(stamps[0] - 1) == 1  # every event is newer: nothing is older
    assert cutoff(stamps[0]) == 1
    assert cutoff(stamps[-1] + 1) == head + 1  # every event is older
    assert cutoff(2**62) == head + 1
    for first, size, stamp in zip(firsts, sizes, stamps, strict=True):
        assert cutoff(stamp) == first  # an event recorded at exactly the instant is not older
        assert cutoff(stamp + 1) == first + size


def test_cutoff_selects_the_instances_superseded_before_the_instant(event_log: EventLog) -> None:
    """End to end: instances superseded by events recorded before the instant are the retention candidates."""
    s, _, _ = _story()
    half = len(s.events) // 2
    event_log.append(s.events[:half])
    while int(time.time() * 1000) <= event_log.read(half - 1, 1)[0].recorded_at_ms:
        time.sleep(0.002)
    instant = int(time.time() * 1000)
    event_log.append(s.events[half:])
    cutoff = cutoff_seq_before(event_log, instant)
    assert cutoff == half + 1
    state = _replay(event_log)
    assert {i.uuid for i in retention_candidates(state, cutoff)} == {
        uuid for uuid in state.superseded if state.instances[uuid].superseded_seq <= half
    }
