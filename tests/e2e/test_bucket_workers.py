"""Sharded `partbuild run` workers on W1, end to end on real PostgreSQL, over a real HTTP API.

Three static workers (`--bucket-total 3 --bucket-id 1|2|3`) run at once over one
fresh database; the W1 weekly wants arrive over HTTP. The three build
everything, each only its own bucket's partitions, and wait for each other's
upstream (no `--until-idle`). A fourth worker started meanwhile with another
layout (`--bucket-total 2 --bucket-id 1`) is refused by the fold and exits. The
log is then replayed strictly and checked.
"""

from __future__ import annotations

import signal
import subprocess
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from examples.clicks.pipeline import build_graph, week_days_in_range, weekly_ref
from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.database import Database
from partbuild.state.fold.build_state import BuildState
from partbuild.state.rules.bucketing import bucket

from pgkit import PgServer
from serverkit import serve_service
from sparkkit import CLICKS_DAYS, CLICKS_ROWS, CLICKS_START
from w1kit import WEEKS, finished, read_counts, replay, start_orchestrator
from w1workerkit import Processes, assert_built_once_each, assert_running, built_refs, output, processes

pytestmark = pytest.mark.process

NAMESPACE = "partbuild"
TOTAL = 3
WORKERS = {f"worker-{bucket_id}": bucket_id for bucket_id in range(1, TOTAL + 1)}
INTRUDER = "intruder"  # --bucket-total 2 --bucket-id 1: overlaps buckets of all three
CONFLICT = f"split into {TOTAL} buckets"
WANT_IDS = [f"w-{week}" for week in WEEKS]
START_TIMEOUT_S = 240.0  # a JVM per process; four share two cores, often with other test runs
BUILD_TIMEOUT_S = 420.0


def start_worker(
    db: str, clicks_root: Path, tmp_path: Path, name: str, total: int, bucket_id: int
) -> subprocess.Popen[bytes]:
    """`partbuild run --bucket-total T --bucket-id K` without --until-idle; output in `<name>.log`."""
    options = ("--bucket-total", str(total), "--bucket-id", str(bucket_id))
    return start_orchestrator(db, clicks_root, tmp_path, name, *options)


@pytest.fixture(scope="session")
def postgres_up(pg_server: PgServer) -> None:
    """Skip (or, under PARTBUILD_REQUIRE_POSTGRES=1, fail) before the session's Spark and data are made."""
    if pg_server.engine is None:
        pytest.skip(f"{pg_server.unreachable}; set PARTBUILD_TEST_PG_URL, or PARTBUILD_REQUIRE_POSTGRES=1 to fail")


@pytest.fixture
def api(db_url: str, clicks_root: Path) -> Iterator[httpx.Client]:
    """The W1 graph's HTTP API on a real uvicorn server over `db_url` (schema migrated); an httpx client."""
    from partbuild.api.service import Service

    graph = build_graph(clicks_root, days=CLICKS_DAYS, start=CLICKS_START)
    with Database.open(db_url, auto_upgrade=True) as db, serve_service(Service(db, graph=graph)) as server:
        yield server.client


def post_wants(client: httpx.Client) -> None:
    """One want per weekly ref, over HTTP."""
    for week, want_id in zip(WEEKS, WANT_IDS, strict=True):
        response = client.post("/api/v1/wants", json={"refs": [weekly_ref(week)], "want_id": want_id})
        assert response.status_code == 201, response.text
        assert response.json()["want_id"] == want_id


def wait_bucket_runs(db: str, procs: Processes, tmp_path: Path) -> None:
    """Block until each static worker has recorded its bucket_run_start (the layout is then fixed)."""
    deadline = time.monotonic() + START_TIMEOUT_S
    after, seen = 0, 0
    with Database.open(db) as database:
        log = database.log
        while seen < len(WORKERS):
            assert time.monotonic() < deadline, f"{seen} of {len(WORKERS)} bucket_run_start in {START_TIMEOUT_S:g} s"
            assert_running(procs, list(WORKERS), tmp_path)
            for stored in log.read(after, 1000):
                after = stored.seq
                seen += stored.event_type == "bucket_run_start"
            time.sleep(0.2)


