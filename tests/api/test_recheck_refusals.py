"""`POST /instances/{uuid}/checks` refused with the real reason (issue 35, item 6), through a real server.

A job's instance the orchestrator has not built yet had no `built_by` either, so every instance but a
Live built one was refused as "source data". Each state is reached here with the events an orchestrator
(or a scanner) appends, on a graph-less server; one case serves a graph, which names a source's ref even
before it is observed. Every refusal is a 409 that names the instance's state and why, and appends nothing.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from partbuild.api.service import Service
from partbuild.orchestrator.graph import Graph, Job, SourceDataset
from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.database import Database
from partbuild.state.log.events import envelope, from_job_run, manual, system

from httpkit import API, canonical, head_seq, observe, ok, problem, want
from serverkit import ApiServer, serve_service

REF, RAW = "d/1", "src/a"
ORCHESTRATOR = system("orchestrator")


def append(api: ApiServer, *payloads: object, source: object = ORCHESTRATOR) -> None:
    api.log.append([envelope(payload, source=source) for payload in payloads])  # type: ignore[arg-type]


def uuid_of(api: ApiServer, ref: str = REF) -> str:
    return str(canonical(api.client, ref, min_seq=api.log.head())["uuid"])


def buffered(api: ApiServer, run: str = "r1") -> str:
    """A want of REF and a job run that builds it: the instance's UUID."""
    want(api.client, [REF])
    uuid = uuid_of(api)
    append(api, pb.JobRunBuffer(job_run_id=run, job_label="d", instance_uuids=[uuid]))
    return uuid


def failed(api: ApiServer, error_class: int) -> str:
    uuid = buffered(api)
    append(api, pb.JobRunFailure(job_run_id="r1", error_class=error_class, message="boom"), source=from_job_run("r1"))
    return uuid


def missing(api: ApiServer) -> str:
    want(api.client, [REF])
    return uuid_of(api)


def upstream_building(api: ApiServer) -> str:
    uuid = missing(api)
    append(api, pb.InstancesWaitUpstream(waits=[pb.InstanceWait(instance_uuid=uuid, upstream_refs=[RAW])]))
    return uuid


def upstream_failed(api: ApiServer) -> str:
    """REF waits for u/1, whose run fails for good."""
    want(api.client, [REF, "u/1"])
    uuid, upstream = uuid_of(api), uuid_of(api, "u/1")
    append(api, pb.InstancesWaitUpstream(waits=[pb.InstanceWait(instance_uuid=uuid, upstream_refs=["u/1"])]))
    append(api, pb.JobRunBuffer(job_run_id="ru", job_label="u", instance_uuids=[upstream]))
    append(api, pb.JobRunFailure(job_run_id="ru", error_class=pb.ERROR_CLASS_PERMANENT, message="bad"))
    return uuid


def canceled(api: ApiServer) -> str:
    uuid = buffered(api)
    append(api, pb.JobRunCancel(job_run_id="r1", reason="operator", replace_instances=True), source=manual("ann"))
    return uuid


def tainted(api: ApiServer) -> str:
    uuid = buffered(api)
    append(api, pb.JobRunSuccess(job_run_id="r1"), source=from_job_run("r1"))
    ok(api.client.post(f"{API}/partitions/taint", json={"ref": REF, "reason": "late data"}), 201)
    return uuid


def observed(api: ApiServer) -> str:
    observe(api.client, RAW, "/data/a")
    return uuid_of(api, RAW)


def observed_then_tainted(api: ApiServer) -> str:
    uuid = observed(api)
    ok(api.client.post(f"{API}/partitions/taint", json={"ref": RAW, "reason": "bad feed"}), 201)
    return uuid


def gone(api: ApiServer) -> str:
    """A completed scan pass no longer finds the observed RAW."""
    uuid = observed(api)
    append(api, pb.SourceScanProgress(source="src", pass_number=1, last_key=b"z", done=True))
    scan_seq = api.log.head()
    append(api, pb.PartitionGone(partition_ref=RAW, location="/data/a", source="src", pass_number=1, scan_seq=scan_seq))
    return uuid


CASES = [
    pytest.param(missing, "missing", ("not built yet", "no job run has started it"), id="missing"),
    pytest.param(buffered, "building", ("not built yet", "a job run is building it"), id="building"),
    pytest.param(upstream_building, "upstream_building", ("not built yet", "waits for its inputs"), id="waiting"),
    pytest.param(
        lambda api: failed(api, pb.ERROR_CLASS_RETRYABLE), "up_for_retry", ("not built yet", "retried"), id="retry"
    ),
    pytest.param(lambda api: failed(api, pb.ERROR_CLASS_PERMANENT), "failed", ("failed for good",), id="failed"),
    pytest.param(upstream_failed, "upstream_failed", ("an input failed", "never built"), id="upstream-failed"),
    pytest.param(canceled, "canceled", ("job run was canceled", "before it was built"), id="canceled"),
    pytest.param(tainted, "tainted", ("tainted", "withdrawn", "late data"), id="tainted"),
    pytest.param(observed, "live", ("source data", "no job's checks apply"), id="source-live"),
    pytest.param(observed_then_tainted, "tainted", ("source data",), id="source-tainted"),
    pytest.param(gone, "gone", ("source data", "no longer finds (gone)"), id="source-gone"),
]


@pytest.mark.parametrize(("reach", "state", "words"), CASES)
def test_checks_are_not_run_again_and_the_409_says_why(
    api_server: ApiServer, reach: Callable[[ApiServer], str], state: str, words: tuple[str, ...]
) -> None:
    """Each state an instance can be in, but Live built: a 409 naming the instance, its state's reason, no append."""
    uuid = reach(api_server)
    client = api_server.client
    assert ok(client.get(f"{API}/instances/{uuid}", params={"min_seq": api_server.log.head()}))["state"] == state
    before = head_seq(client)
    detail = problem(client.post(f"{API}/instances/{uuid}/checks"), 409, uuid, *words)
    if "source data" not in words:
        assert "source data" not in detail, detail  # the bug: every one of these was "source data"
    assert head_seq(client) == before


def test_a_built_live_instance_is_checked_again(api_server: ApiServer) -> None:
    """The one state that is no refusal: Live, built by a job run (202, a pending request)."""
    uuid = buffered(api_server)
    append(api_server, pb.JobRunSuccess(job_run_id="r1"), source=from_job_run("r1"))
    ok(api_server.client.post(f"{API}/instances/{uuid}/checks", json={"comment": "again"}), 202)


def test_a_source_ref_of_the_served_graph_is_source_data_before_it_is_observed(sqlite_url: str) -> None:
    """With a graph, a wanted source ref not observed yet is source data, not a job's instance not built yet."""
    graph = Graph(
        [Job("d", ["d/{n:int}"], lambda ctx: None, inputs=lambda p: [RAW])],
        [SourceDataset("src", "src/{name}", locate=lambda p: None)],
    )
    with Database.open(sqlite_url, auto_upgrade=True) as db, serve_service(Service(db, graph=graph)) as api:
        want(api.client, [RAW])
        uuid = uuid_of(api, RAW)
        before = head_seq(api.client)
        detail = problem(api.client.post(f"{API}/instances/{uuid}/checks"), 409, "source data", "no job's checks")
        assert "not built" not in detail
        assert head_seq(api.client) == before
