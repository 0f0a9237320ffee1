"""Job runs in the fold (state/fold/job_runs.py): a canceled run's instances end Canceled, fresh ones replace them.

A JobRunCancel with `replace_instances` (every writer since issue 23) gives each ref of the run a fresh
Missing instance, with a UUID derived from the cancel's seq (so a new location), and keeps the canceled
one in history as Canceled. One without it (older logs) puts the same instances back to Missing.
"""

from __future__ import annotations

from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.fold.build_state import BuildState
from partbuild.state.fold.past import PastState, instance_at
from partbuild.state.fold.records import Instance, InstanceState, JobRunState, WantState
from partbuild.state.log.digest import state_digest
from partbuild.state.log.snapshot import decode_state, encode_state
from partbuild.state.queries.lineage import ref_history
from partbuild.state.rules.ids import instance_uuid

from foldkit import Story

I = InstanceState


def _cancel(s: Story, run_id: str, *, replace: bool = True) -> int:
    s.ok(pb.JobRunCancel(job_run_id=run_id, reason="operator", replace_instances=replace))
    return s.state.head_seq


def test_a_cancel_replaces_the_runs_instances_with_fresh_ones_and_keeps_them_canceled() -> None:
    s = Story()
    s.want("w", "daily/1", "daily/2")
    old = s.buffer("run-1", "daily/1", "daily/2")
    s.ok(pb.JobRunHeartbeat(job_run_id="run-1"))
    seq = _cancel(s, "run-1")
    fresh = [s.uuid("daily/1"), s.uuid("daily/2")]
    # New UUIDs, derived from the cancel's seq as every instance's is from its creating event.
    assert fresh == [instance_uuid(seq, "daily/1"), instance_uuid(seq, "daily/2")]
    for ref, before, after in zip(("daily/1", "daily/2"), old, fresh, strict=True):
        canceled, new = s.state.instances[before], s.state.instances[after]
        assert (canceled.state, canceled.updated_seq, canceled.superseded_seq) == (I.CANCELED, seq, seq)
        assert canceled.attempts == ("run-1",) and canceled.location is None
        assert (new.state, new.created_seq, new.previous_uuid, new.attempts) == (I.MISSING, seq, before, ())
        assert [i.uuid for i in ref_history(s.state, ref)] == [after, before]
    assert s.state.job_runs["run-1"].state == JobRunState.CANCELED
    assert s.state.job_runs["run-1"].instance_uuids == tuple(old)  # the run still names what it built
    assert s.wstate("w") == WantState.IDLE  # schedulable again, as before
    assert s.state.counts()["instances"]["canceled"] == 2 and s.state.counts()["instances"]["missing"] == 2
    assert s.state.superseded == old  # retention candidates, in the order they stopped being canonical
    # The canceled instances are never built again; the fresh ones are.
    s.rejected(pb.JobRunBuffer(job_run_id="run-2", job_label="job", instance_uuids=old[:1]), "no longer canonical")
    s.rejected(pb.JobRunSuccess(job_run_id="run-1"), "already canceled")
    assert s.buffer("run-2", "daily/1", "daily/2") == fresh
    s.succeed("run-2")
    assert s.wstate("w") == WantState.SUCCESSFUL and s.state.wants["w"].satisfied_by == tuple(fresh)
    assert [s.state.instances[u].state for u in old] == [I.CANCELED, I.CANCELED]


def test_a_cancel_written_before_replace_instances_puts_the_same_instances_back_to_missing() -> None:
    s = Story()
    s.want("w", "daily/1")
    (uuid,) = s.buffer("run-1", "daily/1")
    _cancel(s, "run-1", replace=False)
    assert s.uuid("daily/1") == uuid and s.istate("daily/1") == I.MISSING and s.state.superseded == []
    assert s.state.counts()["instances"]["canceled"] == 0
    assert s.buffer("run-2", "daily/1") == [uuid]  # the rebuild writes to the same instance's location


def test_what_waits_for_a_canceled_ref_waits_for_its_rebuild() -> None:
    s = Story()
    s.want("w", "weekly")
    s.buffer("run-w", "weekly")
    s.missing("run-w", "daily/1")
    s.derivative("w-daily", "w", "run-w", "daily/1")
    s.buffer("run-d", "daily/1")
    _cancel(s, "run-d")
    assert s.istate("weekly") == I.UPSTREAM_BUILDING and s.state.waiting_for("daily/1") == [s.uuid("weekly")]
    s.build("run-d2", "daily/1")
    assert s.istate("weekly") == I.MISSING and s.wstate("w-daily") == WantState.SUCCESSFUL


def test_a_canceled_instance_replays_snapshots_and_digests_the_same() -> None:
    s = Story()
    s.want("w", "daily/1")
    s.buffer("run-1", "daily/1")
    _cancel(s, "run-1")
    replayed = BuildState(strict=True)
    for seq, event in enumerate(s.events, 1):
        assert replayed.apply(seq, event) is None
    assert replayed.canonical == s.state.canonical  # the same fresh UUID on every replay
    assert state_digest(replayed) == state_digest(s.state) == state_digest(decode_state(encode_state(s.state)))
    # The digest covers the new state: the same log with the old cancel ends elsewhere.
    old = Story()
    old.want("w", "daily/1")
    old.buffer("run-1", "daily/1")
    _cancel(old, "run-1", replace=False)
    assert state_digest(old.state) != state_digest(s.state)


def _fields(instance: Instance) -> dict[str, object]:
    return {name: getattr(instance, name) for name in instance.__slots__ if name != "history"}


def test_reads_of_the_past_around_a_cancel_and_rebuild_equal_replays() -> None:
    """As of every seq, each instance (the canceled and the fresh one), each ref's canonical instance and the
    counts read from the live state's histories equal those of a state replayed to that seq."""
    s = Story()
    s.observe("raw/1")
    s.want("w", "daily/1")
    s.buffer("run-1", "daily/1")
    s.ok(pb.JobRunHeartbeat(job_run_id="run-1"))
    _cancel(s, "run-1")
    s.buffer("run-2", "daily/1")
    s.ok(pb.JobRunHeartbeat(job_run_id="run-2"))
    _cancel(s, "run-2")  # canceled twice: two canceled instances in the ref's history
    s.build("run-3", "daily/1", [s.uuid("raw/1")])
    live = s.state
    replayed = BuildState(strict=True)
    for seq, event in enumerate(s.events, 1):
        replayed.apply(seq, event)
        past = PastState(live, seq, lambda: 0)
        assert dict(past.canonical) == replayed.canonical
        assert past.counts() == replayed.counts()
        for uuid, instance in replayed.instances.items():
            assert _fields(instance_at(live, live.instances[uuid], seq)) == _fields(instance), (seq, uuid)
        assert set(past.instances) == set(replayed.instances)
        for run_id, run in replayed.job_runs.items():
            assert past.job_runs[run_id].state == run.state
    assert [live.instances[u].state for u in live.superseded] == [I.CANCELED, I.CANCELED]
