"""/api/v1/job-runs over HTTP: cancel a queued run; runs and their states as of a seq (listing and reading
runs of a real build: tests/e2e/test_api_w1.py)."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import pytest

from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.log.events import envelope
from partbuild.state.ops.run_logs import RunLogLine

from clikit import run_cli
from golden_log import check_events
from golden_outcomes import outcome_events
from httpkit import API, canonical, head_seq, listed, ok, problem, want
from serverkit import ApiServer


def test_cancel_job_run_then_cancel_again_conflicts(api_server: ApiServer) -> None:
    """Cancelling a queued run records JobRunCancel: the run is canceled, and so is its instance, which a fresh
    schedulable one replaces (a new UUID: a rebuild writes elsewhere); the canceled one stays in history."""
    client = api_server.client
    want(client, ["j/1"], want_id="j-1")
    uuid = canonical(client, "j/1")["uuid"]
    api_server.log.append([envelope(pb.JobRunBuffer(job_run_id="run-1", job_label="j", instance_uuids=[uuid]))])
    assert ok(client.get(f"{API}/job-runs/run-1", params={"min_seq": head_seq(client)}))["state"] == "queued"

    written = ok(client.post(f"{API}/job-runs/run-1/cancel", json={"reason": "wrong code"}))
    run = ok(client.get(f"{API}/job-runs/run-1", params={"min_seq": written["seq"]}))
    assert (run["state"], run["cancel_reason"], run["updated_seq"]) == ("canceled", "wrong code", written["seq"])
    fresh = canonical(client, "j/1")
    assert fresh["state"] == "missing" and fresh["uuid"] != uuid and fresh["created_seq"] == written["seq"]
    assert ok(client.get(f"{API}/instances/{uuid}"))["state"] == "canceled"
    assert ok(client.get(f"{API}/instances/{uuid}", params={"as_of_seq": written["seq"] - 1}))["state"] == "building"
    assert [i["state"] for i in ok(client.get(f"{API}/partitions/history/j/1"))] == ["missing", "canceled"]
    assert listed(client, f"{API}/partitions", "ref", state="canceled") == []  # accepted; never canonical

    before = head_seq(client)
    problem(client.post(f"{API}/job-runs/run-1/cancel"), 409, "run-1", "canceled")
    problem(client.post(f"{API}/job-runs/nope/cancel"), 404, "nope")
    problem(client.post(f"{API}/job-runs/run-1/cancel", json={"reason": 5}), 422, "body.reason")
    assert head_seq(client) == before


def test_job_runs_as_of_a_seq_show_which_runs_existed_and_their_states_then(api_server: ApiServer) -> None:
    """A run queued, running, then succeeded; a second one queued then canceled: the list, its filters, its
    cursors and each run's detail as of every step are what they were then."""
    client, log = api_server.client, api_server.log
    want(client, ["k/1", "k/2"], want_id="k")
    first, second = canonical(client, "k/1")["uuid"], canonical(client, "k/2")["uuid"]
    queued = log.append([envelope(pb.JobRunBuffer(job_run_id="run-a", job_label="ja", instance_uuids=[first]))])
    running = log.append([envelope(pb.JobRunHeartbeat(job_run_id="run-a"))]).last_seq
    succeeded = log.append([envelope(pb.JobRunSuccess(job_run_id="run-a"))]).last_seq
    other = log.append([envelope(pb.JobRunBuffer(job_run_id="run-b", job_label="jb", instance_uuids=[second]))])
    canceled = ok(client.post(f"{API}/job-runs/run-b/cancel", params={"min_seq": other.last_seq}))["seq"]

    def run(run_id: str, seq: int) -> dict[str, Any]:
        return ok(client.get(f"{API}/job-runs/{run_id}", params={"as_of_seq": seq}))

    then = run("run-a", queued.last_seq)
    assert (then["state"], then["updated_seq"], then["as_of_seq"], then["refs"]) == (
        "queued",
        queued.last_seq,
        queued.last_seq,
        ["k/1"],
    )
    assert run("run-a", running)["state"] == "running" and run("run-a", succeeded)["state"] == "succeeded"
    assert (run("run-b", other.last_seq)["state"], run("run-b", canceled)["state"]) == ("queued", "canceled")
    now = ok(client.get(f"{API}/job-runs/run-a"))
    assert (now["state"], now["as_of_seq"]) == ("succeeded", canceled)
    problem(client.get(f"{API}/job-runs/run-a", params={"as_of_seq": queued.last_seq - 1}), 404, "as of seq")
    assert canonical(client, "k/1", as_of_seq=running)["state"] == "building"

    def runs(**params: Any) -> list[tuple[str, str]]:
        page = ok(client.get(f"{API}/job-runs", params=params))
        assert page["as_of_seq"] == params.get("as_of_seq", canceled)
        return [(r["job_run_id"], r["state"]) for r in page["items"]]

    assert runs(as_of_seq=queued.last_seq - 1) == []
    assert runs(as_of_seq=running) == [("run-a", "running")]
    assert runs(as_of_seq=other.last_seq) == [("run-a", "succeeded"), ("run-b", "queued")]
    assert runs() == [("run-a", "succeeded"), ("run-b", "canceled")]
    assert runs(as_of_seq=other.last_seq, state="queued") == [("run-b", "queued")]
    assert runs(as_of_seq=running, state="queued") == []
    assert runs(as_of_seq=other.last_seq, job="jb") == [("run-b", "queued")]
    assert listed(client, f"{API}/job-runs", "state", limit=1, as_of_seq=other.last_seq) == ["succeeded", "queued"]
    cursor = str(other.last_seq)  # run-b's created seq: a cursor only pages as of a seq that has run-b
    assert runs(as_of_seq=canceled, cursor=cursor) == []
    problem(client.get(f"{API}/job-runs", params={"as_of_seq": running, "cursor": cursor}), 404, "cursor")
    for path in (f"{API}/job-runs", f"{API}/job-runs/run-a"):
        problem(client.get(path, params={"as_of_seq": canceled + 1}), 409, "is after the log head")
        for bad in (-1, "x", "2.0"):
            problem(client.get(path, params={"as_of_seq": bad}), 422, "query.as_of_seq")


