"""Round-robin `partbuild run --until-idle` invocations as real processes on a real SQLite file.

Each invocation is one process run to its end; the log alone carries the rotation from one to
the next. Covered, in one W1 rotation (each invocation starts a JVM: one rotation, not two, keeps CI
short): the first invocation killed mid-run; the others, in the order 2,3,1,2,3,..., build W1
bucket by bucket, every bucket its share, and the killed one's runs are rebuilt when its bucket
comes round again; and `--bucket-ranges` narrowing the rotation. Events are attributed to an
invocation by the log positions it appended between.
"""

from __future__ import annotations

import re
import signal
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest

from examples.clicks.pipeline import daily_ref, days_in_range, raw_ref, weekly_ref
from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.fold.build_state import BuildState
from partbuild.state.fold.records import InstanceState, JobRunState, WantState
from partbuild.state.log.events import envelope, manual
from partbuild.state.log.store import EventLog
from partbuild.state.rules.bucketing import DEFAULT_NAMESPACE, bucket

from sparkkit import CLICKS_DAYS, CLICKS_START
from w1kit import WEEKS, finished, replay, start_orchestrator, wait_for_event, want_weeklies

pytestmark = pytest.mark.process

CHOSEN = re.compile(r"Using round robin bucket execution\. Bucket id: (\d+)")
MAX_CYCLES = 5  # W1 needs about three: each level's refs are spread over the buckets
DAYS = days_in_range(CLICKS_DAYS, CLICKS_START)
BUILT_REFS = [weekly_ref(week) for week in WEEKS] + [daily_ref(day) for day in DAYS]
W1_REFS = BUILT_REFS + [raw_ref(day) for day in DAYS]  # raw partitions are observed, not built
# A graph without Spark work or inputs: every ref is buildable by its bucket's invocation alone.
TINY_GRAPH = """
from partbuild.orchestrator.graph import Graph, Job

graph = Graph([Job("noop", ["noop/{n:int}"], lambda ctx: None, batch_size=4, max_concurrency=2)])
"""
TINY_REFS = [f"noop/{n}" for n in range(24)]


@dataclass(frozen=True)
class Invocation:
    """One finished (or killed) process: the bucket it announced and the events it appended."""

    name: str
    bucket: int
    after_seq: int  # its events have after_seq < seq <= head_seq
    head_seq: int

    def owns(self, seq: int) -> bool:
        return self.after_seq < seq <= self.head_seq


def _head(db: str) -> int:
    with EventLog.open(db) as log:
        return log.head()


def _chosen_bucket(log_file: Path) -> int:
    """The bucket the process's output announces; exactly one announcement."""
    text = log_file.read_text()
    found = CHOSEN.findall(text)
    assert len(found) == 1, f"{log_file.name}: expected one round-robin line, got {found}:\n{text[-3000:]}"
    return int(found[0])


def _invoke(db: str, root: Path, tmp_path: Path, name: str, *extra: str) -> Invocation:
    """Run one round-robin `partbuild run --until-idle` to its end; it must exit 0."""
    before = _head(db)
    flags = ("--round-robin", "--until-idle", "--timeout", "120", *extra)
    process = start_orchestrator(db, root, tmp_path, name, *flags)
    log_file = tmp_path / f"{name}.log"
    assert finished(process, 200, log_file) == 0, f"{name} failed:\n{log_file.read_text()[-3000:]}"
    return Invocation(name, _chosen_bucket(log_file), before, _head(db))


def _events(db: str) -> list[tuple[int, pb.Event]]:
    """Every event of the log with its seq."""
    found: list[tuple[int, pb.Event]] = []
    with EventLog.open(db) as log:
        while page := log.read(found[-1][0] if found else 0, 1000):
            found.extend((stored.seq, stored.to_event()) for stored in page)
    return found


def _of_type(events: list[tuple[int, pb.Event]], kind: str) -> list[tuple[int, pb.Event]]:
    return [(seq, event) for seq, event in events if event.WhichOneof("payload") == kind]


def _owner(invocations: list[Invocation], seq: int) -> Invocation:
    owners = [invocation for invocation in invocations if invocation.owns(seq)]
    assert len(owners) == 1, f"event {seq} belongs to {owners}"
    return owners[0]


