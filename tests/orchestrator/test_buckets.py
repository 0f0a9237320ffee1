"""Workers split by bucket (orchestrator/buckets.py): decisions per bucket, runs carry it, the fold judges."""

from __future__ import annotations

import json
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from partbuild.orchestrator.buckets import BucketRejected, StaticBucket
from partbuild.orchestrator.decide import decide
from partbuild.orchestrator.graph import Graph, Job
from partbuild.orchestrator.loop import Orchestrator
from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.database import Database
from partbuild.state.fold.records import JobRunState, WantState
from partbuild.state.log.events import envelope, manual
from partbuild.state.log.replay import load_state
from partbuild.state.rules.bucketing import BucketingConfig, bucket

from foldkit import Story

GRAPH = Graph([Job("noop", ["noop/{n:int}"], lambda ctx: None, batch_size=5, max_concurrency=1_000)])
REFS = [f"noop/{n}" for n in range(60)]


def _scope(bucket_id: int, total: int = 3, namespace: str = "partbuild") -> pb.BucketScope:
    return pb.BucketScope(namespace=namespace, bucket_id=bucket_id, bucket_total=total)


def _story_with_wants() -> Story:
    story = Story()
    story.want("w", *REFS)
    return story


def test_decisions_of_three_buckets_split_the_wanted_refs_exactly() -> None:
    state = _story_with_wants().state
    built: Counter[str] = Counter()
    for bucket_id in (1, 2, 3):
        owned = StaticBucket(bucket_id, 3)
        decision = decide(state, GRAPH, now_ms=0, ownership=owned)
        for event in decision.events:
            buffer = event.job_run_buffer
            assert buffer.bucket == owned.scope and f"-b{bucket_id}-" in buffer.job_run_id
            refs = [state.instances[uuid].ref for uuid in buffer.instance_uuids]
            assert all(bucket("partbuild", ref, 3) == bucket_id for ref in refs)
            built.update(refs)
    assert sorted(built) == sorted(REFS) and set(built.values()) == {1}
    unscoped = decide(state, GRAPH, now_ms=0)
    assert all(not event.job_run_buffer.HasField("bucket") for event in unscoped.events)


def test_the_fold_rejects_a_run_naming_a_partition_of_another_bucket() -> None:
    story = _story_with_wants()
    mine = [ref for ref in REFS if bucket("partbuild", ref, 3) == 1]
    theirs = next(ref for ref in REFS if bucket("partbuild", ref, 3) == 2)
    uuids = [story.uuid(ref) for ref in (mine[0], theirs)]
    reason = story.apply(pb.JobRunBuffer(job_run_id="r1", job_label="noop", instance_uuids=uuids, bucket=_scope(1)))
    assert reason is not None and f"{theirs!r} is in bucket 2 of 3, not in bucket 1" in reason
    assert "r1" not in story.state.job_runs
    bad_scope = _scope(4)
    reason = story.apply(pb.JobRunBuffer(job_run_id="r2", job_label="noop", instance_uuids=uuids[:1], bucket=bad_scope))
    assert reason == "bucket_id 4 is not between 1 and bucket_total 3"
    own = pb.JobRunBuffer(job_run_id="r3", job_label="noop", instance_uuids=uuids[:1], bucket=_scope(1))
    assert story.apply(own) is None


def test_bucket_run_start_keeps_the_last_bucket_per_namespace() -> None:
    story = Story()
    assert story.apply(pb.BucketRunStart(bucket=_scope(2, namespace="a"))) is None
    assert story.apply(pb.BucketRunStart(bucket=_scope(3, namespace="b"))) is None
    assert story.apply(pb.BucketRunStart(bucket=_scope(1, namespace="a"))) is None
    assert story.state.bucket_runs == {"a": 1, "b": 3}
    assert story.apply(pb.BucketRunStart()) == "bucket run start names no bucket"
    assert story.apply(pb.BucketRunStart(bucket=_scope(1, namespace=""))) == "bucket namespace is empty"


