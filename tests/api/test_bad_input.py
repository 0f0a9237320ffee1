"""Bad input over HTTP, every resource: each request a 4xx problem+json whose detail says what was wrong,
and nothing appended; with a graph, refs it cannot place are refused alike."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from examples.clicks.pipeline import build_graph, daily_ref, raw_ref, weekly_ref, weeks_in_range
from partbuild.api.service import Service
from partbuild.state.database import Database

from httpkit import (
    API,
    JSON,
    PARTITIONS,
    SEEDED_LIVE,
    SEEDED_MISSING,
    SEEDED_WANT,
    UNKNOWN_UUID,
    WANTS,
    assert_refused_without_change,
    bad,
    canonical,
    fresh_client,
    observe,
    want,
)
from serverkit import ApiServer, serve_service
from sparkkit import CLICKS_DAYS, CLICKS_START

BEYOND = 10**6  # a seq after any head these tests reach


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
        f"{API}/subscriptions",
        f"{API}/subscriptions/nope",
    ]
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
        for p in reads
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
    yield from fresh_client(graph_server.url)


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