def _assert_rotation(db: str, invocations: list[Invocation], expected: list[int]) -> dict[str, str]:
    """Announced buckets, `bucket_run_start` events and their positions all follow `expected`.

    Returns each invocation's worker id (from the source of its start), by invocation name.
    """
    assert [invocation.bucket for invocation in invocations] == expected
    starts = _of_type(_events(db), "bucket_run_start")
    assert [event.bucket_run_start.bucket.bucket_id for _, event in starts] == expected
    workers = {}
    for (seq, event), invocation in zip(starts, invocations, strict=True):
        assert invocation.owns(seq), f"bucket_run_start at {seq} is not {invocation.name}'s"
        start = event.bucket_run_start
        assert not start.static_bucket, f"{invocation.name} recorded a static start"
        assert (start.bucket.namespace, start.bucket.bucket_id) == (DEFAULT_NAMESPACE, invocation.bucket)
        workers[invocation.name] = event.source.system.worker
    assert len(set(workers.values())) == len(invocations), f"worker ids not distinct: {workers}"
    return workers


def _assert_scoped(
    db: str, state: BuildState, invocations: list[Invocation], workers: dict[str, str], total: int
) -> Counter[int]:
    """Every accepted JobRunBuffer was decided by its invocation's worker, in its bucket, for refs of it.

    Returns how many runs each bucket buffered.
    """
    rejected = {rejection.seq for rejection in state.rejections}
    runs: Counter[int] = Counter()
    for seq, event in _of_type(_events(db), "job_run_buffer"):
        if seq in rejected:
            continue
        buffer, owner = event.job_run_buffer, _owner(invocations, seq)
        assert event.source.system.worker == workers[owner.name], f"{buffer.job_run_id} is not {owner.name}'s"
        assert buffer.HasField("bucket"), f"{buffer.job_run_id} carries no bucket"
        scope = buffer.bucket
        assert (scope.namespace, scope.bucket_id, scope.bucket_total) == (DEFAULT_NAMESPACE, owner.bucket, total)
        for uuid in buffer.instance_uuids:
            ref = state.instances[uuid].ref
            assert bucket(scope.namespace, ref, total) == owner.bucket, f"{owner.name} built {ref}"
        runs[owner.bucket] += 1
    return runs


def _rotate_until_built(db: str, root: Path, tmp_path: Path, done: list[Invocation]) -> list[Invocation]:
    """Invoke round-robin processes (3 buckets) until every want is successful, at most MAX_CYCLES cycles."""
    invocations = list(done)
    while len(invocations) < MAX_CYCLES * 3:
        name = f"rr{len(invocations) + 1}"
        invocations.append(_invoke(db, root, tmp_path, name, "--bucket-total", "3"))
        state = replay(db)
        if all(want.state == WantState.SUCCESSFUL for want in state.wants.values()):
            return invocations
    tails = "\n".join(f"--- {i.name}:\n{(tmp_path / f'{i.name}.log').read_text()[-1500:]}" for i in invocations[-3:])
    raise AssertionError(f"wants not all successful after {MAX_CYCLES} cycles: {replay(db).counts()}\n{tails}")


def _assert_w1_built_once(state: BuildState) -> None:
    """All wants successful; one Live instance per W1 ref; each built ref built by exactly one successful run."""
    assert all(want.state == WantState.SUCCESSFUL for want in state.wants.values())
    assert not state.active_run_ids
    live = Counter(i.ref for i in state.instances.values() if i.state == InstanceState.LIVE)
    assert {ref: live[ref] for ref in W1_REFS} == dict.fromkeys(W1_REFS, 1)
    built = Counter(
        state.instances[uuid].ref
        for run in state.job_runs.values()
        if run.state == JobRunState.SUCCEEDED
        for uuid in run.instance_uuids
    )
    assert built == Counter(BUILT_REFS)


