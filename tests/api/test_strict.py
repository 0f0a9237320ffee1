"""The API is exactly as strict as its OpenAPI document says, through a real uvicorn server.

One test (parametrized where natural) per way the server and the document used to disagree:
- a body field of the wrong JSON type ("10" or true for an integer, 1 for a boolean) is a 422
  naming the field, and nothing is appended; an integral number (10.0) is an integer, as JSON
  Schema has it, and is accepted;
- every cursor of every paged route is checked: one no page gave is a 404 naming `cursor` (like
  an unknown id: whether a well-formed cursor names an item depends on the state), an empty or
  over-long one a 422; it never silently restarts at the first page;
- every numeric bound in the document is a JSON integer within 2^53 - 1 (a double holds it
  exactly), and is the bound enforced: the bound is accepted, one past it is a 422;
- a method a path does not declare is a 405 whose `Allow` lists exactly the document's methods
  for that path (a fixed path wins over a templated one: GET /wants/batch is no want);
- what the HTTP server refuses before the app (an over-long URL, a malformed request line) is a
  400 in a content type the document declares for 400 on every operation.
Every refusal is checked to change nothing: the log head from GET /healthz does not move.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote, urlsplit

import httpx
import pytest

from httpkit import head_seq, ok, problem
from serverkit import ApiServer, graphless_api_server

API = "/api/v1"
WANTS = f"{API}/wants"
PARTITIONS = f"{API}/partitions"
MAX_SAFE_INT = 2**53 - 1  # the largest integer every JSON parser reads exactly
SEEDED_WANT = "strict-want"
LIVE_REFS = ("strict/live/a", "strict/live/b", "strict/live/c")
METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "TRACE")
BOUND_KEYWORDS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf")
SIZE_KEYWORDS = ("minLength", "maxLength", "minItems", "maxItems", "minProperties", "maxProperties")
PYDANTIC_SPELLINGS = ("ge", "le", "gt", "lt")  # what pydantic writes for a bound it cannot place


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApiServer]:
    """A graph-less server with two wants and three Live partitions (so a page of one has a next page)."""
    url = f"sqlite:///{tmp_path_factory.mktemp('strict') / 'partbuild.db'}"
    with graphless_api_server(url) as api:
        ok(api.client.post(WANTS, json={"refs": ["strict/wanted"], "want_id": SEEDED_WANT}), 201)
        ok(api.client.post(WANTS, json={"refs": ["strict/wanted/2"]}), 201)
        for ref in LIVE_REFS:
            ok(api.client.post(f"{PARTITIONS}/observe", json={"ref": ref, "location": f"/data/{ref}"}), 201)
        yield api


@pytest.fixture
def client(server: ApiServer) -> Iterator[httpx.Client]:
    # A client per test: a refused request must not leave a connection state behind for the next case.
    with httpx.Client(base_url=server.url, timeout=30) as fresh:
        yield fresh


@pytest.fixture(scope="module")
def document(server: ApiServer) -> dict[str, Any]:
    """The OpenAPI document as the server serves it."""
    return ok(server.client.get("/openapi.json"))  # type: ignore[no-any-return]


def assert_refused(client: httpx.Client, method: str, url: str, status: int, *words: str, **request: Any) -> str:
    """The request is a problem with `status` whose detail names `words`, and the log head does not move."""
    before = head_seq(client)
    detail = problem(client.request(method, url, **request), status, *words)
    assert head_seq(client) == before, f"{method} {url} was refused but appended"
    return detail


# ----------------------------------------------------------------- wrong JSON types in bodies


def _typed(case_id: str, path: str, body: dict[str, Any], field: str) -> Any:
    return pytest.param(path, body, field, id=case_id)


WRONG_TYPES = [
    _typed("ttl_seconds as a string", WANTS, {"refs": ["t/1"], "ttl_seconds": "10"}, "body.ttl_seconds"),
    _typed("ttl_seconds as true", WANTS, {"refs": ["t/1"], "ttl_seconds": True}, "body.ttl_seconds"),
    _typed("sla_seconds as a string", WANTS, {"refs": ["t/1"], "sla_seconds": "10"}, "body.sla_seconds"),
    _typed("sla_seconds as false", WANTS, {"refs": ["t/1"], "sla_seconds": False}, "body.sla_seconds"),
    _typed("ttl_seconds as 10.5", WANTS, {"refs": ["t/1"], "ttl_seconds": 10.5}, "body.ttl_seconds"),
    _typed(
        "data_timestamp_ms as a string", WANTS, {"refs": ["t/1"], "data_timestamp_ms": "1"}, "body.data_timestamp_ms"
    ),
    _typed(
        "sla_seconds false in a batch",
        f"{WANTS}/batch",
        {"wants": [{"refs": ["t/1"]}, {"refs": ["t/2"], "sla_seconds": False}]},
        "body.wants.1.sla_seconds",
    ),
    _typed(
        "ttl_seconds as a string in a batch",
        f"{WANTS}/batch",
        {"wants": [{"refs": ["t/1"], "ttl_seconds": "10"}]},
        "body.wants.0.ttl_seconds",
    ),
    _typed(
        "sla_seconds as a string in a batch to validate",
        f"{WANTS}/batch/validate",
        {"wants": [{"refs": ["t/1"], "sla_seconds": "10"}]},
        "body.wants.0.sla_seconds",
    ),
    _typed(
        "row_count as a string",
        f"{PARTITIONS}/observe",
        {"ref": "t/src", "location": "/x", "row_count": "3"},
        "body.row_count",
    ),
    _typed("bytes as true", f"{PARTITIONS}/observe", {"ref": "t/src", "location": "/x", "bytes": True}, "body.bytes"),
    _typed(
        "only_this_ref as 1", f"{PARTITIONS}/taint", {"ref": LIVE_REFS[0], "only_this_ref": 1}, "body.only_this_ref"
    ),
    _typed(
        "only_this_ref as a string",
        f"{PARTITIONS}/taint",
        {"ref": LIVE_REFS[0], "only_this_ref": "true"},
        "body.only_this_ref",
    ),
    _typed("retain_days as a string", f"{API}/retention", {"retain_days": "3"}, "body.retain_days"),
    _typed("dry_run as 0", f"{API}/retention", {"retain_days": 3, "dry_run": 0}, "body.dry_run"),
    _typed("refs as a string", WANTS, {"refs": "t/1"}, "body.refs"),
    _typed("comment as a number", WANTS, {"refs": ["t/1"], "comment": 5}, "body.comment"),
]


@pytest.mark.parametrize(("path", "body", "field"), WRONG_TYPES)
def test_a_body_field_of_the_wrong_type_is_refused_and_appends_nothing(
    client: httpx.Client, path: str, body: dict[str, Any], field: str
) -> None:
    """A JSON value of another type than the document's is a 422 naming the field; the log does not move."""
    assert_refused(client, "POST", path, 422, field, json=body)


