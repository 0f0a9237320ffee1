"""/api/v1/job-runs over HTTP: cancel a queued run (listing and reading runs: tests/e2e/test_api_w1.py)."""

from __future__ import annotations

from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.log.events import envelope

from httpkit import API, canonical, head_seq, ok, problem, want
from serverkit import ApiServer


def test_cancel_job_run_then_cancel_again_conflicts(api_server: ApiServer) -> None:
    """Cancelling a queued run records JobRunCancel: the run is canceled, its instance schedulable again."""
    client = api_server.client
    want(client, ["j/1"], want_id="j-1")
    uuid = canonical(client, "j/1")["uuid"]
    api_server.log.append([envelope(pb.JobRunBuffer(job_run_id="run-1", job_label="j", instance_uuids=[uuid]))])
    assert ok(client.get(f"{API}/job-runs/run-1", params={"min_seq": head_seq(client)}))["state"] == "queued"

    written = ok(client.post(f"{API}/job-runs/run-1/cancel", json={"reason": "wrong code"}))
    run = ok(client.get(f"{API}/job-runs/run-1", params={"min_seq": written["seq"]}))
    assert (run["state"], run["cancel_reason"], run["updated_seq"]) == ("canceled", "wrong code", written["seq"])
    assert canonical(client, "j/1")["state"] == "missing"

    before = head_seq(client)
    problem(client.post(f"{API}/job-runs/run-1/cancel"), 409, "run-1", "canceled")
    problem(client.post(f"{API}/job-runs/nope/cancel"), 404, "nope")
    problem(client.post(f"{API}/job-runs/run-1/cancel", json={"reason": 5}), 422, "body.reason")
    assert head_seq(client) == before
