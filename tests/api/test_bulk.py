"""Bulk actions over HTTP (a real uvicorn on a real SQLite log): one request, one want or one
append, on refs listed or under a prefix in a state; a dry run counts and records nothing; over the limit a 413
and nothing recorded."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from partbuild.api.models.bulk import MAX_BULK_REFS
from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.log.events import envelope, from_job_run, system
from partbuild.state.rules.ids import instance_uuid

from clikit import run_cli
from httpkit import API, WANTS, canonical, head_seq, ok, problem
from serverkit import ApiServer

BULK = f"{API}/bulk"
ORCHESTRATOR = system("orchestrator")


def test_a_bulk_want_is_one_request_and_one_want_and_over_the_limit_nothing_is_recorded(api_server: ApiServer) -> None:
    client = api_server.client
    refs = [f"big/n={n:05d}" for n in range(12_000)]  # over what one POST /wants may name
    done = ok(client.post(BULK, json={"action": "want", "selection": {"refs": refs}, "want_id": "october"}), 201)
    assert (done["selected"], done["acted_on"], done["want_id"]) == (12_000, 12_000, "october")
    assert done["first_seq"] == done["last_seq"] == head_seq(client) == 1  # one event: one want
    assert done["refs"] == refs[:20]
    assert len(ok(client.get(f"{WANTS}/october"))["refs_status"]) == 12_000
    too_many = [f"big/m={n}" for n in range(MAX_BULK_REFS + 1)]
    problem(client.post(BULK, json={"action": "want", "selection": {"refs": too_many}}), 413, "at most 100,000")
    problem(client.post(BULK, json={"action": "want", "selection": {}}), 422, "selection")
    problem(client.post(BULK, json={"action": "want", "selection": {"refs": [], "ref_prefix": ""}}), 422, "selection")
    twice = {"action": "want", "selection": {"refs": ["big/n=1", "big/n=1"]}}
    problem(client.post(BULK, json=twice), 422, "more than once")
    assert head_seq(client) == 1  # nothing recorded by the refusals


def _failed_and_live(api_server: ApiServer) -> None:
    """d/1 and d/2 failed (their run failed), d/3 and e/1 Live, f/1 Live built from d/3."""
    first = api_server.log.append(
        [envelope(pb.WantCreate(want_id="w", partition_refs=["d/1", "d/2", "d/3", "e/1"]), source=ORCHESTRATOR)]
    ).first_seq
    uuids = {ref: instance_uuid(first, ref) for ref in ("d/1", "d/2", "d/3", "e/1")}
    for run, refs, ok_run in (("r1", ["d/1", "d/2"], False), ("r2", ["d/3", "e/1"], True)):
        buffer = pb.JobRunBuffer(job_run_id=run, job_label="d", instance_uuids=[uuids[r] for r in refs])
        api_server.log.append([envelope(buffer, source=ORCHESTRATOR)])
        outcome: object = (
            pb.JobRunSuccess(job_run_id=run)
            if ok_run
            else pb.JobRunFailure(job_run_id=run, error_class=pb.ERROR_CLASS_PERMANENT, message="bad input")
        )
        api_server.log.append([envelope(outcome, source=from_job_run(run))])  # type: ignore[arg-type]
    # f/1, built from d/3: a taint of d/3 cascades to it.
    wanted = api_server.log.append([envelope(pb.WantCreate(want_id="f", partition_refs=["f/1"]), source=ORCHESTRATOR)])
    buffer = pb.JobRunBuffer(job_run_id="r3", job_label="f", instance_uuids=[instance_uuid(wanted.first_seq, "f/1")])
    api_server.log.append([envelope(buffer, source=ORCHESTRATOR)])
    built = pb.JobRunSuccess(job_run_id="r3", input_instance_uuids=[uuids["d/3"]])
    api_server.log.append([envelope(built, source=from_job_run("r3"))])
    api_server.service.refresh()


def test_retry_wants_only_the_failed_and_a_dry_run_counts_without_recording(api_server: ApiServer) -> None:
    client = api_server.client
    _failed_and_live(api_server)
    head = head_seq(client)
    retry = {"action": "retry", "selection": {"ref_prefix": "d/"}, "dry_run": True}
    dry = ok(client.post(BULK, json=retry), 201)
    assert (dry["selected"], dry["acted_on"], dry["refs"], dry["first_seq"]) == (3, 2, ["d/1", "d/2"], None)
    assert head_seq(client) == head
    done = ok(client.post(BULK, json={**retry, "dry_run": False}), 201)
    assert done["first_seq"] == done["last_seq"] == head + 1 and done["want_id"]
    assert [canonical(client, ref)["state"] for ref in ("d/1", "d/2", "d/3")] == ["missing", "missing", "live"]
    by_state = {"action": "want", "selection": {"ref_prefix": "", "state": "live"}, "dry_run": True}
    assert ok(client.post(BULK, json=by_state), 201)["refs"] == ["d/3", "e/1", "f/1"]


def test_a_bulk_taint_is_one_append_and_skips_what_its_own_cascade_taints(api_server: ApiServer) -> None:
    client = api_server.client
    _failed_and_live(api_server)
    head = head_seq(client)
    taint = {"action": "taint", "selection": {"refs": ["d/1", "d/3", "e/1", "f/1"]}, "reason": "bad October"}
    done = ok(client.post(BULK, json=taint), 201)
    # d/1 failed: not Live; f/1 was built from d/3: d/3's taint taints it (its own would be refused).
    assert (done["selected"], done["acted_on"], done["refs"]) == (4, 2, ["d/3", "e/1"])
    assert (done["first_seq"], done["last_seq"]) == (head + 1, head + 2)
    assert {canonical(client, ref)["state"] for ref in ("d/3", "e/1", "f/1")} == {"missing"}
    again = ok(client.post(BULK, json=taint), 201)  # nothing Live left: nothing recorded
    assert (again["acted_on"], again["first_seq"]) == (0, None) and head_seq(client) == head + 2


def test_the_cli_acts_on_a_prefix_or_a_file_of_refs_in_one_request(
    api_server: ApiServer, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    _failed_and_live(api_server)
    server = ("--server", api_server.url)
    code, out, _ = run_cli(capsys, "bulk", "retry", "--ref-prefix", "d/", "--dry-run", *server)
    assert code == 0 and out.strip() == "retry: 2 of 3 selected partitions (a dry run: nothing recorded): d/1, d/2"
    refs = tmp_path / "refs.txt"
    refs.write_text("x/1\nx/2\n\nx/3\n")
    code, out, _ = run_cli(capsys, "bulk", "want", "--refs-file", str(refs), "--want-id", "xs", "--json", *server)
    assert code == 0 and json.loads(out)["acted_on"] == 3 and json.loads(out)["want_id"] == "xs"
    code, _, err = run_cli(capsys, "bulk", "taint", "--ref-prefix", "d/", "--state", "sleepy", *server)
    assert code == 2 and err.count("\n") == 1 and "sleepy" in err
    code, _, err = run_cli(capsys, "bulk", "want", *server)
    assert code == 2 and "give --ref-prefix or --refs-file" in err


def test_recheck_asks_each_live_partition_of_a_job_with_checks_once(sqlite_url: str) -> None:
    from partbuild.api.service import Service
    from partbuild.orchestrator.checks import row_count_at_least
    from partbuild.orchestrator.graph import Graph, Job
    from partbuild.state.database import Database

    from serverkit import serve_service

    def noop(ctx: object) -> None:
        """Never run."""

    graph = Graph(
        [
            Job("d", ["d/{n}"], noop, checks=[row_count_at_least(1)]),
            Job("e", ["e/{n}"], noop),  # no checks: nothing to run again
            Job("f", ["f/{n}"], noop, checks=[row_count_at_least(1)]),
        ]
    )
    with Database.open(sqlite_url, auto_upgrade=True) as db, serve_service(Service(db, graph=graph)) as api:
        _failed_and_live(api)
        request = {"action": "recheck", "selection": {"ref_prefix": ""}}
        done = ok(api.client.post(BULK, json=request), 201)
        assert (done["selected"], done["acted_on"], done["refs"]) == (5, 2, ["d/3", "f/1"])
        assert done["last_seq"] == done["first_seq"] + 1
        again = ok(api.client.post(BULK, json=request), 201)  # their requests are pending: none asked twice
        assert (again["acted_on"], again["first_seq"]) == (0, None)