def wait_successful(client: httpx.Client, procs: Processes, tmp_path: Path) -> float:
    """Poll the API until every want is successful; fail at once if a static worker exits. Returns seconds waited."""
    start = time.monotonic()
    states: dict[str, str] = {}
    while time.monotonic() - start < BUILD_TIMEOUT_S:
        assert_running(procs, list(WORKERS), tmp_path)
        for want_id in WANT_IDS:
            response = client.get(f"/api/v1/wants/{want_id}")
            assert response.status_code == 200, response.text
            states[want_id] = response.json()["state"]
        if all(state == "successful" for state in states.values()):
            return time.monotonic() - start
        time.sleep(0.5)
    raise AssertionError(f"wants not successful within {BUILD_TIMEOUT_S:g} s: {states}")


def stop_workers(procs: Processes, tmp_path: Path) -> None:
    """SIGTERM every static worker; each must finish its runs in flight and exit 0."""
    for name in WORKERS:
        procs[name].send_signal(signal.SIGTERM)
    for name in WORKERS:
        code = finished(procs[name], 120, tmp_path / f"{name}.log")
        assert code == 0, f"{name} exited {code}:\n{output(tmp_path, name)[-3000:]}"


def assert_intruder_exited(procs: Processes, tmp_path: Path) -> None:
    """The overlapping worker exits 2 with one line naming the conflict (no traceback)."""
    code = finished(procs[INTRUDER], START_TIMEOUT_S, tmp_path / f"{INTRUDER}.log")
    text = output(tmp_path, INTRUDER)
    assert code == 2, f"{INTRUDER} exited {code}:\n{text[-3000:]}"
    assert len([line for line in text.splitlines() if CONFLICT in line]) == 1, text[-3000:]
    assert "Traceback" not in text, text[-3000:]


def logged_events(db: str, upto_seq: int) -> dict[int, pb.Event]:
    """Every event of the log up to `upto_seq`, by seq."""
    with Database.open(db) as database:
        log = database.log
        return {seq: pb.Event.FromString(payload) for seq, payload in log.iter_payloads(upto_seq=upto_seq)}


def accepted(state: BuildState, events: dict[int, pb.Event], kind: str | None = None) -> dict[int, pb.Event]:
    """The events (of payload `kind`, or all) the fold accepted, by seq."""
    rejected = {rejection.seq for rejection in state.rejections}
    return {
        seq: event
        for seq, event in events.items()
        if seq not in rejected and (kind is None or event.WhichOneof("payload") == kind)
    }


def intruder_id(state: BuildState, events: dict[int, pb.Event]) -> str:
    """The one rejection: the intruder's bucket_run_start, refused for its layout. Returns its worker id."""
    assert [r.event_type for r in state.rejections] == ["bucket_run_start"], state.rejections
    rejection = state.rejections[0]
    assert CONFLICT in rejection.reason, rejection.reason
    event = events[rejection.seq]
    scope = event.bucket_run_start.bucket
    assert (scope.namespace, scope.bucket_id, scope.bucket_total) == (NAMESPACE, 1, 2)
    assert event.source.system.worker, event.source
    return event.source.system.worker


def bucket_owners(state: BuildState, events: dict[int, pb.Event]) -> dict[int, str]:
    """Bucket id -> worker id of the accepted bucket_run_start of that bucket: one per bucket, distinct workers."""
    owners: dict[int, str] = {}
    for event in accepted(state, events, "bucket_run_start").values():
        scope, worker = event.bucket_run_start.bucket, event.source.system.worker
        assert (scope.namespace, scope.bucket_total) == (NAMESPACE, TOTAL), scope
        assert worker and scope.bucket_id not in owners, (scope, worker, owners)
        owners[scope.bucket_id] = worker
    assert sorted(owners) == list(range(1, TOTAL + 1))
    assert len(set(owners.values())) == TOTAL, owners
    return owners


def assert_owned_by_the_processes(owners: dict[int, str], pids: dict[int, int]) -> None:
    """Each bucket's owner is the process started with that bucket: a worker id is `host:pid:token`."""
    assert {bucket_id: owner.split(":")[1] for bucket_id, owner in owners.items()} == {
        bucket_id: str(pid) for bucket_id, pid in pids.items()
    }


