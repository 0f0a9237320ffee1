"""The HTTP API through a real uvicorn server, with httpx only: every endpoint, bad input, consistency, W1.

Servers come from conftest: `api_server` (graph-less, SQLite), `db_api_server` (graph-less, on
SQLite and PostgreSQL) and `w1_api_server` (the W1 graph with an orchestrator running in the
background, on real Spark). Tests talk to them over HTTP only.

The contract checked throughout: a success is `application/json`; every error is
`application/problem+json` `{type, title, status, detail}` whose detail names what was wrong;
bad input is a 4xx (never a 5xx) and changes nothing (the log head from GET /healthz is the
same before and after).

Cases that pin a known bug carry `xfail(strict=True)` with the reason (via `bad(..., xfail=...)`), so
each turns red once its bug is fixed and the marker can go; none is open now.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from examples.clicks.pipeline import (
    build_graph,
    daily_ref,
    days_in_range,
    raw_ref,
    week_days_in_range,
    weekly_ref,
    weeks_in_range,
)
from partbuild.api.service import Service
from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.database import Database
from partbuild.state.log.events import envelope

from groupapikit import GROUP, append_group_history
from serverkit import ApiServer, graphless_api_server, serve_service
from sparkkit import CLICKS_DAYS, CLICKS_START

API = "/api/v1"
WANTS = f"{API}/wants"
PARTITIONS = f"{API}/partitions"
JSON = "application/json"
PROBLEM_JSON = "application/problem+json"

# Every operation of the OpenAPI document, and the test here that exercises it over HTTP.
COVERED: dict[tuple[str, str], str] = {
    ("POST", "/api/v1/wants"): "test_create_want_and_get_it",
    ("POST", "/api/v1/wants/batch"): "test_batch_of_wants_is_one_append",
    ("POST", "/api/v1/wants/batch/validate"): "test_validate_batch_checks_as_create_would_and_records_nothing",
    ("GET", "/api/v1/wants"): "test_list_wants_by_state_ref_and_root",
    ("GET", "/api/v1/wants/{want_id}"): "test_create_want_and_get_it",
    ("POST", "/api/v1/wants/{want_id}/cancel"): "test_cancel_want_then_cancel_again_conflicts",
    ("GET", "/api/v1/partitions"): "test_list_partitions_by_prefix_and_state_with_cursor_paging",
    ("GET", "/api/v1/partitions/canonical/{ref}"): "test_observe_then_canonical_history_and_instance_as_of_seq",
    ("GET", "/api/v1/partitions/history/{ref}"): "test_observe_then_canonical_history_and_instance_as_of_seq",
    ("POST", "/api/v1/partitions/taint"): "test_taint_then_taint_again_conflicts",
    ("POST", "/api/v1/partitions/observe"): "test_observe_then_canonical_history_and_instance_as_of_seq",
    ("GET", "/api/v1/instances/{uuid}"): "test_observe_then_canonical_history_and_instance_as_of_seq",
    ("GET", "/api/v1/instances/{uuid}/lineage"): "test_w1_weekly_wants_build_over_http",
    ("GET", "/api/v1/job-runs"): "test_w1_weekly_wants_build_over_http",
    ("GET", "/api/v1/job-runs/{job_run_id}"): "test_w1_weekly_wants_build_over_http",
    ("POST", "/api/v1/job-runs/{job_run_id}/cancel"): "test_cancel_job_run_then_cancel_again_conflicts",
    ("POST", "/api/v1/retention"): "test_retention_previews_then_drops_superseded_instances",
    ("GET", "/api/v1/events"): "test_events_are_the_raw_log_paged_by_seq",
    ("POST", "/api/v1/audit"): "test_audit_digest_is_stable_and_lists_rejected_events",
    ("POST", "/api/v1/buckets/layout"): "test_reshard_then_bucket_layouts_as_of_any_seq",
    ("GET", "/api/v1/buckets"): "test_reshard_then_bucket_layouts_as_of_any_seq",
    ("GET", "/api/v1/groups"): "test_worker_group_ownership_as_of_any_seq_and_heartbeats_now",
    ("GET", "/api/v1/group/{name}"): "test_worker_group_ownership_as_of_any_seq_and_heartbeats_now",
    ("GET", "/api/v1/sources"): "test_sources_show_scans_redacted_and_a_scan_request_makes_a_pass_due",
    ("POST", "/api/v1/sources/{name}/scan"): "test_sources_show_scans_redacted_and_a_scan_request_makes_a_pass_due",
    ("POST", "/api/v1/subscriptions"): "test_subscription_lifecycle_over_http_never_shows_the_secret",
    ("GET", "/api/v1/subscriptions"): "test_subscription_lifecycle_over_http_never_shows_the_secret",
    ("GET", "/api/v1/subscriptions/{name}"): "test_subscription_lifecycle_over_http_never_shows_the_secret",
    ("POST", "/api/v1/subscriptions/{name}/pause"): "test_subscription_lifecycle_over_http_never_shows_the_secret",
    ("POST", "/api/v1/subscriptions/{name}/resume"): "test_subscription_lifecycle_over_http_never_shows_the_secret",
    ("DELETE", "/api/v1/subscriptions/{name}"): "test_subscription_lifecycle_over_http_never_shows_the_secret",
    ("POST", "/api/v1/subscriptions/{name}/shards"): "test_subscription_reshard_and_offsets_follow_the_fold",
    ("POST", "/api/v1/subscriptions/{name}/offsets"): "test_subscription_reshard_and_offsets_follow_the_fold",
    ("GET", "/api/v1/subscriptions/{name}/dlq"): "test_subscription_dead_letter_routes",
    ("POST", "/api/v1/subscriptions/{name}/dlq/replay"): "test_subscription_dead_letter_routes",
    ("POST", "/api/v1/subscriptions/{name}/dlq/purge"): "test_subscription_dead_letter_routes",
    ("GET", "/healthz"): "test_healthz_and_metrics",
    ("GET", "/metrics"): "test_healthz_and_metrics",
}


# ----------------------------------------------------------------- helpers


def no_server_error(response: httpx.Response) -> None:
    """Fail on a 5xx, without a Python traceback.

    The server thread is formatting the error's traceback at that moment, and on CPython 3.11
    two threads parsing source at once can break `ast.parse` (gh-106905), which pytest needs to
    render a traceback. The server's own log, with its traceback, is in the captured log.
    """
    if response.status_code >= 500:
        request = response.request
        pytest.fail(f"{request.method} {request.url}: {response.status_code} {response.text[:500]}", pytrace=False)


def ok(response: httpx.Response, status: int = 200) -> Any:
    """The JSON body of a successful response, after checking its status and content type."""
    no_server_error(response)
    request = response.request
    assert response.status_code == status, (
        f"{request.method} {request.url}: {response.status_code} {response.text[:500]}"
    )
    assert response.headers["content-type"] == JSON
    return response.json()


def problem(response: httpx.Response, status: int, *words: str) -> str:
    """Check an error is problem+json with `status` and a detail naming each of `words`; returns the detail."""
    no_server_error(response)
    request = response.request
    assert response.status_code == status, (
        f"{request.method} {request.url}: {response.status_code} {response.text[:500]}"
    )
    assert response.headers["content-type"] == PROBLEM_JSON
    body = response.json()
    assert set(body) == {"type", "title", "status", "detail"}, body
    assert body["type"] == "about:blank" and body["status"] == status and body["title"] and body["detail"]
    for word in words:
        assert word.lower() in body["detail"].lower(), f"{word!r} not in the detail {body['detail']!r}"
    return str(body["detail"])


def head_seq(client: httpx.Client) -> int:
    """The log head, as GET /healthz reports it."""
    return int(ok(client.get("/healthz"))["head_seq"])


def ref_path(ref: str) -> str:
    """`ref` as the tail of a URL path: its slashes kept, anything else percent-encoded as needed."""
    return quote(ref, safe="/")


def want(client: httpx.Client, refs: list[str], **fields: Any) -> dict[str, Any]:
    """POST /wants; the WantCreated body."""
    return ok(client.post(WANTS, json={"refs": refs, **fields}), 201)  # type: ignore[no-any-return]


def observe(client: httpx.Client, ref: str, location: str, **fields: Any) -> int:
    """POST /partitions/observe; the seq it landed at."""
    body = ok(client.post(f"{PARTITIONS}/observe", json={"ref": ref, "location": location, **fields}), 201)
    return int(body["seq"])


def canonical(client: httpx.Client, ref: str, **params: Any) -> dict[str, Any]:
    """GET /partitions/canonical/{ref}."""
    return ok(client.get(f"{PARTITIONS}/canonical/{ref_path(ref)}", params=params))  # type: ignore[no-any-return]


def history(client: httpx.Client, ref: str, **params: Any) -> list[dict[str, Any]]:
    """GET /partitions/history/{ref}."""
    return ok(client.get(f"{PARTITIONS}/history/{ref_path(ref)}", params=params))  # type: ignore[no-any-return]


def walk(client: httpx.Client, path: str, limit: int, **params: Any) -> list[list[dict[str, Any]]]:
    """Every page of a cursor-paged list, following `next_cursor` until it is null."""
    pages: list[list[dict[str, Any]]] = []
    cursor: str | None = None
    while True:
        query = {**params, "limit": limit, **({"cursor": cursor} if cursor is not None else {})}
        page = ok(client.get(path, params=query))
        assert set(page) == {"items", "next_cursor"} and len(page["items"]) <= limit
        pages.append(page["items"])
        cursor = page["next_cursor"]
        if cursor is None:
            return pages
        assert len(page["items"]) == limit, "only a full page has a next page"
        assert len(pages) <= 10_000, "paging does not end"


def listed(client: httpx.Client, path: str, key: str, limit: int = 1_000, **params: Any) -> list[Any]:
    """`key` of every item of a cursor-paged list, in order."""
    return [item[key] for page in walk(client, path, limit, **params) for item in page]


def events(client: httpx.Client, limit: int) -> list[dict[str, Any]]:
    """The whole log through GET /events, paged by seq (`next_cursor` is the `after_seq` of the next page)."""
    found: list[dict[str, Any]] = []
    after = 0
    while True:
        page = ok(client.get(f"{API}/events", params={"after_seq": after, "limit": limit}))
        assert len(page["items"]) <= limit
        found += page["items"]
        if page["next_cursor"] is None:
            return found
        after = int(page["next_cursor"])
        assert after == page["items"][-1]["seq"]


# ----------------------------------------------------------------- a server shared by the module

SEEDED_WANT = "seeded-want"
SEEDED_MISSING = "wanted/missing"
SEEDED_LIVE = "src/live"


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApiServer]:
    """A graph-less server for tests that only add refs of their own, or change nothing (bad input).

    Seeded with a want (so its ref is Missing) and a Live source.
    """
    url = f"sqlite:///{tmp_path_factory.mktemp('shared') / 'partbuild.db'}"
    with graphless_api_server(url) as api:
        want(api.client, [SEEDED_MISSING], want_id=SEEDED_WANT)
        observe(api.client, SEEDED_LIVE, "/data/live")
        yield api


def _client(server: ApiServer) -> Iterator[httpx.Client]:
    # A client per test: after a 500 the server closes the connection, which must not leak into the next case.
    with httpx.Client(base_url=server.url, timeout=30) as client:
        yield client


@pytest.fixture
def shared_client(shared: ApiServer) -> Iterator[httpx.Client]:
    """A fresh client of the shared server."""
    yield from _client(shared)


# ----------------------------------------------------------------- the document


def test_openapi_document_operations_are_all_covered_here(shared_client: httpx.Client) -> None:
    """Every operation the server documents has a test in this module (and the table names real tests)."""
    document = ok(shared_client.get("/openapi.json"))
    operations = {(method.upper(), path) for path, item in document["paths"].items() for method in item}
    assert operations == set(COVERED)
    assert {name for name in COVERED.values() if not callable(globals().get(name))} == set()


def test_docs_page_is_html(shared_client: httpx.Client) -> None:
    """/docs is the interactive documentation over the served document."""
    response = shared_client.get("/docs")
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/html")
    assert "swagger" in response.text.lower() and "/openapi.json" in response.text


# ----------------------------------------------------------------- wants


def test_create_want_and_get_it(db_api_server: ApiServer) -> None:
    """201 with the seq it landed at, state idle; GET shows every field, where each ref stands, and its tree."""
    client = db_api_server.client
    before = head_seq(client)
    data_ms = int(time.time() * 1000) - 600_000  # ten minutes ago: a 60 s SLA is breached, a day's TTL is not over
    body = {
        "refs": ["agg/a/x=1", "src/b"],
        "want_id": "w-1",
        "comment": "first",
        "ttl_seconds": 86_400,
        "sla_seconds": 60,
        "data_timestamp_ms": data_ms,
    }
    created = ok(client.post(WANTS, json=body, headers={"X-Partbuild-User": "ann"}), 201)
    assert created == {"want_id": "w-1", "seq": before + 1, "state": "idle"}
    assert head_seq(client) == created["seq"]

    got = ok(client.get(f"{WANTS}/w-1", params={"min_seq": created["seq"]}))
    statuses = got.pop("refs_status")
    assert got.pop("created_ms") > 0
    assert got == {
        "want_id": "w-1",
        "refs": ["agg/a/x=1", "src/b"],
        "state": "idle",
        "created_seq": created["seq"],
        "updated_seq": created["seq"],
        "data_timestamp_ms": data_ms,
        "ttl_seconds": 86_400,
        "sla_seconds": 60,
        "expires_at_ms": data_ms + 86_400_000,
        "sla_deadline_ms": data_ms + 60_000,
        "sla_breached": True,
        "comment": "first",
        "source": "manual:ann",
        "parent_want_id": None,
        "root_want_id": "w-1",
        "children": [],
        "satisfied_by": [],
        "cancel_reason": None,
        "tree": {"want_id": "w-1", "state": "idle", "refs": ["agg/a/x=1", "src/b"], "children": []},
    }
    assert [(s["ref"], s["state"], s["waiting_on"]) for s in statuses] == [
        ("agg/a/x=1", "missing", []),
        ("src/b", "missing", []),
    ]
    # Each ref's status names its canonical instance.
    for status in statuses:
        instance = ok(client.get(f"{API}/instances/{status['instance_uuid']}"))
        assert (instance["ref"], instance["state"], instance["canonical"]) == (status["ref"], "missing", True)

    # Without an id, the want gets a fresh one; without a user header, the source is anonymous.
    generated = want(client, ["src/c"])
    assert re.fullmatch(r"want-[0-9a-f]{32}", generated["want_id"]) and generated["seq"] == created["seq"] + 1
    assert ok(client.get(f"{WANTS}/{generated['want_id']}"))["source"] == "manual:anonymous"


def test_batch_of_wants_is_one_append(db_api_server: ApiServer) -> None:
    """A batch lands as consecutive seqs in one append; one bad want and none of the batch is recorded."""
    client = db_api_server.client
    before = head_seq(client)
    body = {
        "wants": [{"refs": ["b/1"], "want_id": "b-1"}, {"refs": ["b/2", "b/3"], "comment": "two"}, {"refs": ["b/1"]}]
    }
    created = ok(client.post(f"{WANTS}/batch", json=body), 201)
    assert (created["first_seq"], created["last_seq"]) == (before + 1, before + 3)
    assert [w["seq"] for w in created["wants"]] == [before + 1, before + 2, before + 3]
    assert created["wants"][0]["want_id"] == "b-1" and {w["state"] for w in created["wants"]} == {"idle"}
    assert head_seq(client) == created["last_seq"]
    got = [ok(client.get(f"{WANTS}/{w['want_id']}")) for w in created["wants"]]
    assert [w["refs"] for w in got] == [["b/1"], ["b/2", "b/3"], ["b/1"]]
    assert got[1]["comment"] == "two"
    # Two wants of one ref share its canonical instance.
    assert got[0]["refs_status"][0]["instance_uuid"] == got[2]["refs_status"][0]["instance_uuid"]

    refused = {"wants": [{"refs": ["b/4"], "want_id": "b-4"}, {"refs": ["b/5"], "want_id": "b-1"}]}
    problem(client.post(f"{WANTS}/batch", json=refused), 409, "b-1", "already exists")
    problem(client.get(f"{WANTS}/b-4"), 404, "b-4")
    assert head_seq(client) == created["last_seq"]


def test_validate_batch_checks_as_create_would_and_records_nothing(api_server: ApiServer) -> None:
    """/wants/batch/validate accepts what /wants/batch would and refuses the rest alike, appending nothing."""
    client = api_server.client
    want(client, ["v/1"], want_id="v-1")
    before = head_seq(client)
    body = {"wants": [{"refs": ["v/2", "v/3"], "want_id": "v-2"}, {"refs": ["v/4"]}]}
    assert ok(client.post(f"{WANTS}/batch/validate", json=body)) == {"wants": 2, "refs": 3}
    assert head_seq(client) == before
    problem(client.get(f"{WANTS}/v-2"), 404, "v-2")

    refused: list[tuple[dict[str, Any], int, str]] = [
        ({"wants": [{"refs": ["x"], "want_id": "v-1"}]}, 409, "v-1"),
        ({"wants": [{"refs": ["x"], "want_id": "v-9"}, {"refs": ["y"], "want_id": "v-9"}]}, 409, "v-9"),
        ({"wants": [{"refs": ["x", "y", "x"]}]}, 422, "more than once"),
        ({"wants": [{"refs": [f"r/{n}" for n in range(10_001)]}]}, 413, "10001"),
        ({"wants": [{"refs": ["ok"]}, {"refs": ["a\x00b"]}]}, 422, "body.wants.1.refs.0"),
        ({"wants": []}, 422, "body.wants"),
    ]
    for bad_body, status, word in refused:
        validated = problem(client.post(f"{WANTS}/batch/validate", json=bad_body), status, word)
        assert problem(client.post(f"{WANTS}/batch", json=bad_body), status, word) == validated
    assert head_seq(client) == before

    created = ok(client.post(f"{WANTS}/batch", json=body), 201)
    assert (created["first_seq"], created["last_seq"]) == (before + 1, before + 2)
    problem(client.post(f"{WANTS}/batch/validate", json=body), 409, "v-2", "already exists")


def test_list_wants_by_state_ref_and_root(api_server: ApiServer) -> None:
    """Wants list oldest first; filters by state, by a ref they name, by root want, and combined."""
    client = api_server.client
    for n in range(4):
        want(client, [f"l/{n}", "l/shared"], want_id=f"l-{n}")
    want(client, ["l/other"], want_id="l-other")
    ok(client.post(f"{WANTS}/l-1/cancel", json={"reason": "not needed"}))

    assert listed(client, WANTS, "want_id") == ["l-0", "l-1", "l-2", "l-3", "l-other"]
    assert listed(client, WANTS, "want_id", state="canceled") == ["l-1"]
    assert listed(client, WANTS, "want_id", state="idle") == ["l-0", "l-2", "l-3", "l-other"]
    assert listed(client, WANTS, "want_id", state="successful") == []
    assert listed(client, WANTS, "want_id", ref="l/shared") == ["l-0", "l-1", "l-2", "l-3"]
    assert listed(client, WANTS, "want_id", ref="l/other") == ["l-other"]
    assert listed(client, WANTS, "want_id", ref="l/nothing") == []
    assert listed(client, WANTS, "want_id", ref="l/shared", state="idle") == ["l-0", "l-2", "l-3"]
    # A want made by hand is its own root (derivative wants: see the W1 test).
    assert listed(client, WANTS, "want_id", root="l-2") == ["l-2"]
    assert listed(client, WANTS, "want_id", root="nobody") == []
    assert listed(client, WANTS, "cancel_reason", state="canceled") == ["not needed"]


def test_list_wants_pages_by_cursor_without_gaps_or_duplicates(db_api_server: ApiServer) -> None:
    """Walking every page, at any page size and with any filter, yields each want once, in order."""
    client = db_api_server.client
    refs = [[f"p/{n:02d}", "p/shared" if n % 2 else f"p/even/{n}"] for n in range(25)]
    batch = {"wants": [{"refs": pair, "want_id": f"p-{n:02d}"} for n, pair in enumerate(refs)]}
    ok(client.post(f"{WANTS}/batch", json=batch), 201)
    ok(client.post(f"{WANTS}/p-03/cancel"))
    every = [f"p-{n:02d}" for n in range(25)]
    for limit in (1, 7, 25, 1_000):
        pages = walk(client, WANTS, limit)
        assert [w["want_id"] for page in pages for w in page] == every
        assert all(len(page) == limit for page in pages[:-1])
    assert listed(client, WANTS, "want_id", limit=4, ref="p/shared") == [f"p-{n:02d}" for n in range(1, 25, 2)]
    assert listed(client, WANTS, "want_id", limit=6, state="idle") == [w for w in every if w != "p-03"]
    assert listed(client, WANTS, "want_id", limit=2, state="canceled") == ["p-03"]


def test_cancel_want_then_cancel_again_conflicts(api_server: ApiServer) -> None:
    """Cancel records the reason; cancelling a canceled want is a 409 that appends nothing."""
    client = api_server.client
    created = want(client, ["c/1"], want_id="c-1")
    canceled = ok(client.post(f"{WANTS}/c-1/cancel", json={"reason": "changed my mind"}))
    assert canceled == {"seq": created["seq"] + 1}
    got = ok(client.get(f"{WANTS}/c-1"))
    assert (got["state"], got["cancel_reason"], got["updated_seq"]) == ("canceled", "changed my mind", canceled["seq"])
    assert got["refs_status"][0]["state"] == "missing"

    before = head_seq(client)
    problem(client.post(f"{WANTS}/c-1/cancel"), 409, "c-1", "canceled")
    assert head_seq(client) == before

    want(client, ["c/2"], want_id="c-2")
    ok(client.post(f"{WANTS}/c-2/cancel"))  # no body: the default reason
    assert ok(client.get(f"{WANTS}/c-2"))["cancel_reason"] == "canceled"


# ----------------------------------------------------------------- partitions and instances


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
    node = {"uuid": v2["uuid"], "ref": ref, "state": "live", "depth": 0, "built_by": None}
    assert lineage == {"root": v2["uuid"], "as_of_seq": second_seq, "nodes": [node], "edges": []}


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
    assert ok(client.get(f"{API}/instances/{old}", params={"as_of_seq": before}))["uuid"] == old  # the past keeps it
    problem(client.post(f"{API}/retention", json={"retain_days": "0"}), 422, "body.retain_days")


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


# ----------------------------------------------------------------- worker groups

GROUPS = f"{API}/groups"


def _members(group: dict[str, Any]) -> dict[str, tuple[list[int], list[dict[str, Any]], int, bool | None]]:
    """Task -> (owned, share section, load, live) of a GET /group answer."""
    return {
        member["task_id"]: (
            member["owned"],
            member["share"],
            member["load"],
            member["heartbeat"]["live"] if member["heartbeat"] else None,
        )
        for member in group["members"]
    }


def test_worker_group_ownership_as_of_any_seq_and_heartbeats_now(db_api_server: ApiServer) -> None:
    """Two epochs, a hand-off in flight and heartbeat rows: ownership follows the seq asked, heartbeats are now."""
    client = db_api_server.client
    assert ok(client.get(GROUPS)) == []
    problem(client.get(f"{API}/group/{GROUP}"), 404, "no worker group 'g'")
    history = append_group_history(db_api_server.log, int(time.time() * 1000))
    head = history.head_seq

    summary = ok(client.get(GROUPS, params={"min_seq": head}))
    assert summary == [
        {
            "name": GROUP,
            "namespace": "partbuild",
            "bucket_total": 6,
            "epoch": {"epoch_id": "e2", "number": 2, "seq": history.second_epoch_seq},
            "leader_task_id": "a",
            "members": 3,
            "buckets_without_owner": 1,
        }
    ]
    first = ok(client.get(GROUPS, params={"as_of_seq": history.first_epoch_seq}))
    assert [(g["epoch"]["number"], g["members"], g["buckets_without_owner"]) for g in first] == [(1, 2, 0)]

    now = ok(client.get(f"{API}/group/{GROUP}"))
    assert (now["as_of_seq"], now["epoch"]["epoch_id"], now["leader_task_id"], now["member_timeout_s"]) == (
        head,
        "e2",
        "a",
        10,
    )
    shared = [{"bucket": history.pending, "target": "c", "picked_up": False}]
    assert _members(now) == {
        "a": (history.owned["a"], shared, len(history.owned["a"]), True),
        "b": (history.owned["b"], [], 3, True),
        "c": ([], [], 0, False),  # its last heartbeat is a minute old
    }
    assert now["buckets_without_owner"] == [{"bucket": history.pending, "from_task": "a", "to_task": "c"}]
    a = now["members"][0]
    assert a["data"] == sorted([*history.owned["a"], history.pending]) and a["leader"] and a["state_seq"] == head - 1
    beat = a["heartbeat"]
    assert beat["host"] == "host-a" and 1_000 <= beat["age_ms"] < 60_000
    assert beat["age_ms"] == now["now_ms"] - beat["last_heartbeat_ms"]
    assert [(row["task_id"], row["heartbeat"]["live"]) for row in now["other_heartbeats"]] == [("z", True)]
    patient = ok(client.get(f"{API}/group/{GROUP}", params={"member_timeout_s": 120.5}))
    assert _members(patient)["c"][3] is True and patient["member_timeout_s"] == 120.5

    # As of the first epoch: the leader holds every bucket; heartbeats are still read now.
    past = ok(client.get(f"{API}/group/{GROUP}", params={"as_of_seq": history.first_epoch_seq}))
    assert past["epoch"] == {"epoch_id": "e1", "number": 1, "seq": history.first_epoch_seq}
    assert past["as_of_seq"] == history.first_epoch_seq
    assert _members(past) == {"a": ([1, 2, 3, 4, 5, 6], [], 6, True), "b": ([], [], 0, True)}
    assert [row["task_id"] for row in past["other_heartbeats"]] == ["c", "z"]
    settled = ok(client.get(f"{API}/group/{GROUP}", params={"as_of_seq": history.settled_seq}))
    assert [m["load"] for m in settled["members"]] == [3, 3] and settled["buckets_without_owner"] == []

    problem(client.get(f"{API}/group/{GROUP}", params={"as_of_seq": 0}), 404, "no worker group 'g' as of seq 0")
    problem(client.get(f"{API}/group/other"), 404, "no worker group 'other'")
    problem(client.get(f"{API}/group/{GROUP}", params={"as_of_seq": head + 1}), 409, "as_of_seq")
    problem(client.get(GROUPS, params={"min_seq": head + 1}), 409, "min_seq")
    for bad in ("0", "-1", "86401", "abc", "nan", "inf", "true", "1_0", " 5", "0x10", ""):
        problem(client.get(f"{API}/group/{GROUP}", params={"member_timeout_s": bad}), 422, "query.member_timeout_s")
    for good in ("86400", "0.001", "1e-3", "7"):
        ok(client.get(f"{API}/group/{GROUP}", params={"member_timeout_s": good}))
    for bad in ("-1", "1.5", str(2**53)):
        problem(client.get(f"{API}/group/{GROUP}", params={"as_of_seq": bad}), 422, "query.as_of_seq")
        problem(client.get(GROUPS, params={"as_of_seq": bad}), 422, "query.as_of_seq")
    assert head_seq(client) == head


def test_worker_group_metrics_count_members_epochs_and_fenced_rejections(api_server: ApiServer) -> None:
    """/metrics: members and epochs of each group, pending hand-offs, and fenced decisions rejected by rule."""
    client = api_server.client

    def scrape() -> dict[tuple[str, str], float]:
        text = client.get("/metrics").text
        return {
            (sample.name, next(iter(sample.labels.values()), "")): sample.value
            for family in text_string_to_metric_families(text)
            if family.name.startswith("partbuild_group")
            for sample in family.samples
            if not sample.name.endswith("_created")
        }

    assert scrape() == {
        ("partbuild_group_fenced_rejections_total", kind): 0
        for kind in ("no_group", "old_epoch", "unknown_epoch", "not_member", "not_owner", "wrong_writer")
    }
    history = append_group_history(api_server.log, int(time.time() * 1000))
    assert head_seq(client) == history.head_seq
    ok(client.get(GROUPS, params={"min_seq": history.head_seq}))
    found = scrape()
    assert {key: value for key, value in found.items() if value} == {
        ("partbuild_group_members", GROUP): 3,
        ("partbuild_group_epochs_total", GROUP): 2,
        ("partbuild_group_buckets_without_owner", GROUP): 1,
        ("partbuild_group_fenced_rejections_total", "old_epoch"): 1,
    }
    # Counted incrementally: a later rejection (a member deciding for a bucket it does not own) adds one.
    late = pb.Event()
    late.CopyFrom(history.events[-1])
    late.job_run_buffer.job_run_id = "late-run-2"
    late.job_run_buffer.fence.epoch_id = "e2"
    late.job_run_buffer.fence.task_id = "c"
    late.source.system.worker = "c"
    late.event_id = "late-event-2"
    api_server.log.append([late])
    ok(client.get(GROUPS, params={"min_seq": history.head_seq + 1}))
    again = scrape()
    assert again[("partbuild_group_fenced_rejections_total", "not_owner")] == 1
    assert again[("partbuild_group_fenced_rejections_total", "old_epoch")] == 1


def test_sources_show_scans_redacted_and_a_scan_request_makes_a_pass_due(db_api_server: ApiServer) -> None:
    """A source the log has scans of is listed with its cursor redacted; a scan request makes the next pass due."""
    client = db_api_server.client
    assert ok(client.get(f"{API}/sources")) == []
    problem(client.post(f"{API}/sources/raw/scan"), 404, "no source dataset 'raw'")
    key = b"/secret/cursor/key"
    scanned = pb.SourceScanProgress(source="raw", pass_number=1, last_key=key, items=7, partitions=2, done=True)
    db_api_server.log.append([envelope(scanned)])
    [raw] = ok(client.get(f"{API}/sources", params={"min_seq": 1}))
    assert (raw["name"], raw["found_by"], raw["discovery"]) == ("raw", None, None)
    cursor = raw["scan"]["shards"][0]["cursor"]
    assert cursor.startswith("ItemKey(len=18, hash=") and raw["scan"]["passes_done"] == 1
    assert (raw["scan"]["items_total"], raw["scan"]["partitions_total"]) == (7, 2)
    response = client.post(f"{API}/sources/raw/scan", headers={"X-Partbuild-User": "ops"})
    answer = ok(response, 201)
    assert answer["seq"] == 2 and key not in response.content
    assert (answer["source"]["scan"]["pass_number"], answer["source"]["scan"]["rescan_requested"]) == (1, True)
    assert ok(client.get(f"{API}/sources", params={"as_of_seq": 1}))[0]["scan"]["rescan_requested"] is False


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


# ----------------------------------------------------------------- the log, audit, operations


def test_events_are_the_raw_log_paged_by_seq(db_api_server: ApiServer) -> None:
    """GET /events is the log itself: every seq once, in order, payloads as dicts, the user as the source."""
    client = db_api_server.client
    want(client, ["e/1"], want_id="e-1", comment="hi")
    observe(client, "e/src", "/data/e")
    ok(client.post(f"{WANTS}/e-1/cancel", json={"reason": "done"}, headers={"X-Partbuild-User": "eve"}))
    ok(client.post(f"{WANTS}/batch", json={"wants": [{"refs": [f"e/b/{n}"]} for n in range(3)]}), 201)
    head = head_seq(client)
    assert head == 6

    for limit in (1, 4, 6, 1_000):
        assert [e["seq"] for e in events(client, limit)] == list(range(1, head + 1))
    log = events(client, 100)
    assert [e["event_type"] for e in log] == ["want_create", "partition_observed", "want_cancel", *["want_create"] * 3]
    for event in log:
        assert isinstance(event["event"], dict) and event["event"]["event_id"] == event["event_id"]
        assert event["recorded_at_ms"] > 0
    first, observed, canceled = log[:3]
    assert first["event"]["want_create"] == {"want_id": "e-1", "partition_refs": ["e/1"], "comment": "hi"}
    assert first["event"]["source"] == {"manual": {"user": "anonymous"}}
    assert observed["event"]["partition_observed"] == {"partition_ref": "e/src", "location": "/data/e"}
    assert canceled["event"]["want_cancel"] == {"want_id": "e-1", "reason": "done"}
    assert canceled["event"]["source"] == {"manual": {"user": "eve"}}
    assert ok(client.get(f"{API}/events", params={"after_seq": head})) == {"items": [], "next_cursor": None}


def test_audit_digest_is_stable_and_lists_rejected_events(api_server: ApiServer) -> None:
    """Two audits of one log agree; the audit counts the state and lists events the fold rejected."""
    client = api_server.client
    want(client, ["a/1"], want_id="a-1")
    observe(client, "a/src", "/data/a")
    at_two = ok(client.post(f"{API}/audit"))
    assert (at_two["head_seq"], at_two["verified"], at_two["problems"]) == (2, None, [])
    # Observing the same data again is not a valid next step: refused, and nothing is appended.
    problem(client.post(f"{PARTITIONS}/observe", json={"ref": "a/src", "location": "/data/a"}), 409, "already live")
    assert head_seq(client) == 2
    # A writer that does not check first (an older client, a script) can still append an event the
    # fold rejects: the audit lists it.
    api_server.log.append([envelope(pb.WantCancel(want_id="no-such-want"))])

    first = ok(client.post(f"{API}/audit"))
    second = ok(client.post(f"{API}/audit"))
    assert re.fullmatch(r"[0-9a-f]{64}", first["digest"]) and second["digest"] == first["digest"]
    assert first["head_seq"] == first["state_seq"] == head_seq(client) == 3
    assert first["rejected_total"] == 1 and len(first["rejected"]) == 1
    rejected = first["rejected"][0]
    assert (rejected["seq"], rejected["event_type"]) == (3, "want_cancel")
    assert "no-such-want" in rejected["reason"] and "does not exist" in rejected["reason"]
    assert first["counts"]["wants"]["idle"] == 1
    assert (first["counts"]["instances"]["missing"], first["counts"]["instances"]["live"]) == (1, 1)
    assert first["snapshot_seq"] + first["replayed_events"] == first["head_seq"] and first["seconds"] >= 0

    quiet = ok(client.post(f"{API}/audit", params={"rejected": 0}))
    assert (quiet["rejected"], quiet["rejected_total"], quiet["digest"]) == ([], 1, first["digest"])
    verified = ok(client.post(f"{API}/audit", params={"verify": True}))
    assert (verified["verified"], verified["problems"], verified["digest"]) == (True, [], first["digest"])
    # As of seq 2, the audit is the one made when the head was 2.
    past = ok(client.post(f"{API}/audit", params={"as_of_seq": 2, "verify": True}))
    assert (past["head_seq"], past["state_seq"], past["rejected_total"]) == (3, 2, 0)
    assert (past["digest"], past["counts"], past["verified"]) == (at_two["digest"], at_two["counts"], True)
    want(client, ["a/2"])
    moved = ok(client.post(f"{API}/audit"))
    assert moved["head_seq"] == 4 and moved["digest"] != first["digest"]


def test_healthz_and_metrics(api_server: ApiServer) -> None:
    """/healthz reports the log head and the served state; /metrics the state gauges and latency histograms."""
    client = api_server.client
    assert ok(client.get("/healthz")) == {"status": "ok", "head_seq": 0, "state_seq": 0}
    want(client, ["m/1"])
    want(client, ["m/2"])
    ok(client.post(f"{WANTS}/{want(client, ['m/3'])['want_id']}/cancel"))
    observe(client, "m/src", "/data/m")
    assert ok(client.get("/healthz")) == {"status": "ok", "head_seq": 5, "state_seq": 5}

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


# ----------------------------------------------------------------- bad input

UNKNOWN_UUID = "00000000-0000-0000-0000-000000000000"
BEYOND = 10**6  # a seq after any head these tests reach


def bad(case_id: str, method: str, url: str, status: int, *words: str, xfail: str = "", **request: Any) -> Any:
    """One bad request: what is sent, the 4xx it must get, and words its detail must contain."""
    marks = [pytest.mark.xfail(strict=True, reason=xfail)] if xfail else []
    return pytest.param(method, url, request, status, words, id=case_id, marks=marks)


def _limits() -> list[Any]:
    paged = [WANTS, PARTITIONS, f"{API}/job-runs", f"{API}/events"]
    return [
        bad(f"limit {limit} on {path.removeprefix(API)}", "GET", path, 422, "query.limit", params={"limit": limit})
        for path in paged
        for limit in (0, 1_001, "ten")
    ]


def _beyond_head() -> list[Any]:
    reads = [
        WANTS,
        f"{WANTS}/{SEEDED_WANT}",
        PARTITIONS,
        f"{PARTITIONS}/canonical/{SEEDED_LIVE}",
        f"{PARTITIONS}/history/{SEEDED_LIVE}",
        f"{API}/instances/{UNKNOWN_UUID}",
        f"{API}/instances/{UNKNOWN_UUID}/lineage",
        f"{API}/job-runs",
        f"{API}/job-runs/no-such-run",
    ]
    as_of = reads[3:7]
    return [
        bad(
            f"min_seq beyond the head on {p.removeprefix(API)}",
            "GET",
            p,
            409,
            "min_seq",
            "after the log head",
            params={"min_seq": BEYOND},
        )
        for p in reads
    ] + [
        bad(
            f"as_of_seq beyond the head on {p.removeprefix(API)}",
            "GET",
            p,
            409,
            "as_of_seq",
            "after the log head",
            params={"as_of_seq": BEYOND},
        )
        for p in as_of
    ]


BAD_INPUT = [
    # Bodies that are not a want.
    bad(
        "malformed JSON", "POST", WANTS, 422, "JSON decode error", content=b'{"refs": [', headers={"content-type": JSON}
    ),
    bad(
        "body not UTF-8",
        "POST",
        WANTS,
        422,
        "UTF-8",
        content=b'{"refs": ["a\xff"]}',
        headers={"content-type": JSON},
    ),
    bad("body not an object", "POST", WANTS, 422, "body", json=["a"]),
    bad("no body", "POST", WANTS, 422, "body"),
    bad("refs as a string", "POST", WANTS, 422, "body.refs", "list", json={"refs": "a/b"}),
    bad("refs missing", "POST", WANTS, 422, "body.refs", "required", json={"comment": "no refs"}),
    bad(
        "ttl_seconds as a string",
        "POST",
        WANTS,
        422,
        "body.ttl_seconds",
        "integer",
        json={"refs": ["a"], "ttl_seconds": "x"},
    ),
    bad(
        "negative ttl_seconds",
        "POST",
        WANTS,
        422,
        "body.ttl_seconds",
        "greater than or equal to 0",
        json={"refs": ["a"], "ttl_seconds": -1},
    ),
    bad(
        "negative data_timestamp_ms",
        "POST",
        WANTS,
        422,
        "body.data_timestamp_ms",
        json={"refs": ["a"], "data_timestamp_ms": -5},
    ),
    bad("empty refs list", "POST", WANTS, 422, "body.refs", "at least 1", json={"refs": []}),
    bad("empty ref", "POST", WANTS, 422, "body.refs.0", json={"refs": [""]}),
    bad(
        "ref with a control character",
        "POST",
        WANTS,
        422,
        "body.refs.1",
        "control character",
        json={"refs": ["ok", "a\x01b"]},
    ),
    bad("ref with DEL", "POST", WANTS, 422, "body.refs.0", "control character", json={"refs": ["a\x7fb"]}),
    bad("ref of 4097 ASCII characters", "POST", WANTS, 422, "body.refs.0", "4096", json={"refs": ["a" * 4097]}),
    bad(
        "ref of 2049 two-byte characters", "POST", WANTS, 422, "body.refs.0", "4096 bytes", json={"refs": ["é" * 2049]}
    ),
    bad(
        "duplicate refs in a want",
        "POST",
        WANTS,
        422,
        "more than once",
        "a/dup",
        json={"refs": ["a/dup", "b", "a/dup"]},
    ),
    bad("unknown extra field", "POST", WANTS, 422, "body.priority", "extra", json={"refs": ["a"], "priority": 1}),
    bad("want id with a slash", "POST", WANTS, 422, "body.want_id", json={"refs": ["a"], "want_id": "a/b"}),
    bad(
        "comment over 2000 characters", "POST", WANTS, 422, "body.comment", json={"refs": ["a"], "comment": "x" * 2001}
    ),
    bad(
        "user header over 128 characters",
        "POST",
        WANTS,
        422,
        "x-partbuild-user",
        json={"refs": ["a"]},
        headers={"X-Partbuild-User": "u" * 129},
    ),
    bad(
        "a want id that exists",
        "POST",
        WANTS,
        409,
        SEEDED_WANT,
        "already exists",
        json={"refs": ["a"], "want_id": SEEDED_WANT},
    ),
    bad(
        "one want of 10,001 refs",
        "POST",
        WANTS,
        413,
        "10001",
        "10000",
        json={"refs": [f"r/{n}" for n in range(10_001)]},
    ),
    # Batches.
    bad(
        "batch of 10,001 refs",
        "POST",
        f"{WANTS}/batch",
        413,
        "10001",
        json={"wants": [*({"refs": [f"r/{n}", f"s/{n}"]} for n in range(5_000)), {"refs": ["t"]}]},
    ),
    bad("empty batch", "POST", f"{WANTS}/batch", 422, "body.wants", json={"wants": []}),
    bad(
        "one want id twice in a batch",
        "POST",
        f"{WANTS}/batch",
        409,
        "twin",
        json={"wants": [{"refs": ["a"], "want_id": "twin"}, {"refs": ["b"], "want_id": "twin"}]},
    ),
    bad(
        "validate a batch naming a want id that exists",
        "POST",
        f"{WANTS}/batch/validate",
        409,
        SEEDED_WANT,
        json={"wants": [{"refs": ["a"], "want_id": SEEDED_WANT}]},
    ),
    bad(
        "validate an oversized batch",
        "POST",
        f"{WANTS}/batch/validate",
        413,
        "10001",
        json={"wants": [{"refs": [f"r/{n}" for n in range(10_001)]}]},
    ),
    bad("validate a malformed batch", "POST", f"{WANTS}/batch/validate", 422, "body.wants", json={"wants": "all"}),
    bad(
        "a bad want in a batch",
        "POST",
        f"{WANTS}/batch",
        422,
        "body.wants.1.refs.0",
        json={"wants": [{"refs": ["ok"]}, {"refs": [""]}]},
    ),
    bad(
        "a want id that exists in a batch",
        "POST",
        f"{WANTS}/batch",
        409,
        SEEDED_WANT,
        json={"wants": [{"refs": ["ok"], "want_id": "fresh"}, {"refs": ["ok"], "want_id": SEEDED_WANT}]},
    ),
    # Unknown things.
    bad("unknown want", "GET", f"{WANTS}/no-such-want", 404, "no-such-want"),
    bad("cancel an unknown want", "POST", f"{WANTS}/no-such-want/cancel", 404, "no-such-want"),
    bad("unknown instance UUID", "GET", f"{API}/instances/{UNKNOWN_UUID}", 404, UNKNOWN_UUID),
    bad("lineage of an unknown instance", "GET", f"{API}/instances/{UNKNOWN_UUID}/lineage", 404, UNKNOWN_UUID),
    bad("unknown job run", "GET", f"{API}/job-runs/no-such-run", 404, "no-such-run"),
    bad("canonical of an unknown ref", "GET", f"{PARTITIONS}/canonical/nope/x", 404, "nope/x"),
    bad("history of an unknown ref", "GET", f"{PARTITIONS}/history/nope/x", 404, "nope/x"),
    bad("taint an unknown ref", "POST", f"{PARTITIONS}/taint", 404, "nope/x", json={"ref": "nope/x"}),
    # Not a valid next step.
    bad(
        "taint a Missing partition",
        "POST",
        f"{PARTITIONS}/taint",
        409,
        SEEDED_MISSING,
        "missing",
        json={"ref": SEEDED_MISSING},
    ),
    bad("cancel with an unknown field", "POST", f"{WANTS}/{SEEDED_WANT}/cancel", 422, "body.why", json={"why": "x"}),
    bad("taint an empty ref", "POST", f"{PARTITIONS}/taint", 422, "body.ref", json={"ref": ""}),
    bad("observe without a location", "POST", f"{PARTITIONS}/observe", 422, "body.location", json={"ref": "x"}),
    bad(
        "observe a negative row_count",
        "POST",
        f"{PARTITIONS}/observe",
        422,
        "body.row_count",
        json={"ref": "x", "location": "/x", "row_count": -1},
    ),
    # Query parameters.
    *_beyond_head(),
    bad("min_seq over the maximum", "GET", WANTS, 422, "query.min_seq", params={"min_seq": 2**62 + 1}),
    bad(
        "negative as_of_seq",
        "GET",
        f"{PARTITIONS}/canonical/{SEEDED_LIVE}",
        422,
        "query.as_of_seq",
        params={"as_of_seq": -1},
    ),
    # A cursor no page of that list gave names no item: a 404, like an unknown id (test_api_strict.py has more).
    bad("cursor not from this API on /wants", "GET", WANTS, 404, "cursor", "abc", params={"cursor": "abc"}),
    bad(
        "cursor not from this API on /job-runs", "GET", f"{API}/job-runs", 404, "cursor", "-1", params={"cursor": "-1"}
    ),
    bad(
        "cursor of superscript digits on /wants",
        "GET",
        WANTS,
        404,
        "cursor",
        params={"cursor": "²"},
    ),
    bad(
        "cursor of superscript digits on /job-runs",
        "GET",
        f"{API}/job-runs",
        404,
        "cursor",
        params={"cursor": "¹²"},
    ),
    *_limits(),
    bad(
        "lineage depth 51",
        "GET",
        f"{API}/instances/{UNKNOWN_UUID}/lineage",
        422,
        "query.depth",
        "50",
        params={"depth": 51},
    ),
    bad("lineage depth -1", "GET", f"{API}/instances/{UNKNOWN_UUID}/lineage", 422, "query.depth", params={"depth": -1}),
    bad(
        "lineage direction",
        "GET",
        f"{API}/instances/{UNKNOWN_UUID}/lineage",
        422,
        "query.direction",
        params={"direction": "sideways"},
    ),
    bad("unknown want state", "GET", WANTS, 422, "query.state", params={"state": "done"}),
    bad("unknown partition state", "GET", PARTITIONS, 422, "query.state", params={"state": "stale"}),
    bad("unknown job run state", "GET", f"{API}/job-runs", 422, "query.state", params={"state": "done"}),
    bad("negative after_seq", "GET", f"{API}/events", 422, "query.after_seq", params={"after_seq": -1}),
    bad("audit of 1001 rejected events", "POST", f"{API}/audit", 422, "query.rejected", params={"rejected": 1_001}),
    bad(
        "audit as_of_seq beyond the head",
        "POST",
        f"{API}/audit",
        409,
        "as_of_seq",
        "after the log head",
        params={"as_of_seq": BEYOND},
    ),
    bad("audit verify not a boolean", "POST", f"{API}/audit", 422, "query.verify", params={"verify": "perhaps"}),
    # Routing.
    bad("unknown route", "GET", f"{API}/nothing-here", 404, "not found"),
    bad("wrong method", "DELETE", WANTS, 405, "method not allowed"),
    bad("wrong method on /healthz", "POST", "/healthz", 405, "method not allowed"),
]


@pytest.fixture(scope="module")
def graph_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApiServer]:
    """A server with the W1 graph over no data and no orchestrator: enough to resolve refs to producers."""
    root = tmp_path_factory.mktemp("graph")
    graph = build_graph(root / "no-data", days=CLICKS_DAYS, start=CLICKS_START)
    with Database.open(f"sqlite:///{root / 'partbuild.db'}") as db, serve_service(Service(db, graph=graph)) as api:
        yield api


@pytest.fixture
def graph_client(graph_server: ApiServer) -> Iterator[httpx.Client]:
    """A fresh client of the graph server."""
    yield from _client(graph_server)


def assert_refused_without_change(
    client: httpx.Client, method: str, url: str, request: dict[str, Any], status: int, words: tuple[str, ...]
) -> None:
    """The request gets the 4xx problem it should, and the log head does not move."""
    before = ok(client.get("/healthz"))
    problem(client.request(method, url, **request), status, *words)
    assert ok(client.get("/healthz")) == before


@pytest.mark.parametrize(("method", "url", "request_", "status", "words"), BAD_INPUT)
def test_bad_input_is_a_problem_and_changes_nothing(
    shared_client: httpx.Client, method: str, url: str, request_: dict[str, Any], status: int, words: tuple[str, ...]
) -> None:
    """Each bad request: a 4xx problem+json whose detail says what was wrong, and nothing appended."""
    assert_refused_without_change(shared_client, method, url, request_, status, words)


WEEK = weeks_in_range(CLICKS_DAYS, CLICKS_START)[0]
GRAPH_BAD_INPUT = [
    bad(
        "want a ref no job produces",
        "POST",
        WANTS,
        422,
        "no job or source",
        "nothing/makes/this",
        json={"refs": ["nothing/makes/this"]},
    ),
    bad(
        "want a good and a bad ref",
        "POST",
        WANTS,
        422,
        "agg/daily_clicks/date=not-a-date",
        json={"refs": [weekly_ref(WEEK), "agg/daily_clicks/date=not-a-date"]},
    ),
    bad(
        "a batch with a ref no job produces",
        "POST",
        f"{WANTS}/batch",
        422,
        "nothing/x",
        json={"wants": [{"refs": [weekly_ref(WEEK)]}, {"refs": ["nothing/x"]}]},
    ),
    bad(
        "validate a batch with a ref no job produces",
        "POST",
        f"{WANTS}/batch/validate",
        422,
        "no job or source",
        "nothing/y",
        json={"wants": [{"refs": ["nothing/y"]}]},
    ),
    bad(
        "observe a ref a job builds",
        "POST",
        f"{PARTITIONS}/observe",
        422,
        daily_ref(CLICKS_START),
        "daily_clicks",
        json={"ref": daily_ref(CLICKS_START), "location": "/x"},
    ),
]


@pytest.mark.parametrize(("method", "url", "request_", "status", "words"), GRAPH_BAD_INPUT)
def test_refs_the_graph_cannot_place_are_refused(
    graph_client: httpx.Client, method: str, url: str, request_: dict[str, Any], status: int, words: tuple[str, ...]
) -> None:
    """With a graph, a ref nothing produces (or a built ref observed) is a 422 that appends nothing."""
    assert_refused_without_change(graph_client, method, url, request_, status, words)


def test_refs_the_graph_places_are_accepted(graph_client: httpx.Client) -> None:
    """With a graph, a built ref can be wanted and a source ref observed."""
    assert want(graph_client, [weekly_ref(WEEK), daily_ref(CLICKS_START)])["state"] == "idle"
    seq = observe(graph_client, raw_ref(CLICKS_START), "/data/raw")
    assert canonical(graph_client, raw_ref(CLICKS_START), min_seq=seq)["state"] == "live"


# ----------------------------------------------------------------- two servers, one database


@contextmanager
def lagging_server(url: str) -> Iterator[ApiServer]:
    """Server B on the database at `url`, tailing the log only every 60 s, like a second process."""
    with Database.open(url) as db, serve_service(Service(db), tail_interval_s=60) as b:
        yield b


@pytest.fixture
def lagging(db_api_server: ApiServer, db_url: str) -> Iterator[ApiServer]:
    """A lagging server B on the database of `db_api_server` (A), on each backend."""
    with lagging_server(db_url) as b:
        yield b


@pytest.fixture
def lagging_on_sqlite(api_server: ApiServer, sqlite_url: str) -> Iterator[ApiServer]:
    """A lagging server B on the database of `api_server` (A); for the bugs, which are not storage bugs."""
    with lagging_server(sqlite_url) as b:
        yield b


def test_read_your_writes_across_servers_with_min_seq(db_api_server: ApiServer, lagging: ApiServer) -> None:
    """A write through A is visible through B at once when read with `min_seq` = the seq A returned."""
    a, b = db_api_server.client, lagging.client
    created = want(a, ["ryw/x"], want_id="ryw-1")
    # B has not tailed the log since it started, so without min_seq it does not know the want yet...
    problem(b.get(f"{WANTS}/ryw-1"), 404, "ryw-1")
    # ...and with it, B catches up before answering, long before its next tail.
    started = time.monotonic()
    got = ok(b.get(f"{WANTS}/ryw-1", params={"min_seq": created["seq"]}))
    assert time.monotonic() - started < 10
    assert (got["want_id"], got["created_seq"], got["refs"]) == ("ryw-1", created["seq"], ["ryw/x"])

    seq = observe(a, "ryw/src", "/data/ryw")
    assert canonical(b, "ryw/src", min_seq=seq)["created_seq"] == seq
    assert ok(b.get("/healthz")) == {"status": "ok", "head_seq": seq, "state_seq": seq}
    batch = ok(a.post(f"{WANTS}/batch", json={"wants": [{"refs": ["ryw/y"], "want_id": "ryw-2"}]}), 201)
    assert listed(b, WANTS, "want_id", min_seq=batch["last_seq"]) == ["ryw-1", "ryw-2"]
    assert listed(b, PARTITIONS, "ref", min_seq=batch["last_seq"]) == ["ryw/src", "ryw/x", "ryw/y"]


def test_as_of_seq_on_a_lagging_server_answers_from_the_log(
    api_server: ApiServer, lagging_on_sqlite: ApiServer
) -> None:
    """The state as of seq N is the same whichever server is asked."""
    seq = observe(api_server.client, "lag/src", "/data/lag")
    assert canonical(lagging_on_sqlite.client, "lag/src", as_of_seq=seq)["created_seq"] == seq


def test_a_batch_refused_on_a_lagging_server_records_none_of_its_wants(
    api_server: ApiServer, lagging_on_sqlite: ApiServer
) -> None:
    """A batch is all or none, also when a server only finds a conflict after appending."""
    a, b = api_server.client, lagging_on_sqlite.client
    want(a, ["lag/x"], want_id="lag-dup")
    batch = {"wants": [{"refs": ["lag/y"], "want_id": "lag-fresh"}, {"refs": ["lag/z"], "want_id": "lag-dup"}]}
    problem(b.post(f"{WANTS}/batch", json=batch), 409, "lag-dup")
    problem(a.get(f"{WANTS}/lag-fresh", params={"min_seq": head_seq(a)}), 404, "lag-fresh")


def test_taint_on_a_lagging_server_sees_the_log(api_server: ApiServer, lagging_on_sqlite: ApiServer) -> None:
    """Tainting a partition that is Live in the log works through any server."""
    observe(api_server.client, "lag/src", "/data/lag")
    ok(lagging_on_sqlite.client.post(f"{PARTITIONS}/taint", json={"ref": "lag/src"}), 201)


def test_cancel_on_a_lagging_server_sees_the_log(api_server: ApiServer, lagging_on_sqlite: ApiServer) -> None:
    """Cancelling a want that is active in the log works through any server."""
    want(api_server.client, ["lag/w"], want_id="lag-cancel")
    ok(lagging_on_sqlite.client.post(f"{WANTS}/lag-cancel/cancel"))


# ----------------------------------------------------------------- W1 end to end, over HTTP only


def wait_for_want(client: httpx.Client, want_id: str, timeout_s: float = 120.0) -> dict[str, Any]:
    """Poll GET /wants/{id} until the want is successful; fail at once if it ends any other way."""
    deadline = time.monotonic() + timeout_s
    while True:
        got = ok(client.get(f"{WANTS}/{want_id}"))
        if got["state"] == "successful":
            return got  # type: ignore[no-any-return]
        assert got["state"] not in {"failed", "upstream_failed", "canceled", "expired"}, got
        assert time.monotonic() < deadline, f"{want_id} still {got['state']} after {timeout_s} s: {got['refs_status']}"
        time.sleep(0.1)


def tree_ids(tree: dict[str, Any]) -> list[str]:
    """The want ids of a want tree, depth first."""
    return [tree["want_id"], *(want_id for child in tree["children"] for want_id in tree_ids(child))]


def tree_refs(tree: dict[str, Any]) -> set[str]:
    return {*tree["refs"], *(ref for child in tree["children"] for ref in tree_refs(child))}


def quiet_audit(client: httpx.Client, timeout_s: float = 30.0) -> dict[str, Any]:
    """An audit of a log that stopped moving: two audits in a row at the same head."""
    deadline = time.monotonic() + timeout_s
    previous = ok(client.post(f"{API}/audit"))
    while True:
        current = ok(client.post(f"{API}/audit"))
        if current["head_seq"] == previous["head_seq"]:
            assert current["digest"] == previous["digest"]
            return current  # type: ignore[no-any-return]
        assert time.monotonic() < deadline, "the log kept moving"
        previous = current
        time.sleep(0.2)


def test_w1_weekly_wants_build_over_http(w1_api_server: ApiServer) -> None:
    """W1 through the API: want the weeklies, watch them build, read lineage and job runs, taint, rebuild."""
    client = w1_api_server.client
    weeks = weeks_in_range(CLICKS_DAYS, CLICKS_START)
    all_days = days_in_range(CLICKS_DAYS, CLICKS_START)
    created = want(client, [weekly_ref(week) for week in weeks], want_id="w1-weekly", comment="W1 over HTTP")
    assert created["seq"] == 1

    done = wait_for_want(client, "w1-weekly")
    assert [(s["ref"], s["state"]) for s in done["refs_status"]] == [(weekly_ref(w), "live") for w in weeks]
    # The dailies were wanted as derivative wants of the weekly one; all of them are done.
    tree = done["tree"]
    assert tree["want_id"] == "w1-weekly" and tree["children"]
    assert {daily_ref(day) for day in all_days} <= tree_refs(tree)
    assert sorted(listed(client, WANTS, "want_id", limit=3, root="w1-weekly")) == sorted(tree_ids(tree))
    for derived in listed(client, WANTS, "want_id", root="w1-weekly")[1:]:
        got = ok(client.get(f"{WANTS}/{derived}"))
        assert got["root_want_id"] == "w1-weekly" and got["parent_want_id"] and got["state"] == "successful"

    # Each weekly is Live, built from its week's dailies, each built from that day's raw partition.
    weeklies = {}
    for week in weeks:
        days = week_days_in_range(week, CLICKS_DAYS, CLICKS_START)
        weekly = canonical(client, weekly_ref(week))
        assert (weekly["state"], weekly["canonical"]) == ("live", True) and weekly["uuid"] in weekly["location"]
        weeklies[week] = weekly
        lineage = ok(
            client.get(f"{API}/instances/{weekly['uuid']}/lineage", params={"direction": "upstream", "depth": 2})
        )
        assert lineage["root"] == weekly["uuid"] and weekly["updated_seq"] <= lineage["as_of_seq"] <= head_seq(client)
        nodes = {node["ref"]: node for node in lineage["nodes"]}
        assert len(nodes) == len(lineage["nodes"]) == 1 + 2 * len(days)
        assert {ref: n["depth"] for ref, n in nodes.items()} == {
            weekly_ref(week): 0,
            **{daily_ref(day): 1 for day in days},
            **{raw_ref(day): 2 for day in days},
        }
        assert {n["state"] for n in nodes.values()} == {"live"}
        assert all(nodes[daily_ref(day)]["built_by"] for day in days)
        assert all(nodes[raw_ref(day)]["built_by"] is None for day in days)  # observed source data
        uuid = {ref: n["uuid"] for ref, n in nodes.items()}
        assert {(e["input"], e["output"]) for e in lineage["edges"]} == {
            *((uuid[daily_ref(day)], weekly["uuid"]) for day in days),
            *((uuid[raw_ref(day)], uuid[daily_ref(day)]) for day in days),
        }
        assert weekly["inputs"] == [uuid[daily_ref(day)] for day in days]
        # Depth bounds the walk; downstream from a raw partition reaches its daily and the weekly.
        shallow = ok(
            client.get(f"{API}/instances/{weekly['uuid']}/lineage", params={"direction": "upstream", "depth": 1})
        )
        assert sorted(n["ref"] for n in shallow["nodes"]) == sorted([weekly_ref(week), *map(daily_ref, days)])
        down = ok(
            client.get(
                f"{API}/instances/{uuid[raw_ref(days[0])]}/lineage", params={"direction": "downstream", "depth": 5}
            )
        )
        assert {n["ref"]: n["depth"] for n in down["nodes"]} == {
            raw_ref(days[0]): 0,
            daily_ref(days[0]): 1,
            weekly_ref(week): 2,
        }
        both = ok(client.get(f"{API}/instances/{uuid[daily_ref(days[0])]}/lineage", params={"direction": "both"}))
        assert {n["ref"] for n in both["nodes"]} == {daily_ref(days[0]), raw_ref(days[0]), weekly_ref(week)}

    # Job runs: all succeeded; the dailies were built in batches, each weekly by one run.
    runs = [run for page in walk(client, f"{API}/job-runs", 2) for run in page]
    ids = [run["job_run_id"] for run in runs]
    assert len(set(ids)) == len(ids) and [r["created_seq"] for r in runs] == sorted(r["created_seq"] for r in runs)
    assert {run["state"] for run in runs} == {"succeeded"}
    assert listed(client, f"{API}/job-runs", "job_run_id", limit=3, state="succeeded") == ids
    assert sorted(ref for r in runs if r["job_label"] == "daily_clicks" for ref in r["refs"]) == sorted(
        map(daily_ref, all_days)
    )
    weekly_runs = listed(client, f"{API}/job-runs", "job_run_id", job="weekly_clicks")
    assert sorted(weeklies[w]["built_by"] for w in weeks) == sorted(weekly_runs)
    for run in runs:
        assert ok(client.get(f"{API}/job-runs/{run['job_run_id']}")) == run
        assert run["attempt"] == 1 and run["error_class"] is None and len(run["instance_uuids"]) == len(run["refs"])
    assert listed(client, f"{API}/job-runs", "job_run_id", state="failed") == []
    first_audit = quiet_audit(client)
    assert first_audit["rejected_total"] == 0 and first_audit["counts"]["job_runs"]["succeeded"] == len(runs)

    # Taint one daily: it and the weekly built from it are replaced; wanting the weekly again rebuilds both.
    week = weeks[0]
    days = week_days_in_range(week, CLICKS_DAYS, CLICKS_START)
    old_daily, old_weekly, untouched = (
        canonical(client, daily_ref(days[1])),
        weeklies[week],
        canonical(client, daily_ref(days[0])),
    )
    ok(client.post(f"{PARTITIONS}/taint", json={"ref": daily_ref(days[1]), "reason": "late clicks"}), 201)
    for old in (old_daily, old_weekly):
        assert ok(client.get(f"{API}/instances/{old['uuid']}"))["state"] == "tainted"
    want(client, [weekly_ref(week)], want_id="w1-again")
    wait_for_want(client, "w1-again")

    new_daily, new_weekly = canonical(client, daily_ref(days[1])), canonical(client, weekly_ref(week))
    assert new_daily["uuid"] != old_daily["uuid"] and new_weekly["uuid"] != old_weekly["uuid"]
    assert new_daily["state"] == new_weekly["state"] == "live"
    assert new_daily["uuid"] in new_weekly["inputs"] and old_daily["uuid"] not in new_weekly["inputs"]
    assert canonical(client, daily_ref(days[0]))["uuid"] == untouched["uuid"]  # reused, not rebuilt
    for ref, new, old in ((weekly_ref(week), new_weekly, old_weekly), (daily_ref(days[1]), new_daily, old_daily)):
        past = history(client, ref)
        assert [(i["uuid"], i["state"]) for i in past] == [(new["uuid"], "live"), (old["uuid"], "tainted")]
        assert past[1]["note"] and not past[1]["canonical"]
    # The other week was not touched.
    assert canonical(client, weekly_ref(weeks[1]))["uuid"] == weeklies[weeks[1]]["uuid"]

    final = quiet_audit(client)
    assert final["head_seq"] > first_audit["head_seq"] and final["digest"] != first_audit["digest"]
    verified = ok(client.post(f"{API}/audit", params={"verify": True, "as_of_seq": final["head_seq"]}))
    assert (verified["verified"], verified["problems"], verified["digest"]) == (True, [], final["digest"])
    assert final["rejected_total"] == 0 and final["head_seq"] == final["state_seq"] == head_seq(client)
    log = events(client, 500)
    assert [e["seq"] for e in log] == list(range(1, final["head_seq"] + 1))
    assert {"want_create", "partition_observed", "job_run_buffer", "job_run_success", "partition_taint"} <= {
        e["event_type"] for e in log
    }


# ----------------------------------------------------------------- subscriptions

SUBS = f"{API}/subscriptions"


def test_subscription_lifecycle_over_http_never_shows_the_secret(shared_client: httpx.Client) -> None:
    """Create (a secret made and shown once), list, show, pause, resume, delete; bad input says what was wrong."""
    body = {"name": "http-life", "endpoint": "http://127.0.0.1:9/hook", "filter": {"ref_prefixes": ["agg/"]}}
    created = ok(shared_client.post(SUBS, json=body), 201)
    secret = created["secret"]
    assert secret.startswith("whsec_") and created["subscription"]["status"] == "active"
    assert created["subscription"]["main_topic"]["storage_topics"][0]["partitions"] == 12
    problem(shared_client.post(SUBS, json=body), 409, "exists")
    problem(shared_client.post(SUBS, json={**body, "name": "x", "shard_count": "2"}), 422, "shard_count")
    problem(shared_client.post(SUBS, json={**body, "name": "x", "shard_count": 5}), 409, "5 shards cannot split 12")
    problem(shared_client.post(SUBS, json={**body, "name": "x", "endpoint": "http://u:p@h/"}), 409, "credentials")
    listed = ok(shared_client.get(SUBS))["subscriptions"]
    assert [sub["name"] for sub in listed] == ["http-life"]
    shown = ok(shared_client.get(f"{SUBS}/http-life"))
    assert (shown["filter"]["ref_prefixes"], shown["lag_events"], shown["dlq_messages"]) == (["agg/"], 0, 0)
    problem(shared_client.get(f"{SUBS}/nope"), 404, "no subscription")
    assert ok(shared_client.post(f"{SUBS}/http-life/pause"))["subscription"]["status"] == "paused"
    problem(shared_client.post(f"{SUBS}/http-life/pause"), 409, "is paused")
    assert ok(shared_client.post(f"{SUBS}/http-life/resume"))["subscription"]["status"] == "active"
    deleted = ok(shared_client.request("DELETE", f"{SUBS}/http-life"))
    assert deleted["subscription"]["status"] == "deleted"
    assert ok(shared_client.get(SUBS))["subscriptions"] == []
    events = events_of(shared_client)
    assert secret not in str(events) and secret not in str(shown) and secret not in str(listed)
    assert any("subscription_create" in event["event"] for event in events)


def events_of(client: httpx.Client) -> list[dict[str, Any]]:
    return events(client, 1000)


def test_subscription_reshard_and_offsets_follow_the_fold(shared_client: httpx.Client) -> None:
    """A reshard the partitions allow goes in; one they do not is a 409 with the fold's reason; resets likewise."""
    body = {"name": "http-shards", "endpoint": "https://hooks.example.com/pb", "secret": "whsec_" + "QUJD" * 8}
    created = ok(shared_client.post(SUBS, json=body), 201)
    assert created["secret"] is None  # given, so not shown back
    resharded = ok(shared_client.post(f"{SUBS}/http-shards/shards", json={"shard_count": 8, "main_partitions": 24}))
    sub = resharded["subscription"]
    assert sub["shard_count"] == 8 and [t["partitions"] for t in sub["rq_topic"]["storage_topics"]] == [12, 16]
    problem(shared_client.post(f"{SUBS}/http-shards/shards", json={"shard_count": 5}), 409, "5 shards cannot split 24")
    problem(shared_client.post(f"{SUBS}/http-shards/shards", json={"shard_count": 0}), 422, "shard_count")
    head = ok(shared_client.get("/healthz"))["head_seq"]
    moved = ok(shared_client.post(f"{SUBS}/http-shards/offsets", json={"queue": "rq", "to_seq": head}))
    assert moved["seq"] > head
    problem(shared_client.post(f"{SUBS}/http-shards/offsets", json={"queue": "rq", "to_seq": 1}), 409, "fast-forwards")
    problem(shared_client.post(f"{SUBS}/http-shards/offsets", json={"queue": "main"}), 422, "exactly one")
    problem(shared_client.post(f"{SUBS}/nope/offsets", json={"to_seq": 1}), 404, "no subscription")
    ok(shared_client.request("DELETE", f"{SUBS}/http-shards"))


def test_subscription_dead_letter_routes(shared_client: httpx.Client) -> None:
    """An empty DLQ lists nothing; replay and purge move nothing; an unknown subscription is a 404."""
    ok(shared_client.post(SUBS, json={"name": "http-dlq", "endpoint": "http://127.0.0.1:9/hook"}), 201)
    assert ok(shared_client.get(f"{SUBS}/http-dlq/dlq")) == {"messages": [], "next_after_seq": None}
    assert ok(shared_client.post(f"{SUBS}/http-dlq/dlq/replay", json={}))["moved"] == 0
    assert ok(shared_client.post(f"{SUBS}/http-dlq/dlq/purge", json={"group": "agg/x"}))["moved"] == 0
    problem(shared_client.get(f"{SUBS}/http-dlq/dlq", params={"limit": "many"}), 422, "limit")
    problem(shared_client.post(f"{SUBS}/nope/dlq/purge", json={}), 404, "no subscription")
    ok(shared_client.request("DELETE", f"{SUBS}/http-dlq"))