def test_a_job_runs_answer_shows_the_checks_its_outcome_recorded_as_of_any_seq(
    api_server: ApiServer, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 24, over the checks golden log: a success with a warning (r1 at seq 5), an errored check (r2 at 7), a
    blocking failure (r3 at 11), a pass (r4 at 17). Each run shows its own outcome's checks per output, none before
    the outcome; the instance answer shows the latest; lineage nodes carry the worst result; the CLI prints them."""
    client = api_server.client
    api_server.log.append(check_events())

    def run(run_id: str, **params: Any) -> dict[str, Any]:
        return ok(client.get(f"{API}/job-runs/{run_id}", params={"min_seq": 18, **params}))

    (warned,) = run("r1")["checks"]
    d1 = warned["instance_uuid"]
    assert warned["ref"] == "d/1" and warned["checks"] == [
        {
            "name": "rows_nonzero",
            "result": "passed",
            "passed": True,
            "blocking": True,
            "errored": False,
            "description": "rows_nonzero said True",
            "metrics": {"rows": 5.0},
            "seq": 5,
            "duration_ms": None,
        },
        {
            "name": "url_not_null",
            "result": "warning",
            "passed": False,
            "blocking": False,
            "errored": False,
            "description": "url_not_null said False",
            "metrics": {"nulls": 2.0},
            "seq": 5,
            "duration_ms": None,
        },
    ]
    assert run("r1", as_of_seq=4)["checks"] == [] and run("r1", as_of_seq=5)["checks"] == run("r1")["checks"]
    assert ok(client.get(f"{API}/instances/{d1}"))["state"] == "live"

    def results(body: dict[str, Any]) -> list[tuple[str, str, int]]:
        return [(c["name"], c["result"], c["seq"]) for each in body["checks"] for c in each["checks"]]

    # d/2 was checked twice: each run shows its own outcome's checks, the instance its latest.
    assert results(run("r2")) == [("rows_nonzero", "errored", 7)]
    assert results(run("r3")) == [("rows_nonzero", "failed", 11), ("url_not_null", "passed", 11)]
    assert results(run("r3", as_of_seq=10)) == []  # r3 still running: its rejected successes recorded nothing
    assert results(run("r4")) == [("rows_nonzero", "passed", 17)]
    d2 = run("r2")["checks"][0]["instance_uuid"]
    instance = ok(client.get(f"{API}/instances/{d2}"))
    assert instance["state"] == "failed" and [c["result"] for c in instance["checks"]] == ["failed", "passed"]
    then = ok(client.get(f"{API}/instances/{d2}", params={"as_of_seq": 7}))
    assert [c["result"] for c in then["checks"]] == ["errored"]
    listed_runs = ok(client.get(f"{API}/job-runs"))["items"]
    assert {r["job_run_id"]: results(r) for r in listed_runs}["r3"] == results(run("r3"))

    graph = ok(client.get(f"{API}/instances/{d1}/lineage", params={"direction": "upstream"}))
    assert {node["ref"]: node["check_result"] for node in graph["nodes"]} == {"d/1": "warning", "raw/a": None}
    past = ok(client.get(f"{API}/instances/{d1}/lineage", params={"direction": "upstream", "as_of_seq": 4}))
    assert {node["ref"]: node["check_result"] for node in past["nodes"]} == {"d/1": None}

    code, out, _ = run_cli(capsys, "runs", "show", "r1", "--server", api_server.url)
    assert code == 0 and "warning url_not_null (non-blocking, seq 5)" in out and "passed rows_nonzero" in out
    code, out, _ = run_cli(capsys, "runs", "show", "r1", "--server", api_server.url, "--as-of", "4")
    assert code == 0 and "url_not_null" not in out
    code, out, _ = run_cli(capsys, "lineage", d1, "--server", api_server.url)
    assert code == 0 and "checks warning" in out, out


def _log_lines(run_id: str, first: int, texts: list[str]) -> list[RunLogLine]:
    return [RunLogLine(run_id, first + n, 1_700_000_000_000 + n, "INFO", text) for n, text in enumerate(texts)]


def test_job_run_logs_are_paged_and_followed_while_the_run_is_active(
    api_server: ApiServer, capsys: pytest.CaptureFixture[str]
) -> None:
    """Lines come in pages by line number; `follow` waits for a line logged meanwhile while the run is
    active, and answers at once when it has ended; `runs logs` prints them, `--follow` until the run ends."""
    client, log, store = api_server.client, api_server.log, api_server.service.db.run_logs
    want(client, ["j/1"], want_id="j-1")
    uuid = canonical(client, "j/1")["uuid"]
    log.append([envelope(pb.JobRunBuffer(job_run_id="run-1", job_label="j", instance_uuids=[uuid]))])
    log.append([envelope(pb.JobRunHeartbeat(job_run_id="run-1"))])
    store.append(_log_lines("run-1", 1, ["one", "two", "three"]))
    url = f"{API}/job-runs/run-1/logs"

    page = ok(client.get(url, params={"limit": 2}))
    assert [(x["line_no"], x["text"]) for x in page["lines"]] == [(1, "one"), (2, "two")]
    assert (page["next_after"], page["active"]) == (2, True)
    page = ok(client.get(url, params={"after": 2}))
    assert ([x["text"] for x in page["lines"]], page["next_after"]) == (["three"], 3)
    assert ok(client.get(url, params={"after": 3}))["lines"] == []  # no follow: no wait

    later = threading.Timer(0.5, lambda: store.append(_log_lines("run-1", 4, ["logged later"])))
    later.start()
    started = time.monotonic()
    page = ok(client.get(url, params={"after": 3, "follow": 20}))
    later.join()
    assert [x["text"] for x in page["lines"]] == ["logged later"]
    assert time.monotonic() - started < 10  # answered when the line came, not at the end of the wait

    code, out, _ = run_cli(capsys, "runs", "logs", "run-1", "--server", api_server.url, "--after", "1")
    assert code == 0
    assert [line.split(maxsplit=4)[-1] for line in out.splitlines()] == ["two", "three", "logged later"]
    assert out.splitlines()[0].split()[:2] == ["2", "2023-11-14"]

    ended = threading.Timer(0.5, lambda: log.append([envelope(pb.JobRunSuccess(job_run_id="run-1"))]))
    ended.start()
    code, out, _ = run_cli(capsys, "runs", "logs", "run-1", "--server", api_server.url, "--follow", "--json")
    ended.join()
    assert code == 0  # --follow returned once the run ended
    assert [json.loads(line)["text"] for line in out.splitlines()] == ["one", "two", "three", "logged later"]
    started = time.monotonic()
    page = ok(client.get(url, params={"after": 4, "follow": 20}))
    assert (page["lines"], page["active"]) == ([], False)
    assert time.monotonic() - started < 10  # an ended run is not waited on

    problem(client.get(f"{API}/job-runs/nope/logs"), 404, "nope")
    problem(client.get(url, params={"limit": 0}), 422, "limit")
    problem(client.get(url, params={"follow": 31}), 422, "follow")
    problem(client.get(url, params={"after": -1}), 422, "after")
    code, _, err = run_cli(capsys, "runs", "logs", "nope", "--server", api_server.url)
    assert code != 0 and "nope" in err


def test_a_runs_answer_names_the_outputs_that_failed_on_their_own_and_a_split(
    api_server: ApiServer, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 34, over the outcomes golden log: r1 succeeded with two of its four outputs failed on their own; r2
    failed as a whole and was split; neither before its outcome."""
    client = api_server.client
    events = outcome_events()
    api_server.log.append(events)

    def run(run_id: str, **params: Any) -> dict[str, Any]:
        return ok(client.get(f"{API}/job-runs/{run_id}", params={"min_seq": len(events), **params}))

    partial = run("r1")
    assert partial["state"] == "succeeded" and len(partial["failed_outputs"]) == 2
    assert partial["failed_outputs"] == partial["instance_uuids"][2:]
    assert run("r1", as_of_seq=4)["failed_outputs"] == []
    split = run("r2")
    assert (split["state"], split["split"], split["error_class"]) == ("failed", True, "retryable")
    assert run("r2", as_of_seq=7)["split"] is False
    code, out, _ = run_cli(capsys, "runs", "--server", api_server.url)
    assert code == 0 and "2 of 4 outputs failed on their own" in out and "split" in out
