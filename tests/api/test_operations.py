"""Operations over HTTP: counts by state (waiting instances no active want needs), bucket layouts and re-sharding
them, /healthz and /metrics."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from httpkit import API, PARTITIONS, WANTS, head_seq, listed, observe, ok, problem, want
from serverkit import ApiServer


def test_reshard_then_bucket_layouts_as_of_any_seq(api_server: ApiServer) -> None:
    """A re-shard fixes a namespace's bucket total; asking for the same total again is a 409 that appends nothing."""
    client = api_server.client
    assert ok(client.get(f"{API}/buckets")) == []
    first = ok(client.post(f"{API}/buckets/layout", json={"bucket_total": 3}))["seq"]
    second = ok(client.post(f"{API}/buckets/layout", json={"bucket_total": 4, "namespace": "clicks"}))["seq"]
    assert ok(client.get(f"{API}/buckets", params={"min_seq": second})) == [
        {"namespace": "clicks", "bucket_total": 4, "since_seq": second, "last_round_robin_bucket": None},
        {"namespace": "partbuild", "bucket_total": 3, "since_seq": first, "last_round_robin_bucket": None},
    ]
    assert [layout["namespace"] for layout in ok(client.get(f"{API}/buckets", params={"as_of_seq": first}))] == [
        "partbuild"
    ]
    problem(client.post(f"{API}/buckets/layout", json={"bucket_total": 3}), 409, "already split into 3 buckets")
    problem(client.post(f"{API}/buckets/layout", json={"bucket_total": "5"}), 422, "body.bucket_total")
    problem(client.post(f"{API}/buckets/layout", json={"bucket_total": 0}), 422, "body.bucket_total")
    problem(client.post(f"{API}/buckets/layout", json={"bucket_total": 2**31 + 1}), 422, "body.bucket_total")
    problem(client.post(f"{API}/buckets/layout", json={"bucket_total": 2, "namespace": "a/b"}), 422, "body.namespace")
    assert head_seq(client) == second


def test_counts_say_how_many_waiting_instances_no_active_want_needs(api_server: ApiServer) -> None:
    """A canceled want leaves its Missing instances counted apart, listed by `unwanted`; a new want takes one back."""
    client = api_server.client
    kept = want(client, ["c/1"])
    gone = want(client, ["c/2", "c/3"])
    observe(client, "c/src", "/data/c")
    canceled = ok(client.post(f"{WANTS}/{gone['want_id']}/cancel"))["seq"]
    counts = ok(client.get(f"{API}/counts", params={"min_seq": canceled}))
    assert counts["seq"] == canceled and counts["instances"]["missing"] == 3 and counts["instances"]["live"] == 1
    assert counts["wants"]["idle"] == 1 and counts["wants"]["canceled"] == 1 and counts["job_runs"]["queued"] == 0
    assert counts["waiting"] == {
        "missing": {"total": 3, "wanted": 1, "unwanted": 2},
        "upstream_building": {"total": 0, "wanted": 0, "unwanted": 0},
        "up_for_retry": {"total": 0, "wanted": 0, "unwanted": 0},
    }
    assert listed(client, PARTITIONS, "ref", unwanted="true") == ["c/2", "c/3"]
    assert listed(client, PARTITIONS, "ref", unwanted="true", state="live") == []

    again = want(client, ["c/3"])["seq"]
    assert ok(client.get(f"{API}/counts"))["waiting"]["missing"] == {"total": 3, "wanted": 2, "unwanted": 1}
    assert listed(client, PARTITIONS, "ref", unwanted="true") == ["c/2"]
    # As of a seq: what the log said then (before the cancel, every Missing instance was wanted).
    before = ok(client.get(f"{API}/counts", params={"as_of_seq": canceled - 1}))
    assert before["seq"] == canceled - 1 and before["waiting"]["missing"] == {"total": 3, "wanted": 3, "unwanted": 0}
    assert listed(client, PARTITIONS, "ref", unwanted="true", as_of_seq=canceled) == ["c/2", "c/3"]
    assert kept["seq"] < again
    problem(client.get(f"{API}/counts", params={"as_of_seq": -1}), 422, "as_of_seq")
    problem(client.get(PARTITIONS, params={"unwanted": "perhaps"}), 422, "unwanted")


def test_healthz_and_metrics(api_server: ApiServer) -> None:
    """/healthz reports the log head and the served state; /metrics the state gauges and latency histograms."""
    client = api_server.client
    assert ok(client.get("/healthz")) == {"status": "ok", "head_seq": 0, "state_seq": 0, "orchestrator": None}
    want(client, ["m/1"])
    want(client, ["m/2"])
    ok(client.post(f"{WANTS}/{want(client, ['m/3'])['want_id']}/cancel"))
    observe(client, "m/src", "/data/m")
    assert ok(client.get("/healthz")) == {"status": "ok", "head_seq": 5, "state_seq": 5, "orchestrator": None}

    response = client.get("/metrics")
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/plain")
    assert 'partbuild_wants{state="idle"} 2.0' in response.text
    families = {family.name: family for family in text_string_to_metric_families(response.text)}

    def by_state(name: str) -> dict[str, float]:
        return {s.labels["state"]: s.value for s in families[name].samples if s.value}

    assert by_state("partbuild_wants") == {"idle": 2, "canceled": 1}
    assert by_state("partbuild_instances") == {"missing": 3, "live": 1}
    assert by_state("partbuild_job_runs") == {}
    assert {s.labels["state"] for s in families["partbuild_job_runs"].samples} == {
        "queued",
        "running",
        "succeeded",
        "failed",
        "dep_miss",
        "canceled",
    }
    assert [s.value for s in families["partbuild_log_head_seq"].samples] == [5]

    def histogram(name: str) -> dict[str, float]:
        assert families[name].type == "histogram"
        return {s.name.removeprefix(name): s.value for s in families[name].samples if s.name != f"{name}_bucket"}

    appends = histogram("partbuild_append_seconds")
    assert appends["_count"] == 5 and appends["_sum"] > 0  # one append per write
    catch_up = histogram("partbuild_catch_up_seconds")
    assert 1 <= catch_up["_count"] <= 5 and catch_up["_sum"] > 0
