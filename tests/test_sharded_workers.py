"""Sharded `partbuild run` workers on W1, end to end on real PostgreSQL, over a real HTTP API.

Three static workers (`--bucket-total 3 --bucket-id 1|2|3`) run at once over one
fresh database; the W1 weekly wants arrive over HTTP. The three build
everything, each only its own bucket's partitions, and wait for each other's
upstream (no `--until-idle`). The log is then replayed strictly and checked.
"""

from __future__ import annotations

import signal
import subprocess
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from conftest import CLICKS_DAYS, CLICKS_ROWS, CLICKS_START, serve_service
from w1kit import WEEKS, finished, read_counts, replay, start_orchestrator

from examples.clicks.pipeline import build_graph, daily_ref, days_in_range, raw_ref, week_days_in_range, weekly_ref
from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.bucketing import bucket
from partbuild.state.build_state import BuildState
from partbuild.state.model import InstanceState, JobRunState, WantState
from partbuild.state.store import EventLog

NAMESPACE = "partbuild"
TOTAL = 3
WANT_IDS = [f"w-{week}" for week in WEEKS]
BUILD_TIMEOUT_S = 420.0  # generous: four JVMs share two cores, often with other test runs


def wanted_refs() -> list[str]:
    """The weeklies, their dailies and the raw sources: every ref the wants need Live."""
    days = days_in_range(CLICKS_DAYS, CLICKS_START)
    return [weekly_ref(w) for w in WEEKS] + [daily_ref(d) for d in days] + [raw_ref(d) for d in days]


@contextmanager
def static_workers(db: str, clicks_root: Path, tmp_path: Path) -> Iterator[dict[int, subprocess.Popen[bytes]]]:
    """One `partbuild run` per bucket of TOTAL, all at once, none with --until-idle; killed if left running."""
    workers: dict[int, subprocess.Popen[bytes]] = {}
    try:
        for bucket_id in range(1, TOTAL + 1):
            options = ("--bucket-total", str(TOTAL), "--bucket-id", str(bucket_id))
            workers[bucket_id] = start_orchestrator(db, clicks_root, tmp_path, f"worker-{bucket_id}", *options)
        yield workers
    finally:
        for process in workers.values():
            if process.poll() is None:
                process.kill()
                process.wait(timeout=30)


def worker_log(tmp_path: Path, name: str) -> str:
    return (tmp_path / f"{name}.log").read_text(errors="replace")


@pytest.fixture
def api(db_url: str, clicks_root: Path) -> Iterator[httpx.Client]:
    """The W1 graph's HTTP API on a real uvicorn server over `db_url` (schema migrated); an httpx client."""
    from partbuild.api.service import Service

    graph = build_graph(clicks_root, days=CLICKS_DAYS, start=CLICKS_START)
    with EventLog.open(db_url, auto_upgrade=True) as log, serve_service(Service(log, graph=graph)) as server:
        yield server.client


def post_wants(client: httpx.Client) -> None:
    """One want per weekly ref, over HTTP."""
    for week, want_id in zip(WEEKS, WANT_IDS, strict=True):
        response = client.post("/api/v1/wants", json={"refs": [weekly_ref(week)], "want_id": want_id})
        assert response.status_code == 201, response.text
        assert response.json()["want_id"] == want_id


def wait_successful(client: httpx.Client, workers: dict[int, subprocess.Popen[bytes]], tmp_path: Path) -> float:
    """Poll the API until every want is successful; fail at once if a worker exits. Returns the seconds waited."""
    start = time.monotonic()
    states: dict[str, str] = {}
    while time.monotonic() - start < BUILD_TIMEOUT_S:
        for bucket_id, process in workers.items():
            name = f"worker-{bucket_id}"
            assert process.poll() is None, (
                f"{name} exited ({process.returncode}):\n{worker_log(tmp_path, name)[-3000:]}"
            )
        for want_id in WANT_IDS:
            response = client.get(f"/api/v1/wants/{want_id}")
            assert response.status_code == 200, response.text
            states[want_id] = response.json()["state"]
        if all(state == "successful" for state in states.values()):
            return time.monotonic() - start
        time.sleep(0.5)
    raise AssertionError(f"wants not successful within {BUILD_TIMEOUT_S:g} s: {states}")


def stop_workers(workers: dict[int, subprocess.Popen[bytes]], tmp_path: Path) -> None:
    """SIGTERM every worker; each must finish its runs in flight and exit 0."""
    for process in workers.values():
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
    for bucket_id, process in workers.items():
        name = f"worker-{bucket_id}"
        code = finished(process, 120, tmp_path / f"{name}.log")
        assert code == 0, f"{name} exited {code}:\n{worker_log(tmp_path, name)[-3000:]}"