def test_an_integral_number_is_an_integer(api_server: ApiServer) -> None:
    """JSON Schema counts 10.0 as an integer: the document allows it, so the server takes it as 10."""
    client = api_server.client
    body = {"refs": ["i/1"], "want_id": "integral", "ttl_seconds": 86_400.0, "sla_seconds": 60.0}
    ok(client.post(WANTS, json=body), 201)
    got = ok(client.get(f"{WANTS}/integral"))
    assert (got["ttl_seconds"], got["sla_seconds"]) == (86_400, 60)
    assert isinstance(got["ttl_seconds"], int)


# ----------------------------------------------------------------- cursors


def paged_operations(document: dict[str, Any]) -> list[str]:
    """The paths of every operation with a `cursor` query parameter."""
    return [
        path
        for path, item in document["paths"].items()
        for operation in item.values()
        if any(p["in"] == "query" and p["name"] == "cursor" for p in operation.get("parameters", []))
    ]


CHANGES = f"{API}/changes"
PAGED = [WANTS, PARTITIONS, f"{API}/job-runs", CHANGES]
# What a route needs besides the parameter under test (its required query parameters).
REQUIRED = {CHANGES: {"from_seq": 0}}


def test_the_paged_operations_are_the_ones_tested_here(document: dict[str, Any]) -> None:
    """A new paged route must be added to PAGED, so its cursors are checked below."""
    assert sorted(paged_operations(document)) == sorted(PAGED)


