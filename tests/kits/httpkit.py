"""Helpers of the HTTP API tests: checked answers, requests by resource, paging, bad-input cases, the route walker.

The contract checked throughout: a success is `application/json`; every error is
`application/problem+json` `{type, title, status, detail}` whose detail names what was wrong;
bad input is a 4xx (never a 5xx) and changes nothing (the log head from GET /healthz is the
same before and after).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from fastapi.routing import APIRoute

API = "/api/v1"
WANTS = f"{API}/wants"
PARTITIONS = f"{API}/partitions"
JSON = "application/json"
PROBLEM_JSON = "application/problem+json"

# What the module-scoped `shared` server of conftest holds from the start: a want (so its ref is
# Missing) and a Live source.
SEEDED_WANT = "seeded-want"
SEEDED_MISSING = "wanted/missing"
SEEDED_LIVE = "src/live"
UNKNOWN_UUID = "00000000-0000-0000-0000-000000000000"


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
    """POST /wants; the WantCreatedOut body."""
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
    """Every page of a cursor-paged list, following `next_cursor` until it is null (as of one seq, when given)."""
    pages: list[list[dict[str, Any]]] = []
    cursor: str | None = None
    while True:
        query = {**params, "limit": limit, **({"cursor": cursor} if cursor is not None else {})}
        page = ok(client.get(path, params=query))
        assert set(page) == {"items", "next_cursor", "as_of_seq"} and len(page["items"]) <= limit
        assert page["as_of_seq"] == params.get("as_of_seq", page["as_of_seq"]), "a page says the seq asked for"
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


def seed(client: httpx.Client) -> None:
    """What the `shared` server holds from the start: SEEDED_WANT of SEEDED_MISSING, and SEEDED_LIVE."""
    want(client, [SEEDED_MISSING], want_id=SEEDED_WANT)
    observe(client, SEEDED_LIVE, "/data/live")


def fresh_client(url: str) -> Iterator[httpx.Client]:
    """A client of the server at `url`, for one test.

    After a 500 the server closes the connection, which must not leak into the next case.
    """
    with httpx.Client(base_url=url, timeout=30) as client:
        yield client


def bad(case_id: str, method: str, url: str, status: int, *words: str, xfail: str = "", **request: Any) -> Any:
    """One bad request: what is sent, the 4xx it must get, and words its detail must contain.

    A case that pins a known bug carries `xfail` (strict) with the reason, so it turns red once the bug
    is fixed and the marker can go.
    """
    marks = [pytest.mark.xfail(strict=True, reason=xfail)] if xfail else []
    return pytest.param(method, url, request, status, words, id=case_id, marks=marks)


def assert_refused_without_change(
    client: httpx.Client, method: str, url: str, request: dict[str, Any], status: int, words: tuple[str, ...]
) -> None:
    """The request gets the 4xx problem it should, and the log head does not move."""
    before = ok(client.get("/healthz"))
    problem(client.request(method, url, **request), status, *words)
    assert ok(client.get("/healthz")) == before


def api_routes(routes: list[Any]) -> Iterator[APIRoute]:
    """Every APIRoute of an app, through the routers it includes (FastAPI wraps each included router)."""
    for route in routes:
        if isinstance(route, APIRoute):
            yield route
        elif hasattr(route, "original_router"):
            yield from api_routes(route.original_router.routes)