def test_the_first_scoped_event_fixes_the_layout_and_other_totals_are_rejected() -> None:
    story = _story_with_wants()
    assert story.apply(pb.BucketRunStart(bucket=_scope(2), static_bucket=True)) is None
    assert story.state.bucket_layouts == {"partbuild": (3, story.state.head_seq)}
    assert story.state.bucket_runs == {}  # a static start leaves the round-robin rotation alone
    fixed_at = story.state.head_seq
    reason = story.apply(pb.BucketRunStart(bucket=_scope(1, total=2), static_bucket=True))
    assert reason == (
        f"bucket 1/2 overlaps other buckets: namespace 'partbuild' is split into 3 buckets (since seq {fixed_at}); "
        "re-shard with `partbuild reshard --total 2`"
    )
    ref = next(ref for ref in REFS if bucket("partbuild", ref, 2) == 1)
    run = pb.JobRunBuffer(job_run_id="r1", job_label="noop", instance_uuids=[story.uuid(ref)], bucket=_scope(1, 2))
    assert "is split into 3 buckets" in (story.apply(run) or "")
    assert story.apply(pb.BucketRunStart(bucket=_scope(1, namespace="other", total=2))) is None  # namespaces apart
    assert story.state.bucket_layouts["other"][0] == 2 and story.state.bucket_runs == {"other": 1}


def test_a_reshard_admits_the_new_total_and_rejects_the_old() -> None:
    story = _story_with_wants()
    old = next(ref for ref in REFS if bucket("partbuild", ref, 3) == 1)
    first = pb.JobRunBuffer(job_run_id="r1", job_label="noop", instance_uuids=[story.uuid(old)], bucket=_scope(1))
    assert story.apply(first) is None  # a job run fixes the layout too
    assert story.apply(pb.BucketLayout(namespace="partbuild", bucket_total=2)) is None
    assert story.state.bucket_layouts["partbuild"] == (2, story.state.head_seq)
    rest = [ref for ref in REFS if ref != old]
    stale = next(ref for ref in rest if bucket("partbuild", ref, 3) == 2)
    late = pb.JobRunBuffer(job_run_id="r2", job_label="noop", instance_uuids=[story.uuid(stale)], bucket=_scope(2))
    assert "is split into 2 buckets" in (story.apply(late) or "")
    fresh = next(ref for ref in rest if bucket("partbuild", ref, 2) == 2)
    new = pb.JobRunBuffer(job_run_id="r3", job_label="noop", instance_uuids=[story.uuid(fresh)], bucket=_scope(2, 2))
    assert story.apply(new) is None
    assert story.apply(pb.BucketLayout(namespace="partbuild", bucket_total=0)) == (
        "bucket_total 0 is not between 1 and 2147483648"
    )
    assert story.apply(pb.BucketLayout(bucket_total=2)) == "bucket namespace is empty"


def test_a_worker_with_an_overlapping_bucket_is_refused_at_start(sqlite_url: str) -> None:
    with Database.open(sqlite_url) as db:
        log = db.log
        Orchestrator(db, GRAPH, warehouse="w", bucketing=BucketingConfig(3, 1)).close()
        with pytest.raises(BucketRejected, match="namespace 'partbuild' is split into 3 buckets"):
            Orchestrator(db, GRAPH, warehouse="w", bucketing=BucketingConfig(2, 1))
        state, _ = load_state(log)
    (rejected,) = state.rejections
    assert rejected.event_type == "bucket_run_start" and rejected.seq == 2
    assert state.bucket_layouts == {"partbuild": (3, 1)}


def test_a_worker_left_on_the_old_total_after_a_reshard_stops_with_its_runs_rejected(sqlite_url: str) -> None:
    with Database.open(sqlite_url) as db:
        log = db.log
        worker = Orchestrator(db, GRAPH, warehouse="w", bucketing=BucketingConfig(3, 1))
        log.append([envelope(pb.BucketLayout(namespace="partbuild", bucket_total=2), source=manual("ops"))])
        log.append([envelope(pb.WantCreate(want_id="w", partition_refs=REFS), source=manual("t"))])
        try:
            with pytest.raises(BucketRejected, match="bucket 1/3 overlaps other buckets"):
                worker.step()
        finally:
            worker.close()
        state, _ = load_state(log)
    assert not state.job_runs  # it built nothing
    assert {r.event_type for r in state.rejections} == {"job_run_buffer"}


TWO_LEVELS = Graph(
    [
        Job("leaf", ["leaf/{n:int}"], lambda ctx: None, max_concurrency=100),
        Job("top", ["top/{n:int}"], lambda ctx: None, inputs=lambda p: [f"leaf/{p['n']}"], max_concurrency=100),
    ]
)


