"""/api/v1/partitions and /instances over HTTP: observe, canonical, history, instances as of a seq, refs in
paths, taint, listing by prefix and state (now and as of a seq), retention."""

from __future__ import annotations

import time
from typing import Any

import httpx
import pytest

from partbuild.api.service import Service
from partbuild.orchestrator.retention import DAY_MS
from partbuild.state.database import Database
from partbuild.state.log.events import wall_clock_ms

from clikit import run_cli
from golden_outcomes import outcome_events
from httpkit import (
    API,
    PARTITIONS,
    WANTS,
    canonical,
    head_seq,
    history,
    listed,
    observe,
    ok,
    problem,
    ref_path,
    walk,
    want,
)
from serverkit import ApiServer, graphless_api_server, serve_service


def test_observe_then_canonical_history_and_instance_as_of_seq(db_api_server: ApiServer) -> None:
    """A source observed twice has two instances: canonical and history now differ from as of the first seq."""
    client = db_api_server.client
    ref = "src/events/date=2026-01-01"
    first_seq = observe(client, ref, "/data/v1", row_count=10, bytes=1234, metadata={"format": "parquet"})
    v1 = canonical(client, ref)
    assert v1 == {
        "uuid": v1["uuid"],
        "ref": ref,
        "state": "live",
        "canonical": True,
        "created_seq": first_seq,
        "updated_seq": first_seq,
        "superseded_seq": None,
        "previous_uuid": None,
        "built_by": None,
        "attempts": [],
        "inputs": [],
        "consumers": [],
        "location": "/data/v1",
        "row_count": 10,
        "byte_count": 1234,
        "metadata": {"format": "parquet"},
        "waiting_on": [],
        "note": None,
        "version": None,
        "checks": [],
        "checks_requests": [],
        "code_version": None,
        "stale": False,
        "serving": True,
        "successor": None,
    }
    second_seq = observe(client, ref, "/data/v2")  # a new version of the source data
    v2 = canonical(client, ref)
    assert v2["uuid"] != v1["uuid"] and v2["previous_uuid"] == v1["uuid"]
    assert (v2["location"], v2["created_seq"], v2["metadata"]) == ("/data/v2", second_seq, {})

    # The past answer differs from the present one, and is the answer given then.
    assert canonical(client, ref, as_of_seq=first_seq) == v1
    assert canonical(client, ref, as_of_seq=second_seq) == v2
    problem(client.get(f"{PARTITIONS}/canonical/{ref_path(ref)}", params={"as_of_seq": first_seq - 1}), 404, ref)

    now = history(client, ref)
    assert [i["uuid"] for i in now] == [v2["uuid"], v1["uuid"]]
    assert (now[1]["canonical"], now[1]["superseded_seq"]) == (False, second_seq)
    assert history(client, ref, as_of_seq=first_seq) == [v1]

    # An instance by UUID: now superseded, as of the first seq canonical; unknown before it was created.
    assert ok(client.get(f"{API}/instances/{v1['uuid']}")) == now[1]
    assert ok(client.get(f"{API}/instances/{v1['uuid']}", params={"as_of_seq": first_seq})) == v1
    problem(client.get(f"{API}/instances/{v2['uuid']}", params={"as_of_seq": first_seq}), 404, v2["uuid"])

    # An observed instance has no lineage: it is the only node.
    lineage = ok(client.get(f"{API}/instances/{v2['uuid']}/lineage", params={"direction": "both", "depth": 3}))
    node = {"uuid": v2["uuid"], "ref": ref, "state": "live", "depth": 0, "built_by": None, "check_result": None}
    node["superseded"] = False
    assert lineage == {"root": v2["uuid"], "as_of_seq": second_seq, "nodes": [node], "edges": []}
    # The first version is still Live, but superseded: its node says so, as of now and not as of before.
    older = ok(client.get(f"{API}/instances/{v1['uuid']}/lineage"))["nodes"]
    assert [(n["state"], n["superseded"]) for n in older] == [("live", True)]
    then = ok(client.get(f"{API}/instances/{v1['uuid']}/lineage", params={"as_of_seq": first_seq}))["nodes"]
    assert [(n["state"], n["superseded"]) for n in then] == [("live", False)]