def _kill_first_invocation(db: str, root: Path, tmp_path: Path) -> Invocation:
    """Start the first round-robin invocation and SIGKILL it while a job run is executing."""
    flags = ("--round-robin", "--bucket-total", "3", "--until-idle", "--timeout", "120")
    process = start_orchestrator(db, root, tmp_path, "killed", *flags)
    try:
        wait_for_event(db, "job_run_heartbeat", 120, process)
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=30)
    return Invocation("killed", _chosen_bucket(tmp_path / "killed.log"), 0, _head(db))


def test_w1_is_built_bucket_by_bucket_and_a_killed_invocation_resumed_in_its_next_turn(
    clicks_root: Path, tmp_path: Path
) -> None:
    db = f"sqlite:///{tmp_path / 'kill.db'}"
    want_weeklies(db)
    # Bucket 1 (the first chosen) owns a daily whose raw partition it owns too: it runs a job.
    assert any(
        bucket(DEFAULT_NAMESPACE, daily_ref(d), 3) == bucket(DEFAULT_NAMESPACE, raw_ref(d), 3) == 1 for d in DAYS
    )
    killed = _kill_first_invocation(db, clicks_root, tmp_path)
    crashed = replay(db)
    orphans = list(crashed.active_run_ids)
    assert orphans, "the kill should leave a job run queued or running"
    assert crashed.bucket_runs == {DEFAULT_NAMESPACE: 1}  # its start is in the log

    invocations = _rotate_until_built(db, clicks_root, tmp_path, [killed])
    expected = [n % 3 + 1 for n in range(len(invocations))]  # the one after the killed one took bucket 2
    workers = _assert_rotation(db, invocations, expected)
    state = replay(db)
    assert not state.rejections
    _assert_w1_built_once(state)
    runs = _assert_scoped(db, state, invocations, workers, 3)
    assert set(runs) == {1, 2, 3}, f"runs per bucket: {runs}"  # every bucket did its share of W1
    assert len(invocations) > 3  # one level per bucket is not enough: W1's levels straddle buckets
    comeback = invocations[3]  # bucket 1's next turn
    for run_id in orphans:
        orphan = state.job_runs[run_id]
        assert orphan.state == JobRunState.FAILED and "no heartbeat" in (orphan.error_message or ""), run_id
        for uuid in orphan.instance_uuids:
            rebuilt = state.canonical_instance(state.instances[uuid].ref)
            assert rebuilt is not None and rebuilt.state == InstanceState.LIVE and rebuilt.built_by is not None
            rerun = state.job_runs[rebuilt.built_by]
            assert rerun.state == JobRunState.SUCCEEDED and comeback.owns(rerun.created_seq), rebuilt.ref


def test_bucket_ranges_narrow_the_rotation_and_the_scope(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'ranges.db'}"
    graph_file = tmp_path / "tiny_graph.py"
    graph_file.write_text(TINY_GRAPH)
    with EventLog.open(db, auto_upgrade=True) as log:
        log.append([envelope(pb.WantCreate(want_id="w", partition_refs=TINY_REFS), source=manual("t"))])
    eligible = {2, 3, 5}
    assert {bucket(DEFAULT_NAMESPACE, ref, 6) for ref in TINY_REFS} == set(range(1, 7))  # every bucket has refs
    assert replay(db).bucket_runs == {}
    # click keeps an option's last value: this --graph replaces the W1 graph start_orchestrator names.
    flags = ("--bucket-total", "6", "--bucket-ranges", "2-3,5", "--graph", str(graph_file))
    # One cycle and the wrap back to the smallest eligible bucket (each invocation starts a JVM: keep it short).
    invocations = [_invoke(db, tmp_path, tmp_path, f"ranges{n}", *flags) for n in range(1, 5)]
    workers = _assert_rotation(db, invocations, [2, 3, 5, 2])
    state = replay(db)
    assert not state.rejections
    runs = _assert_scoped(db, state, invocations, workers, 6)
    assert set(runs) == eligible
    for ref in TINY_REFS:
        instance = state.canonical_instance(ref)
        assert instance is not None
        if bucket(DEFAULT_NAMESPACE, ref, 6) in eligible:
            assert instance.state == InstanceState.LIVE, ref
        else:  # never decided about: no run, no wait
            assert instance.state == InstanceState.MISSING and not instance.attempts, ref
