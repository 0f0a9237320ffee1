"""Code versions in the fold and staleness (state/fold/job_runs.py, state/queries/staleness.py).

A JobRunBuffer's `code_version` is kept on its JobRun (an instance reaches it through `built_by`); an
instance is stale when it is Live, its run recorded a version and its job's current one differs. Old logs
(no version) are never stale. `StaleIndex` lists a job's stale instances, newest partitions first, as of
any seq, reading only the runs of that job under other versions.
"""

from __future__ import annotations

from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.fold.past import PastState
from partbuild.state.fold.records import JobRun
from partbuild.state.log.digest import state_digest
from partbuild.state.log.snapshot import decode_state, encode_state
from partbuild.state.queries.staleness import StaleIndex, built_version, is_stale

from foldkit import Story


def _build(s: Story, run_id: str, ref: str, version: str, label: str = "wk") -> str:
    uuid = s.uuid(ref)
    s.ok(pb.JobRunBuffer(job_run_id=run_id, job_label=label, instance_uuids=[uuid], code_version=version))
    s.succeed(run_id)
    return uuid


def test_the_run_keeps_the_version_it_was_buffered_with_and_its_instances_reach_it() -> None:
    s = Story()
    s.want("w", "wk/1", "wk/2")
    built = _build(s, "r1", "wk/1", "v1")
    unknown = _build(s, "r2", "wk/2", "")
    assert s.state.job_runs["r1"].code_version == "v1"
    assert s.state.job_runs["r2"].code_version is None  # empty: unknown, as in logs written before versions
    assert built_version(s.state, s.state.instances[built]) == "v1"
    assert built_version(s.state, s.state.instances[unknown]) is None
    # The snapshot carries it; a state decoded from one answers the same.
    assert decode_state(encode_state(s.state)).job_runs["r1"].code_version == "v1"


def test_a_version_too_long_is_rejected_and_nothing_changes() -> None:
    s = Story()
    s.want("w", "wk/1")
    uuid = s.uuid("wk/1")
    s.rejected(
        pb.JobRunBuffer(job_run_id="r1", job_label="wk", instance_uuids=[uuid], code_version="v" * 257),
        "code_version is longer than 256 characters",
    )
    assert "r1" not in s.state.job_runs


def test_the_digest_leaves_an_unknown_version_out_so_old_logs_keep_theirs() -> None:
    with_field, without = Story(), Story()
    for s in (with_field, without):
        s.want("w", "wk/1")
        _build(s, "r1", "wk/1", "")
    assert state_digest(with_field.state) == state_digest(without.state)
    versioned = Story()
    versioned.want("w", "wk/1")
    _build(versioned, "r1", "wk/1", "v1")
    assert state_digest(versioned.state) != state_digest(with_field.state)
    assert "code_version" in JobRun.added_later


def test_stale_means_live_built_by_a_known_version_other_than_the_current() -> None:
    s = Story()
    s.want("w", "wk/1", "wk/2", "wk/3", "wk/4")
    old, same, unknown = _build(s, "r1", "wk/1", "v1"), _build(s, "r2", "wk/2", "v2"), _build(s, "r3", "wk/3", "")
    other_job = _build(s, "r4", "wk/4", "v1", label="other")
    current = {"wk": "v2"}
    instances = s.state.instances
    assert is_stale(s.state, instances[old], current)
    assert not is_stale(s.state, instances[same], current)
    assert not is_stale(s.state, instances[unknown], current)  # unknown is never stale: upgrades rebuild nothing
    assert not is_stale(s.state, instances[other_job], current)  # a job the graph no longer has
    s.ok(pb.PartitionTaint(partition_ref="wk/1", reason="bad"))
    assert not is_stale(s.state, instances[old], current)  # tainted: not Live


def test_the_index_lists_a_jobs_stale_instances_newest_partitions_first_and_bounded() -> None:
    s = Story()
    refs = [f"wk/2026-W{week:02d}" for week in range(1, 8)]
    s.want("w", *refs)
    for number, ref in enumerate(refs):
        _build(s, f"r{number}", ref, "v1" if number % 2 == 0 else "v0")
    s.want("x", "other/1")
    _build(s, "x1", "other/1", "v1", label="other")
    index = StaleIndex()
    index.update(s.state)
    stale = index.stale(s.state, "wk", "v2", 3)
    assert [instance.ref for instance in stale] == ["wk/2026-W07", "wk/2026-W06", "wk/2026-W05"]
    assert index.count(s.state, "wk", "v2") == 7
    assert [i.ref for i in index.stale(s.state, "wk", "v1", 10)] == ["wk/2026-W06", "wk/2026-W04", "wk/2026-W02"]
    assert index.versions("wk") == ["v1", "v0"]
    assert index.stale(s.state, "other", "v1", 10) == []


def test_rebuilt_instances_leave_the_list_now_and_stay_in_it_as_of_before() -> None:
    s = Story()
    s.want("w", "wk/1", "wk/2")
    _build(s, "r1", "wk/1", "v1")
    _build(s, "r2", "wk/2", "v1")
    index = StaleIndex()
    index.update(s.state)
    before = s.state.head_seq
    s.ok(pb.PartitionTaint(partition_ref="wk/1", reason="code changed"))
    s.want("w2", "wk/1")
    _build(s, "r3", "wk/1", "v2")
    index.update(s.state)
    assert [i.ref for i in index.stale(s.state, "wk", "v2", 10)] == ["wk/2"]
    # The run whose instance is no longer Live is dropped from reads of now, and kept for the past.
    past = PastState(s.state, before, lambda: 0)
    assert [i.ref for i in index.stale(past, "wk", "v2", 10, now=False)] == ["wk/2", "wk/1"]  # type: ignore[arg-type]
    assert index.count(s.state, "wk", "v2") == 1


def test_an_index_as_of_a_seq_ignores_runs_that_came_later() -> None:
    s = Story()
    s.want("w", "wk/1", "wk/2")
    _build(s, "r1", "wk/1", "v1")
    first = s.state.head_seq
    _build(s, "r2", "wk/2", "v1")
    index = StaleIndex()
    index.update(s.state)
    past = PastState(s.state, first, lambda: 0)
    assert [i.ref for i in index.stale(past, "wk", "v2", 10, now=False)] == ["wk/1"]  # type: ignore[arg-type]