def test_canonical_path_keeps_the_slashes_of_a_ref(shared_client: httpx.Client) -> None:
    """A ref's slashes are literal path segments after /canonical/ and /history/."""
    client = shared_client
    seq = observe(client, "agg/daily_clicks/date=2026-01-01", "/data/daily")
    instance = ok(client.get("/api/v1/partitions/canonical/agg/daily_clicks/date=2026-01-01"))
    assert (instance["ref"], instance["created_seq"]) == ("agg/daily_clicks/date=2026-01-01", seq)
    assert ok(client.get("/api/v1/partitions/history/agg/daily_clicks/date=2026-01-01")) == [instance]


@pytest.mark.parametrize(
    "ref",
    ["a b/c%d?e#f", "unicode/ü/日本", "plus+sign/x=1&y=2", "pct%2Fencoded", "/leading", "trailing/", "double//slash"],
)
def test_refs_with_url_special_characters_round_trip(shared_client: httpx.Client, ref: str) -> None:
    """A ref written in a body reads back through an encoded path and through query parameters."""
    client = shared_client
    created = want(client, [ref])
    seq = observe(client, ref, "/data/x")
    instance = canonical(client, ref)
    assert (instance["ref"], instance["state"], instance["updated_seq"]) == (ref, "live", seq)
    assert [i["ref"] for i in history(client, ref)] == [ref]
    assert listed(client, PARTITIONS, "ref", prefix=ref) == [ref]
    assert listed(client, WANTS, "want_id", ref=ref) == [created["want_id"]]
    assert ok(client.get(f"{WANTS}/{created['want_id']}"))["refs"] == [ref]


def test_taint_then_taint_again_conflicts(api_server: ApiServer) -> None:
    """Taint replaces a Live instance by a Missing one; tainting that again is a 409 that appends nothing."""
    client = api_server.client
    ref = "src/t"
    observe(client, ref, "/data/t")
    live = canonical(client, ref)
    tainted = ok(client.post(f"{PARTITIONS}/taint", json={"ref": ref, "reason": "bad rows"}), 201)
    assert tainted == {"seq": head_seq(client)}
    old = ok(client.get(f"{API}/instances/{live['uuid']}"))
    assert (old["state"], old["note"], old["canonical"], old["superseded_seq"]) == (
        "tainted",
        "bad rows",
        False,
        tainted["seq"],
    )
    now = canonical(client, ref)
    assert (now["state"], now["previous_uuid"], now["created_seq"]) == ("missing", live["uuid"], tainted["seq"])
    assert [i["state"] for i in history(client, ref)] == ["missing", "tainted"]

    before = head_seq(client)
    problem(client.post(f"{PARTITIONS}/taint", json={"ref": ref}), 409, ref, "missing")
    problem(client.post(f"{PARTITIONS}/taint", json={"ref": "src/never"}), 404, "src/never")
    assert head_seq(client) == before


def test_list_partitions_by_prefix_and_state_with_cursor_paging(api_server: ApiServer) -> None:
    """Canonical instances by ref, under a prefix and in a state, walked page by page without gaps."""
    client = api_server.client
    live = [f"src/p/n={n:02d}" for n in range(12)]
    for ref in live:
        observe(client, ref, f"/data/{ref}")
    missing = ["src/q/n=0", "src/q/n=1", "src/q/n=2"]
    want(client, missing)
    observe(client, "src/pa", "/data/pa")  # "src/p/" is a prefix of the twelve, not of this one
    everything = sorted([*live, *missing, "src/pa"])

    for limit in (1, 5, 16, 1_000):
        assert listed(client, PARTITIONS, "ref", limit=limit) == everything
        assert listed(client, PARTITIONS, "ref", limit=limit, prefix="src/p/") == live
    assert listed(client, PARTITIONS, "ref", limit=2, prefix="src/", state="missing") == missing
    assert listed(client, PARTITIONS, "ref", limit=4, state="live") == sorted([*live, "src/pa"])
    assert listed(client, PARTITIONS, "ref", prefix="src/q/", state="live") == []
    assert walk(client, PARTITIONS, 10, prefix="nothing/") == [[]]
    # A page resumes right after the ref its cursor names.
    first = ok(client.get(PARTITIONS, params={"prefix": "src/p/", "limit": 5}))
    assert first["next_cursor"] == live[4]
    second = ok(client.get(PARTITIONS, params={"prefix": "src/p/", "limit": 5, "cursor": first["next_cursor"]}))
    assert [i["ref"] for i in second["items"]] == live[5:10]