def test_a_bucket_worker_is_idle_once_its_bucket_waits_only_for_other_buckets(sqlite_url: str, tmp_path: Path) -> None:
    """--until-idle with a bucket: exit once nothing of ours can progress without the other workers."""
    top = next(
        f"top/{n}" for n in range(100) if bucket("partbuild", f"top/{n}", 2) != bucket("partbuild", f"leaf/{n}", 2)
    )
    leaf = top.replace("top", "leaf")
    with Database.open(sqlite_url) as db:
        log = db.log
        log.append([envelope(pb.WantCreate(want_id="w", partition_refs=[top]), source=manual("t"))])
        mine, theirs = bucket("partbuild", top, 2), bucket("partbuild", leaf, 2)
        order = []
        for bucket_id in (mine, theirs, mine):  # the top's owner waits, the leaf's owner builds, then the top
            worker = Orchestrator(db, TWO_LEVELS, warehouse=str(tmp_path), bucketing=BucketingConfig(2, bucket_id))
            assert worker.run_until_idle(timeout_s=30)
            worker.close()
            order.append(load_state(log)[0].wants["w"].state)
        state, _ = load_state(log)
    assert order == [WantState.UPSTREAM_BUILDING, WantState.IDLE, WantState.SUCCESSFUL]  # the top waited for its leaf
    assert state.canonical_instance(leaf).state.name == "LIVE" and not state.rejections


@pytest.fixture
def workers(db_url: str, tmp_path: Path) -> Iterator[list[Orchestrator]]:
    """Three orchestrators owning buckets 1/3, 2/3 and 3/3, each with its own connection, as processes would."""
    dbs = [Database.open(db_url, auto_upgrade=True) for _ in range(3)]
    made = [
        Orchestrator(
            db, GRAPH, warehouse=str(tmp_path), spark=None, ownership=StaticBucket(n, 3), heartbeat_interval_s=0.2
        )
        for n, db in zip((1, 2, 3), dbs, strict=True)
    ]
    yield made
    for orchestrator, db in zip(made, dbs, strict=True):
        orchestrator.close()
        db.close()


def test_three_workers_with_a_bucket_each_build_every_wanted_partition_exactly_once(
    workers: list[Orchestrator], db_url: str
) -> None:
    with Database.open(db_url) as db:
        log = db.log
        log.append([envelope(pb.WantCreate(want_id="w", partition_refs=REFS), source=manual("t"))])
        stop = threading.Event()
        threads = [threading.Thread(target=w.run_until_idle, args=(60, stop)) for w in workers]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=90)
        state, _ = load_state(log)
    assert state.wants["w"].state == WantState.SUCCESSFUL and not state.rejections
    built_by = Counter(state.instances[state.canonical[ref]].built_by for ref in REFS)
    assert sum(built_by.values()) == len(REFS)
    for ref in REFS:
        run = state.job_runs[state.instances[state.canonical[ref]].built_by]  # type: ignore[index]
        assert run.state == JobRunState.SUCCEEDED
        assert f"-b{bucket('partbuild', ref, 3)}-" in run.job_run_id  # decided by the owner of its bucket
        assert len(state.instances[state.canonical[ref]].attempts) == 1  # built once


def test_cli_reshard_and_buckets(capsys: pytest.CaptureFixture[str], sqlite_url: str) -> None:
    """`partbuild reshard` records a layout, `partbuild buckets` shows it; bad input is exit 2 with one line."""
    from clikit import run_cli

    with Database.open(sqlite_url) as db:
        log = db.log
        Orchestrator(db, GRAPH, warehouse="w", bucketing=BucketingConfig(3, 2)).close()
    code, out, _ = run_cli(capsys, "buckets", "--db", sqlite_url, "--json")
    assert code == 0 and json.loads(out) == [
        {"namespace": "partbuild", "bucket_total": 3, "since_seq": 1, "last_round_robin_bucket": None}
    ]
    code, out, _ = run_cli(capsys, "reshard", "--db", sqlite_url, "--total", "4")
    assert code == 0 and out == "namespace 'partbuild' is split into 4 buckets from seq 2\n"
    code, out, _ = run_cli(capsys, "buckets", "--db", sqlite_url)
    assert code == 0 and "partbuild" in out and "4" in out
    for bad, message in (
        (["--total", "4"], "already split into 4 buckets"),
        (["--total", "0"], "'0' is not a positive integer"),
        (["--total", "2", "--namespace", "a/b"], "namespace"),
    ):
        code, _, err = run_cli(capsys, "reshard", "--db", sqlite_url, *bad)
        assert code == 2 and message in err and err.count("\n") == 1, err
    with Database.open(sqlite_url) as db:
        log = db.log
        assert log.head() == 2  # bad input recorded nothing
        with pytest.raises(BucketRejected, match="split into 4 buckets"):
            Orchestrator(db, GRAPH, warehouse="w", bucketing=BucketingConfig(3, 2))
