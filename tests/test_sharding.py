"""Sharded orchestrators: decisions per bucket, job runs carrying their bucket, the fold as judge."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from partbuild.orchestrator.decide import decide
from partbuild.orchestrator.graph import Graph, Job
from partbuild.orchestrator.loop import Orchestrator
from partbuild.orchestrator.sharding import Shard
from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.bucketing import bucket
from partbuild.state.events import envelope, manual
from partbuild.state.model import JobRunState, WantState
from partbuild.state.replay import load_state
from partbuild.state.store import EventLog

from foldkit import Story

GRAPH = Graph([Job("noop", ["noop/{n:int}"], lambda ctx: None, batch_size=5, max_concurrency=1_000)])
REFS = [f"noop/{n}" for n in range(60)]


def _scope(bucket_id: int, total: int = 3, namespace: str = "partbuild") -> pb.BucketScope:
    return pb.BucketScope(namespace=namespace, bucket_id=bucket_id, bucket_total=total)


def _story_with_wants() -> Story:
    story = Story()
    story.want("w", *REFS)
    return story


def test_decisions_of_three_shards_split_the_wanted_refs_exactly() -> None:
    state = _story_with_wants().state
    built: Counter[str] = Counter()
    for bucket_id in (1, 2, 3):
        shard = Shard(bucket_id, 3)
        decision = decide(state, GRAPH, now_ms=0, shard=shard)
        for event in decision.events:
            buffer = event.job_run_buffer
            assert buffer.bucket == shard.scope and f"-b{bucket_id}-" in buffer.job_run_id
            refs = [state.instances[uuid].ref for uuid in buffer.instance_uuids]
            assert all(bucket("partbuild", ref, 3) == bucket_id for ref in refs)
            built.update(refs)
    assert sorted(built) == sorted(REFS) and set(built.values()) == {1}
    unsharded = decide(state, GRAPH, now_ms=0)
    assert all(not event.job_run_buffer.HasField("bucket") for event in unsharded.events)


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


@pytest.fixture
def workers(db_url: str, tmp_path: Path) -> Iterator[list[Orchestrator]]:
    """Three orchestrators owning buckets 1/3, 2/3 and 3/3, each with its own connection, as processes would."""
    logs = [EventLog.open(db_url, auto_upgrade=True) for _ in range(3)]
    made = [
        Orchestrator(log, GRAPH, warehouse=str(tmp_path), spark=None, shard=Shard(n, 3), heartbeat_interval_s=0.2)
        for n, log in zip((1, 2, 3), logs, strict=True)
    ]
    yield made
    for orchestrator, log in zip(made, logs, strict=True):
        orchestrator.close()
        log.close()


def test_three_sharded_workers_build_every_wanted_partition_exactly_once(
    workers: list[Orchestrator], db_url: str
) -> None:
    with EventLog.open(db_url) as log:
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