def test_retention_previews_then_drops_superseded_instances(api_server: ApiServer) -> None:
    """A dry run lists what would go and appends nothing; the real run drops only superseded instances."""
    client = api_server.client
    observe(client, "r/1", "/data/v1")
    old = canonical(client, "r/1")["uuid"]
    observe(client, "r/1", "/data/v2")  # a new version supersedes the first instance
    new = canonical(client, "r/1")["uuid"]
    before = head_seq(client)

    nothing_old = ok(client.post(f"{API}/retention", json={"retain_days": 1}))
    assert (nothing_old["dropped"], nothing_old["seq"]) == (0, None)
    preview = ok(client.post(f"{API}/retention", json={"retain_days": 0, "dry_run": True}))
    assert (preview["dropped"], preview["instances"], preview["seq"]) == (1, [old], None)
    assert head_seq(client) == before

    done = ok(client.post(f"{API}/retention", json={"retain_days": 0}))
    assert (done["dropped"], done["instances"], done["seq"]) == (1, [old], before + 1)
    problem(client.get(f"{API}/instances/{old}", params={"min_seq": done["seq"]}), 404, old)
    assert [i["uuid"] for i in ok(client.get(f"{PARTITIONS}/history/r/1"))] == [new]
    # Retention drops the history of what it drops: the past no longer knows the instance, nor the ref's pointer.
    problem(client.get(f"{API}/instances/{old}", params={"as_of_seq": before}), 404, old)
    problem(client.get(f"{PARTITIONS}/canonical/r/1", params={"as_of_seq": before - 1}), 410, "dropped by retention")
    problem(client.post(f"{API}/retention", json={"retain_days": "0"}), 422, "body.retain_days")


def test_retention_keeps_days_of_history_so_as_of_reads_in_the_window_find_the_canonical_instance(
    db_url: str,
) -> None:
    """Retention counts from when an instance stopped being canonical: one created long ago but canonical until
    inside the window is kept, and every read as of a seq in the window answers it (never 410 Gone); one
    superseded before the window is dropped (410 as of a seq it was canonical at)."""
    clock = {"now_ms": 0}
    with (
        Database.open(db_url, auto_upgrade=True) as db,
        serve_service(Service(db, clock=lambda: clock["now_ms"])) as api,
    ):
        client = api.client
        created = observe(client, "r/long", "/data/long/v1")  # canonical for a long time
        long1 = canonical(client, "r/long", min_seq=created)["uuid"]
        observe(client, "r/short", "/data/short/v1")
        short1 = canonical(client, "r/short", min_seq=created + 1)["uuid"]
        observe(client, "r/short", "/data/short/v2")  # superseded before the window
        last_old = api.log.read(head_seq(client) - 1, 1)[0].recorded_at_ms
        while wall_clock_ms() <= last_old:
            time.sleep(0.002)
        window_start_ms = wall_clock_ms()  # "N days ago"
        superseded = observe(client, "r/long", "/data/long/v2")  # inside the window
        observe(client, "r/other", "/data/other")
        clock["now_ms"] = window_start_ms + DAY_MS

        done = ok(client.post(f"{API}/retention", json={"retain_days": 1}))
        assert (done["cutoff_seq"], done["dropped"], done["instances"]) == (superseded, 1, [short1])
        for seq in range(superseded - 1, done["seq"] + 1):  # the window: as of any seq in it, no 410
            then = canonical(client, "r/long", as_of_seq=seq)
            assert then["uuid"] == (long1 if seq < superseded else canonical(client, "r/long")["uuid"])
        assert canonical(client, "r/long", as_of_seq=created)["uuid"] == long1  # its whole life, in fact
        gone = client.get(f"{PARTITIONS}/canonical/r/short", params={"as_of_seq": created + 1})
        problem(gone, 410, "dropped by retention")