def logged_events(db: str, upto_seq: int) -> dict[int, pb.Event]:
    """Every event of the log up to `upto_seq`, by seq."""
    with EventLog.open(db) as log:
        return {seq: pb.Event.FromString(payload) for seq, payload in log.iter_payloads(upto_seq=upto_seq)}


def assert_built_once_each(state: BuildState) -> None:
    """Every want successful; one Live instance per wanted ref; nothing built by two succeeded runs."""
    assert all(want.state == WantState.SUCCESSFUL for want in state.wants.values())
    assert not state.active_run_ids
    live = Counter(i.ref for i in state.instances.values() if i.state == InstanceState.LIVE)
    for ref in wanted_refs():
        canonical = state.canonical_instance(ref)
        assert canonical is not None and canonical.state == InstanceState.LIVE, ref
        assert live[ref] == 1, f"{ref} has {live[ref]} Live instances"
    succeeded = [run for run in state.job_runs.values() if run.state == JobRunState.SUCCEEDED]
    built = Counter(uuid for run in succeeded for uuid in run.instance_uuids)
    assert [uuid for uuid, runs in built.items() if runs > 1] == []
    built_refs = Counter(state.instances[uuid].ref for uuid in built)
    assert [ref for ref, times in built_refs.items() if times > 1] == []
    assert set(built_refs) == {ref for ref in wanted_refs() if not ref.startswith("raw/")}


def accepted_buffers(state: BuildState, events: dict[int, pb.Event]) -> dict[int, pb.Event]:
    """The job_run_buffer events the fold accepted, by seq."""
    rejected = {rejection.seq for rejection in state.rejections}
    return {
        seq: event
        for seq, event in events.items()
        if event.WhichOneof("payload") == "job_run_buffer" and seq not in rejected
    }


def assert_buffers_scoped(state: BuildState, buffers: dict[int, pb.Event]) -> Counter[int]:
    """Each accepted buffer names a bucket of NAMESPACE/TOTAL holding all its instances; runs per bucket."""
    per_bucket: Counter[int] = Counter()
    for seq, event in buffers.items():
        buffer = event.job_run_buffer
        assert buffer.HasField("bucket"), f"job run buffer at seq {seq} carries no bucket"
        scope = buffer.bucket
        assert (scope.namespace, scope.bucket_total) == (NAMESPACE, TOTAL), f"seq {seq}: {scope}"
        for uuid in buffer.instance_uuids:
            ref = state.instances[uuid].ref
            assert bucket(NAMESPACE, ref, TOTAL) == scope.bucket_id, f"seq {seq}: {ref} not in bucket {scope.bucket_id}"
        per_bucket[scope.bucket_id] += 1
    return per_bucket


def assert_weekly_counts(spark: Any, state: BuildState) -> None:
    """Each weekly holds CLICKS_ROWS clicks per day of the week in range (dailies of other buckets included)."""
    for week in WEEKS:
        weekly = state.canonical_instance(weekly_ref(week))
        assert weekly is not None and weekly.location
        days = len(week_days_in_range(week, CLICKS_DAYS, CLICKS_START))
        assert sum(read_counts(spark, weekly.location).values()) == CLICKS_ROWS * days, week


@pytest.mark.parametrize("db_url", ["postgres"], indirect=True)
def test_three_static_workers_build_w1_each_in_its_bucket(
    db_url: str, api: httpx.Client, clicks_root: Path, tmp_path: Path, spark: Any
) -> None:
    post_wants(api)
    started = time.monotonic()
    with static_workers(db_url, clicks_root, tmp_path) as workers:
        waited = wait_successful(api, workers, tmp_path)
        stop_workers(workers, tmp_path)
    print(f"built in {waited:.1f} s; workers ran {time.monotonic() - started:.1f} s")

    state = replay(db_url)
    assert state.rejections == []
    assert_built_once_each(state)
    buffers = accepted_buffers(state, logged_events(db_url, state.head_seq))
    per_bucket = assert_buffers_scoped(state, buffers)
    needed = Counter(bucket(NAMESPACE, ref, TOTAL) for ref in wanted_refs() if not ref.startswith("raw/"))
    assert set(per_bucket) == set(needed)  # every bucket with work to do did it
    assert_weekly_counts(spark, state)
    print(f"job runs per bucket {dict(sorted(per_bucket.items()))}; {state.counts()['job_runs']}")