# (cursor, status): a cursor no page gave names nothing (404); the document refuses "" and over 4096 (422).
UNKNOWN_CURSORS = [
    pytest.param("garbage!!", 404, id="garbage"),
    pytest.param("a\x00b", 404, id="NUL byte"),
    pytest.param("\x00", 404, id="only NUL"),
    pytest.param("0", 404, id="seq 0"),
    pytest.param("007", 404, id="leading zeros"),
    pytest.param("99999999999", 404, id="seq after the head"),
    pytest.param("-1", 404, id="negative"),
    pytest.param("²", 404, id="superscript digit"),
    pytest.param("strict/live", 404, id="a prefix of refs"),
    pytest.param("", 422, id="empty"),
    pytest.param("x" * 4097, 422, id="over 4096 characters"),
]


@pytest.mark.parametrize("path", PAGED)
@pytest.mark.parametrize(("cursor", "status"), UNKNOWN_CURSORS)
def test_a_cursor_no_page_gave_is_refused(client: httpx.Client, path: str, cursor: str, status: int) -> None:
    """Every cursor is checked, on every paged route: never the first page again for a cursor it never gave."""
    params = {**REQUIRED.get(path, {}), "cursor": cursor, "limit": 1}
    assert_refused(client, "GET", path, status, "cursor", params=params)


@pytest.mark.parametrize("path", [WANTS, PARTITIONS])
def test_the_cursors_pages_give_are_accepted(client: httpx.Client, path: str) -> None:
    """The check refuses only cursors no page gave: `next_cursor` still gives the next page."""
    first = ok(client.get(path, params={"limit": 1}))
    assert first["next_cursor"] is not None
    second = ok(client.get(path, params={"limit": 1, "cursor": first["next_cursor"]}))
    assert second["items"] and second["items"] != first["items"]


# ----------------------------------------------------------------- numeric bounds of the document