def test_list_partitions_as_of_a_seq_lists_the_refs_and_instances_of_then(sqlite_url: str) -> None:
    """Refs appear in the list as of the seq their first instance came; each with its canonical instance then,
    filtered by its state then; a cursor pages the same as-of list. A server started after retention dropped
    a ref's first instance answers 410 as of a seq that instance was canonical at, and lists the ref after."""
    with graphless_api_server(sqlite_url) as api:
        client = api.client
        first = observe(client, "src/b", "/data/b1", version={"value": "v1"})
        wanted = want(client, ["agg/a", "src/c"])["seq"]
        second = observe(client, "src/b", "/data/b2", version={"value": "v2"})  # a new instance of src/b
        later = observe(client, "src/a", "/data/a")

        def page(**params: Any) -> list[tuple[str, str]]:
            found = ok(client.get(PARTITIONS, params=params))
            assert found["as_of_seq"] == params.get("as_of_seq", later)
            return [(i["ref"], i["state"]) for i in found["items"]]

        assert page(as_of_seq=0) == []
        assert page(as_of_seq=first) == [("src/b", "live")]
        assert page(as_of_seq=wanted) == [("agg/a", "missing"), ("src/b", "live"), ("src/c", "missing")]
        assert page() == [("agg/a", "missing"), ("src/a", "live"), ("src/b", "live"), ("src/c", "missing")]
        assert page(as_of_seq=wanted, prefix="src/", state="missing") == [("src/c", "missing")]
        assert page(as_of_seq=wanted, prefix="src/a") == []
        old = ok(client.get(PARTITIONS, params={"as_of_seq": wanted, "prefix": "src/b"}))["items"][0]
        assert (old["location"], old["created_seq"], old["canonical"]) == ("/data/b1", first, True)
        new = ok(client.get(PARTITIONS, params={"as_of_seq": second, "prefix": "src/b"}))["items"][0]
        assert (new["location"], new["previous_uuid"]) == ("/data/b2", old["uuid"])
        assert listed(client, PARTITIONS, "ref", limit=1, as_of_seq=second) == ["agg/a", "src/b", "src/c"]
        problem(client.get(PARTITIONS, params={"as_of_seq": second, "cursor": "src/a"}), 404, "cursor")
        problem(client.get(PARTITIONS, params={"as_of_seq": later + 1}), 409, "is after the log head")
        for bad in (-1, "soon", "1e3"):
            problem(client.get(PARTITIONS, params={"as_of_seq": bad}), 422, "query.as_of_seq")
        dropped = ok(client.post(f"{API}/retention", json={"retain_days": 0}))
        assert dropped["instances"] == [old["uuid"]]
    with graphless_api_server(sqlite_url) as restarted:
        # Retention drops the history of what it drops: a page that would show the dropped instance is a 410;
        # after the seq its successor became canonical, the ref lists as before.
        problem(restarted.client.get(PARTITIONS, params={"as_of_seq": first}), 410, "dropped by retention")
        problem(restarted.client.get(PARTITIONS, params={"as_of_seq": wanted}), 410, "dropped by retention")
        assert listed(restarted.client, PARTITIONS, "ref", as_of_seq=second) == ["agg/a", "src/b", "src/c"]