def assert_buffers_by_owners(state: BuildState, events: dict[int, pb.Event], owners: dict[int, str]) -> Counter[int]:
    """Each accepted buffer: scoped to NAMESPACE/TOTAL, its instances in that bucket, appended by its owner."""
    per_bucket: Counter[int] = Counter()
    for seq, event in accepted(state, events, "job_run_buffer").items():
        buffer = event.job_run_buffer
        assert buffer.HasField("bucket"), f"job run buffer at seq {seq} carries no bucket"
        scope = buffer.bucket
        assert (scope.namespace, scope.bucket_total) == (NAMESPACE, TOTAL), f"seq {seq}: {scope}"
        for uuid in buffer.instance_uuids:
            ref = state.instances[uuid].ref
            assert bucket(NAMESPACE, ref, TOTAL) == scope.bucket_id, f"seq {seq}: {ref} not in bucket {scope.bucket_id}"
        assert event.source.system.worker == owners[scope.bucket_id], f"seq {seq}: appended by another worker"
        per_bucket[scope.bucket_id] += 1
    assert set(per_bucket) == {bucket(NAMESPACE, ref, TOTAL) for ref in built_refs()}  # each bucket did its work
    return per_bucket


def assert_layout_served(client: httpx.Client, state: BuildState, events: dict[int, pb.Event]) -> None:
    """The API reports the layout the first bucket_run_start fixed: TOTAL buckets, no round-robin."""
    first = min(accepted(state, events, "bucket_run_start"))
    response = client.get("/api/v1/buckets", params={"min_seq": state.head_seq})
    assert response.status_code == 200, response.text
    layout = {"namespace": NAMESPACE, "bucket_total": TOTAL, "since_seq": first, "last_round_robin_bucket": None}
    assert response.json() == [layout]


def assert_weekly_counts(spark: Any, state: BuildState) -> None:
    """Each weekly holds CLICKS_ROWS clicks per day of the week in range (dailies of other buckets included)."""
    for week in WEEKS:
        weekly = state.canonical_instance(weekly_ref(week))
        assert weekly is not None and weekly.location
        days = len(week_days_in_range(week, CLICKS_DAYS, CLICKS_START))
        assert sum(read_counts(spark, weekly.location).values()) == CLICKS_ROWS * days, week


def run_workers(db: str, api: httpx.Client, clicks_root: Path, tmp_path: Path) -> tuple[float, dict[int, int]]:
    """Start the three, then the intruder once the layout is fixed; wait for the wants; stop.

    Returns the seconds the wants took once the layout was fixed, and each bucket's worker pid.
    """
    with processes() as procs:
        for name, bucket_id in WORKERS.items():
            procs[name] = start_worker(db, clicks_root, tmp_path, name, TOTAL, bucket_id)
        wait_bucket_runs(db, procs, tmp_path)
        procs[INTRUDER] = start_worker(db, clicks_root, tmp_path, INTRUDER, 2, 1)
        waited = wait_successful(api, procs, tmp_path)
        assert_intruder_exited(procs, tmp_path)
        stop_workers(procs, tmp_path)
    return waited, {bucket_id: procs[name].pid for name, bucket_id in WORKERS.items()}


@pytest.mark.parametrize("db_url", ["postgres"], indirect=True)
def test_three_static_workers_build_w1_each_its_bucket_and_an_overlapping_one_is_refused(
    postgres_up: None, db_url: str, api: httpx.Client, clicks_root: Path, tmp_path: Path, spark: Any
) -> None:
    """Each static worker builds exactly its bucket, upstream from the others; the overlapping one builds nothing."""
    post_wants(api)
    started = time.monotonic()
    waited, pids = run_workers(db_url, api, clicks_root, tmp_path)
    print(f"wants successful {waited:.1f} s after the layout was fixed; {time.monotonic() - started:.1f} s in all")

    state = replay(db_url)
    events = logged_events(db_url, state.head_seq)
    assert_built_once_each(state)
    intruder = intruder_id(state, events)
    owners = bucket_owners(state, events)
    assert intruder not in owners.values()
    assert_owned_by_the_processes(owners, pids)
    assert [seq for seq, e in accepted(state, events).items() if e.source.system.worker == intruder] == []
    per_bucket = assert_buffers_by_owners(state, events, owners)
    assert_layout_served(api, state, events)
    assert_weekly_counts(spark, state)
    last_success = max(accepted(state, events, "job_run_success"))
    print(f"job runs per bucket {dict(sorted(per_bucket.items()))}; {state.counts()['job_runs']}")
    print(f"intruder rejected at seq {state.rejections[0].seq}; last job run success at seq {last_success}")