def walk(node: Any, where: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    """Every JSON object of the document, with where it is."""
    if isinstance(node, dict):
        yield where, node
        for key, value in node.items():
            yield from walk(value, f"{where}/{key}")
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from walk(value, f"{where}/{index}")


def test_every_bound_of_the_document_is_an_exact_integer(document: dict[str, Any]) -> None:
    """Numeric bounds are JSON integers within 2^53 - 1 (no 4611686018427387904, no 1000.0), spelled as JSON Schema."""
    found = 0
    for where, node in walk(document):
        for keyword in BOUND_KEYWORDS + SIZE_KEYWORDS:
            value = node.get(keyword)
            if isinstance(value, int | float):  # a property named like a keyword has a schema (a dict) instead
                found += 1
                assert type(value) is int, f"{where}/{keyword} is {value!r}, not an integer"
                assert abs(value) <= MAX_SAFE_INT, f"{where}/{keyword} is {value}, over 2^53 - 1"
        if node.get("type") in ("integer", "number"):
            assert not set(PYDANTIC_SPELLINGS) & set(node), f"{where}: a bound no OpenAPI tool reads: {node}"
    assert found > 20, "the walk found (almost) no bounds: is this the document?"


def path_values(server: ApiServer) -> dict[str, str]:
    """A value for each path parameter of the document: existing things where there are some."""
    live = ok(server.client.get(f"{PARTITIONS}/canonical/{LIVE_REFS[0]}"))
    return {
        "want_id": SEEDED_WANT,
        "ref": LIVE_REFS[0],
        "uuid": live["uuid"],
        "job_run_id": "no-such-run",
        "name": "no-such-group",
        "job": "no-such-job",
    }


def concrete(path: str, values: dict[str, str]) -> str:
    """`path` of the document with its parameters filled in."""
    for name, value in values.items():
        path = path.replace("{" + name + "}", quote(value, safe="/"))
    assert "{" not in path, f"no value for a parameter of {path}: add one to path_values"
    return path


def query_integer_bounds(document: dict[str, Any]) -> list[tuple[str, str, str, str, int, int]]:
    """(method, path, parameter, keyword, bound, one past it) for each integer bound of a query parameter."""
    bounds = []
    for path, item in document["paths"].items():
        for method, operation in item.items():
            for parameter in operation.get("parameters", []):
                if parameter["in"] != "query":
                    continue
                schema = parameter["schema"]
                for option in schema.get("anyOf", [schema]):
                    if option.get("type") != "integer":
                        continue
                    if "maximum" in option:
                        bound = option["maximum"]
                        bounds.append((method.upper(), path, parameter["name"], "maximum", bound, bound + 1))
                    if "minimum" in option:
                        bound = option["minimum"]
                        bounds.append((method.upper(), path, parameter["name"], "minimum", bound, bound - 1))
    return bounds


def test_each_query_integer_bound_is_the_one_enforced(server: ApiServer, client: httpx.Client) -> None:
    """At its documented bound a query integer passes validation; one past it is a 422 naming it."""
    document = ok(client.get("/openapi.json"))
    bounds = query_integer_bounds(document)
    assert {(name, keyword) for _, _, name, keyword, _, _ in bounds} >= {
        ("min_seq", "maximum"),
        ("limit", "maximum"),
        ("limit", "minimum"),
        ("depth", "maximum"),
    }
    values = path_values(server)
    for method, path, name, keyword, bound, past in bounds:
        url = concrete(path, values)
        before = head_seq(client)
        required = REQUIRED.get(path, {})
        at_bound = client.request(method, url, params={**required, name: bound})
        # 404/409: validation passed and the state answered (no such run yet; a seq after the head).
        assert at_bound.status_code in (200, 404, 409), (
            f"{method} {path}?{name}={bound} (the documented {keyword}): {at_bound.status_code} {at_bound.text[:300]}"
        )
        problem(client.request(method, url, params={**required, name: past}), 422, f"query.{name}")
        assert head_seq(client) == before


BODY_BOUNDS = [
    pytest.param(WANTS, {"refs": ["b/ttl"]}, "ttl_seconds", MAX_SAFE_INT, id="ttl_seconds"),
    pytest.param(WANTS, {"refs": ["b/sla"]}, "sla_seconds", MAX_SAFE_INT, id="sla_seconds"),
    pytest.param(WANTS, {"refs": ["b/ts"]}, "data_timestamp_ms", MAX_SAFE_INT, id="data_timestamp_ms"),
    pytest.param(
        f"{PARTITIONS}/observe", {"ref": "b/src", "location": "/b"}, "row_count", MAX_SAFE_INT, id="row_count"
    ),
    pytest.param(f"{PARTITIONS}/observe", {"ref": "b/src", "location": "/b"}, "bytes", MAX_SAFE_INT, id="bytes"),
    pytest.param(f"{API}/retention", {"dry_run": True}, "retain_days", 1_000_000, id="retain_days"),
]


@pytest.mark.parametrize(("path", "body", "field", "maximum"), BODY_BOUNDS)
def test_a_body_integer_at_its_documented_maximum_is_accepted(
    api_server: ApiServer, document: dict[str, Any], path: str, body: dict[str, Any], field: str, maximum: int
) -> None:
    """The documented maximum of a body integer is what the server takes; one more is a 422 naming it."""
    client = api_server.client
    assert documented_maxima(document, field) == {maximum}
    assert_refused(client, "POST", path, 422, f"body.{field}", json={**body, field: maximum + 1})
    accepted = client.post(path, json={**body, field: maximum})
    assert accepted.status_code in (200, 201), accepted.text[:300]


def documented_maxima(document: dict[str, Any], field: str) -> set[int]:
    """The `maximum` of every request body property named `field` in the document's schemas."""
    found = set()
    for _, node in walk(document["components"]["schemas"]):
        schema = node.get("properties", {}).get(field)
        if isinstance(schema, dict):
            found |= {option["maximum"] for option in schema.get("anyOf", [schema]) if "maximum" in option}
    return found


# ----------------------------------------------------------------- 405 and Allow


def test_an_undeclared_method_is_a_405_allowing_exactly_the_documented_methods(
    server: ApiServer, client: httpx.Client, document: dict[str, Any]
) -> None:
    """On every path of the document, each method it does not declare: 405 with `Allow` = the declared ones."""
    values = path_values(server)
    checked = 0
    for path, item in document["paths"].items():
        declared = {method.upper() for method in item}
        url = concrete(path, values)
        for method in METHODS:
            if method in declared:
                continue
            before = head_seq(client)
            response = client.request(method, url)
            problem(response, 405, "method not allowed")
            allowed = {m.strip() for m in response.headers.get("allow", "").split(",") if m.strip()}
            assert allowed == declared, f"{method} {url}: Allow {response.headers.get('allow')!r}, document {declared}"
            assert head_seq(client) == before
            checked += 1
    assert checked >= 5 * len(document["paths"])


def test_a_fixed_path_is_not_a_want_id(client: httpx.Client) -> None:
    """/wants/batch is POST only (GET there is a 405, not the want "batch"), so "batch" is no want id."""
    response = client.get(f"{WANTS}/batch")
    problem(response, 405, "method not allowed")
    assert response.headers["allow"] == "POST"
    assert_refused(client, "POST", WANTS, 422, "body.want_id", "reserved", json={"refs": ["r/b"], "want_id": "batch"})


# ----------------------------------------------------------------- what the HTTP server refuses before the app


def raw_exchange(url: str, request: bytes) -> tuple[int, dict[str, str]]:
    """Send raw bytes to the server; the status and headers of its answer."""
    parts = urlsplit(url)
    with socket.create_connection((parts.hostname, parts.port), timeout=10) as sock:
        sock.sendall(request)
        answer = b""
        while b"\r\n\r\n" not in answer:
            chunk = sock.recv(65_536)
            if not chunk:
                break
            answer += chunk
    head = answer.split(b"\r\n\r\n", 1)[0].decode("latin-1").split("\r\n")
    status = int(head[0].split(" ")[1])
    headers = dict(line.split(": ", 1) for line in head[1:])
    return status, {name.lower(): value for name, value in headers.items()}


# httptools splits a URL with 16-bit offsets: one over 65,535 bytes cannot be parsed (after the whole head is read).
MAX_URL_BYTES = 65_535


def request_for(url: bytes) -> bytes:
    return b"GET " + url + b" HTTP/1.1\r\nHost: t\r\n\r\n"


def url_of(length: int) -> bytes:
    return (b"/healthz?x=" + b"a" * length)[:length]


UNPARSEABLE = [
    pytest.param(request_for(url_of(MAX_URL_BYTES + 1)), id="URL of 65,536 bytes"),
    pytest.param(request_for(WANTS.encode() + b"/" + b"w" * 100_000), id="path of 100,000 bytes"),
    pytest.param(b"GET /a b c HTTP/1.1\r\nHost: t\r\n\r\n", id="request line of four words"),
    pytest.param(b"GET /healthz HTTP/1.1\r\nHost: t\r\nno colon here\r\n\r\n", id="header without a colon"),
    pytest.param(b"NOT HTTP AT ALL\r\n\r\n", id="not HTTP"),
]


def test_the_server_runs_httptools_as_partbuild_serve_does() -> None:
    """These 400s are uvicorn's with httptools: what `partbuild serve` and the fixtures run (uvicorn's default)."""
    from uvicorn.config import Config

    config = Config(app=lambda scope, receive, send: None)
    config.load()
    assert config.http_protocol_class.__name__ == "HttpToolsProtocol"


def test_a_url_of_65535_bytes_is_still_served(server: ApiServer) -> None:
    """The 400 above is the HTTP layer's limit, not the app's: one byte less and the app answers."""
    assert raw_exchange(server.url, request_for(url_of(MAX_URL_BYTES)))[0] == 200


@pytest.mark.parametrize("request_bytes", UNPARSEABLE)
def test_an_unparseable_request_is_a_documented_400(
    server: ApiServer, client: httpx.Client, document: dict[str, Any], request_bytes: bytes
) -> None:
    """uvicorn answers 400 before the app runs; every operation documents a 400 in the content type sent."""
    before = head_seq(client)
    status, headers = raw_exchange(server.url, request_bytes)
    assert status == 400
    media_type = headers["content-type"].split(";")[0].strip()
    for path, item in document["paths"].items():
        for method, operation in item.items():
            declared = operation["responses"].get("400", {}).get("content", {})
            assert media_type in declared, f"{method.upper()} {path} does not document a {media_type} 400"
    assert head_seq(client) == before