def test_an_instance_answer_shows_its_checks_as_of_the_outcome_that_recorded_them(
    api_server: ApiServer, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 24: the checks of the last outcome that checked an instance, with that outcome's seq; none before it;
    the CLI prints them (passed, warning, failed, errored)."""
    from partbuild.proto.v1 import events_pb2 as pb
    from partbuild.state.log.events import envelope, from_job_run, system

    from clikit import run_cli

    client = api_server.client
    want(client, ["d/1"], want_id="w")
    uuid = canonical(client, "d/1")["uuid"]

    def append(payload: Any, source: Any) -> int:
        return api_server.log.append([envelope(payload, source=source)]).first_seq

    append(pb.JobRunBuffer(job_run_id="r1", job_label="d", instance_uuids=[uuid]), system("orchestrator"))
    results = [
        pb.CheckResult(name="rows_nonzero", passed=True, blocking=True, description="5 rows", metrics={"rows": 5}),
        pb.CheckResult(name="url_not_null", passed=False, blocking=False, description="nulls in url: 2"),
    ]
    checked = pb.InstanceChecks(instance_uuid=uuid, results=results)
    seq = append(pb.JobRunSuccess(job_run_id="r1", checks=[checked]), from_job_run("r1"))
    now = ok(client.get(f"{API}/instances/{uuid}", params={"min_seq": seq}))
    assert now["state"] == "live" and now["checks"] == [
        {
            "name": "rows_nonzero",
            "result": "passed",
            "passed": True,
            "blocking": True,
            "errored": False,
            "description": "5 rows",
            "metrics": {"rows": 5.0},
            "seq": seq,
            "duration_ms": None,
        },
        {
            "name": "url_not_null",
            "result": "warning",
            "passed": False,
            "blocking": False,
            "errored": False,
            "description": "nulls in url: 2",
            "metrics": {},
            "seq": seq,
            "duration_ms": None,
        },
    ]
    assert canonical(client, "d/1")["checks"] == now["checks"] == history(client, "d/1")[0]["checks"]
    before = ok(client.get(f"{API}/instances/{uuid}", params={"as_of_seq": seq - 1}))
    assert before["state"] == "building" and before["checks"] == []
    assert ok(client.get(f"{API}/instances/{uuid}", params={"as_of_seq": seq}))["checks"] == now["checks"]
    code, out, _ = run_cli(capsys, "partitions", "instance", uuid, "--server", api_server.url)
    assert code == 0 and "passed rows_nonzero" in out and "warning url_not_null" in out
    code, out, _ = run_cli(capsys, "partitions", "instance", uuid, "--server", api_server.url, "--as-of", str(seq - 1))
    assert code == 0 and "rows_nonzero" not in out


def live_daily(api_server: ApiServer) -> tuple[str, str]:
    """A source partition and a daily built from it, Live (the events an orchestrator would append): their UUIDs."""
    from partbuild.proto.v1 import events_pb2 as pb
    from partbuild.state.log.events import envelope, from_job_run, system

    client = api_server.client
    observe(client, "src/a", "/data/a")
    want(client, ["d/1"], want_id="w")
    raw, uuid = canonical(client, "src/a")["uuid"], canonical(client, "d/1")["uuid"]
    api_server.log.append(
        [
            envelope(pb.JobRunBuffer(job_run_id="r1", job_label="d", instance_uuids=[uuid]), source=system("o")),
            envelope(pb.JobRunSuccess(job_run_id="r1", input_instance_uuids=[raw]), source=from_job_run("r1")),
        ]
    )
    return raw, uuid


def test_checks_run_again_on_request_pending_until_answered_and_a_blocking_failure_taints(
    api_server: ApiServer,
) -> None:
    """Issue 24: POST /instances/{uuid}/checks records a request (202) the instance shows as pending; once an
    orchestrator answers (here: its events appended by hand), the instance shows the results and the taint; as of the
    request's seq it is still pending. A second request while one is pending, a source or unknown instance, a
    tainted one, or a body with an unknown field is refused and appends nothing."""
    from partbuild.proto.v1 import events_pb2 as pb
    from partbuild.state.log.events import envelope, system

    client = api_server.client
    raw, uuid = live_daily(api_server)
    asked = ok(client.post(f"{API}/instances/{uuid}/checks", json={"comment": "new check"}), 202)
    assert set(asked) == {"seq", "request_id", "instance_uuid", "link"} and asked["instance_uuid"] == uuid
    shown = ok(client.get(asked["link"]))
    assert shown["checks_requests"] == [
        {"request_id": asked["request_id"], "requested_seq": asked["seq"], "answered_seq": None}
    ]
    before = head_seq(client)
    problem(client.post(f"{API}/instances/{uuid}/checks"), 409, "already requested", asked["request_id"])
    problem(client.post(f"{API}/instances/{raw}/checks"), 409, "source data")
    problem(client.post(f"{API}/instances/nope/checks"), 404, "nope")
    problem(client.post(f"{API}/instances/{uuid}/checks", json={"comment": "x", "extra": 1}), 422, "extra")
    assert head_seq(client) == before

    failed = pb.CheckResult(name="rows_nonzero", passed=False, blocking=True, description="0 rows")
    answer = pb.ChecksRerun(
        request_id=asked["request_id"], checks=pb.InstanceChecks(instance_uuid=uuid, results=[failed])
    )
    taint = pb.PartitionTaint(
        partition_ref="d/1", reason="check rows_nonzero failed on d/1: 0 rows", instance_uuid=uuid
    )
    written = api_server.log.append([envelope(answer, source=system("o")), envelope(taint, source=system("o"))])
    now = ok(client.get(f"{API}/instances/{uuid}", params={"min_seq": written.last_seq}))
    assert (now["state"], now["note"]) == ("tainted", "check rows_nonzero failed on d/1: 0 rows")
    assert now["checks_requests"][0]["answered_seq"] == written.first_seq
    assert [(c["name"], c["passed"], c["seq"]) for c in now["checks"]] == [("rows_nonzero", False, written.first_seq)]
    then = ok(client.get(f"{API}/instances/{uuid}", params={"as_of_seq": asked["seq"]}))
    assert then["state"] == "live" and then["checks"] == [] and then["checks_requests"][0]["answered_seq"] is None
    assert ok(client.get(f"{API}/instances/{uuid}", params={"as_of_seq": asked["seq"] - 1}))["checks_requests"] == []
    problem(client.post(f"{API}/instances/{uuid}/checks"), 409, "tainted")


def test_checks_cannot_run_again_for_a_job_of_the_graph_that_declares_none(sqlite_url: str) -> None:
    """With a graph, the service knows a job without checks: a 409 naming the job, nothing appended."""
    from partbuild.orchestrator.graph import Graph, Job, SourceDataset

    graph = Graph(
        [Job("d", ["d/{n:int}"], lambda ctx: None)], [SourceDataset("src", "src/{name}", locate=lambda p: None)]
    )
    with Database.open(sqlite_url, auto_upgrade=True) as db, serve_service(Service(db, graph=graph)) as api:
        _, uuid = live_daily(api)
        before = head_seq(api.client)
        problem(api.client.post(f"{API}/instances/{uuid}/checks"), 409, "job 'd' declares no checks")
        assert head_seq(api.client) == before


def test_a_stale_instance_serves_with_its_successor_as_of_any_seq_over_http_and_the_cli(
    api_server: ApiServer, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 34, over the outcomes golden log: x/1 is stale from seq 20 (new raw data) and its successor fails at 23;
    readers get the first instance, marked stale with its successor's state, until the successor goes Live at 26."""
    client = api_server.client
    api_server.log.append(outcome_events())
    head = len(outcome_events())

    def read(seq: int) -> dict[str, Any]:
        return canonical(client, "x/1", as_of_seq=seq, min_seq=head)

    before, stale, blocked, switched = read(19), read(20), read(23), read(26)
    assert (before["serving"], before["stale"], before["successor"]) == (True, False, None)
    assert stale["uuid"] == blocked["uuid"] == before["uuid"] and stale["stale"] and stale["serving"]
    assert stale["note"].startswith("stale: upstream raw/1 has new data (observed at seq 20)")
    assert (stale["successor"]["state"], blocked["successor"]["state"]) == ("missing", "up_for_retry")
    assert blocked["successor"]["note"] == "late" and blocked["location"] == before["location"]
    assert switched["uuid"] == blocked["successor"]["uuid"] and switched["serving"] and not switched["stale"]
    code, out, _ = run_cli(capsys, "partitions", "show", "x/1", "--as-of", "23", "--server", api_server.url)
    assert code == 0 and "yes, stale: until its successor" in out and "up_for_retry: late" in out
    # d/1 was withdrawn by a person while it was stale: nothing to read, its canonical (Missing) answers.
    withdrawn = canonical(client, "d/1", min_seq=head)
    assert (withdrawn["state"], withdrawn["serving"], withdrawn["location"]) == ("missing", False, None)
    page = client.get("/instances/" + stale["uuid"], params={"as_of": 23}).text
    assert 'data-testid="instance-successor"' in page and blocked["successor"]["uuid"] in page
