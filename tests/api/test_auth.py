"""Access control over HTTP and the session seam: every declared operation with no token, reader, writer, admin.

One real uvicorn server per module (a graph-less Service on a SQLite file holding tokens of every
role), so the ~200 parametrized cases cost a request each. Unauthorized identities get 401/403 as
problem+json before the request is even validated; allowed ones get anything but 401/403 (their
bodies are left empty on purpose: a 422 or 404 proves the guard let them through without side
effects). The token table is re-read on every request here (`max_age_s=0`), so revocations show at
once; the 1 s cache of real servers has a test of its own.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import pytest
from fastapi import Response
from starlette.requests import Request

from partbuild.api.app import create_app
from partbuild.api.auth import (
    OPEN_ACCESS,
    SESSION_COOKIE,
    SESSION_MAX_AGE_S,
    Authenticator,
    Identity,
    identity_of,
    is_loopback,
    sign_in,
    sign_out,
)
from partbuild.api.errors import Unauthorized
from partbuild.api.service import Service
from partbuild.api.surface import OPERATIONS, Operation
from partbuild.api.surface.common import Body
from partbuild.state.database import Database
from partbuild.state.ops.tokens import Role

from httpkit import api_routes
from serverkit import graphless_api_server, serve_app

PROBLEM_JSON = "application/problem+json"
ROLES = {"reader": Role.READER, "writer": Role.WRITER, "admin": Role.ADMIN}
CALLERS = [None, "reader", "writer", "admin"]
# A value for every path parameter of the declared API: none names anything that exists.
PATH_VALUES = {
    "want_id": "want-none",
    "job_run_id": "run-none",
    "uuid": "00000000-0000-0000-0000-000000000000",
    "ref": "a/b",
    "name": "none",
}


@dataclass
class Secured:
    """The module's server: its URL, an HTTP client, the log, the app's authenticator, a token per role."""

    url: str
    http: httpx.Client
    db: Database
    auth: Authenticator
    tokens: dict[str, str]

    def as_(self, caller: str | None) -> dict[str, str]:
        return {} if caller is None else {"Authorization": f"Bearer {self.tokens[caller]}"}


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secured]:
    url = f"sqlite:///{tmp_path_factory.mktemp('auth') / 'partbuild.db'}"
    with Database.open(url, auto_upgrade=True) as db:
        tokens = {name: db.tokens.add(name, role, now_ms=1) for name, role in ROLES.items()}
        app = create_app(Service(db))
        app.state.auth = auth = Authenticator(db.tokens, max_age_s=0.0)
        with serve_app(app) as base, httpx.Client(base_url=base, timeout=30) as http:
            yield Secured(base, http, db, auth, tokens)


def _request(secured: Secured, operation: Operation, headers: dict[str, str]) -> httpx.Response:
    path = operation.route.replace("{ref:path}", PATH_VALUES["ref"])
    for name, value in PATH_VALUES.items():
        path = path.replace("{" + name + "}", value)
    has_body = any(
        isinstance(extra, Body) for p in operation.parameters for extra in getattr(p.annotation, "__metadata__", ())
    )
    body = b"{}" if has_body else None
    if has_body:
        headers = {**headers, "Content-Type": "application/json"}
    return secured.http.request(operation.method, path, content=body, headers=headers)


def _assert_problem(response: httpx.Response, status: int, detail: str) -> None:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == PROBLEM_JSON
    body = response.json()
    assert body["status"] == status and body["detail"] == detail


@pytest.mark.parametrize("caller", CALLERS, ids=[c or "no-token" for c in CALLERS])
@pytest.mark.parametrize("name", sorted(OPERATIONS))
def test_every_operation_answers_each_role_as_declared(secured: Secured, name: str, caller: str | None) -> None:
    operation = OPERATIONS[name]
    response = _request(secured, operation, secured.as_(caller))
    needed = operation.role
    if needed is None:  # /healthz: open to all
        assert response.status_code == 200
    elif caller is None:
        _assert_problem(response, 401, _NEEDS_TOKEN)
        assert response.headers["www-authenticate"] == 'Bearer realm="partbuild"'
    elif not ROLES[caller].allows(needed):
        detail = f"token {caller!r} has role {caller}; {operation.method} {operation.route} needs {needed.value}"
        _assert_problem(response, 403, detail)
    else:
        assert response.status_code not in (401, 403) and response.status_code < 500, response.text


_NEEDS_TOKEN = "this server needs a token: send 'Authorization: Bearer <token>' (partbuild: --token or PARTBUILD_TOKEN)"


@pytest.mark.parametrize("caller", CALLERS, ids=[c or "no-token" for c in CALLERS])
def test_metrics_need_a_reader(secured: Secured, caller: str | None) -> None:
    response = secured.http.get("/metrics", headers=secured.as_(caller))
    if caller is None:
        _assert_problem(response, 401, _NEEDS_TOKEN)
    else:
        assert response.status_code == 200 and response.text.startswith("#")


WEB_PACKAGE = "partbuild.api.web."


def test_every_api_route_is_a_declared_operation_or_metrics(secured: Secured) -> None:
    """No hand-written API route can miss its guard: each one is derived from a declaration with a role."""
    app = create_app(Service(secured.db))
    served = {
        (method, route.path)
        for route in api_routes(app.routes)
        if not route.endpoint.__module__.startswith(WEB_PACKAGE)  # the pages' own guard: tests/api/web/test_signin.py
        for method in route.methods
    }
    declared = {(op.method, op.route) for op in OPERATIONS.values()}
    assert served - declared == {("GET", "/metrics")}
    assert all(op.role is not None for op in OPERATIONS.values() if op.name != "health")


def test_a_writer_token_records_its_name_whatever_the_user_header_says(secured: Secured) -> None:
    headers = {**secured.as_("writer"), "X-Partbuild-User": "mallory"}
    created = secured.http.post("/api/v1/wants", json={"refs": ["auth/who=1"]}, headers=headers)
    assert created.status_code == 201, created.text
    taint = secured.http.post("/api/v1/wants/batch", json={"wants": [{"refs": ["auth/who=2"]}]}, headers=headers)
    assert taint.status_code == 201, taint.text
    events = secured.http.get("/api/v1/events", params={"limit": 1000}, headers=secured.as_("reader")).json()
    users = {
        event["event"]["source"]["manual"]["user"] for event in events["items"] if event["seq"] >= created.json()["seq"]
    }
    assert users == {"writer"}


def test_unknown_revoked_and_malformed_credentials_are_401(secured: Secured) -> None:
    token = secured.db.tokens.add("short-lived", Role.READER, now_ms=2)
    headers = {"Authorization": f"Bearer {token}"}
    assert secured.http.get("/api/v1/wants", headers=headers).status_code == 200
    secured.db.tokens.revoke("short-lived", now_ms=3)
    _assert_problem(secured.http.get("/api/v1/wants", headers=headers), 401, "unknown or revoked token")
    bad = {"Authorization": "Bearer pbt_" + "x" * 43}
    _assert_problem(secured.http.get("/api/v1/wants", headers=bad), 401, "unknown or revoked token")
    basic = {"Authorization": "Basic YWRtaW46YWRtaW4="}
    _assert_problem(
        secured.http.get("/api/v1/wants", headers=basic), 401, "the Authorization header must be 'Bearer <token>'"
    )
    # A secret never comes back: not in the problem, not in the token list.
    response = secured.http.get("/api/v1/wants", headers=headers)
    assert token not in response.text and token not in repr(secured.db.tokens.all())


def test_a_session_cookie_reads_but_does_not_write_through_the_api(secured: Secured) -> None:
    cookie = secured.auth.seal("writer", int(time.time()) + 60)
    jar = {SESSION_COOKIE: cookie}
    assert httpx.get(f"{secured.url}/api/v1/wants", cookies=jar).status_code == 200
    write = httpx.post(f"{secured.url}/api/v1/wants", json={"refs": ["auth/cookie=1"]}, cookies=jar)
    assert write.status_code == 401 and "session cookie authenticates reads only" in write.json()["detail"]
    forged = cookie[:-2] + ("AA" if not cookie.endswith("AA") else "BB")
    expired = secured.auth.seal("writer", int(time.time()) - 1)
    for value in (forged, expired, "garbage", ""):
        answer = httpx.get(f"{secured.url}/api/v1/wants", cookies={SESSION_COOKIE: value})
        assert answer.status_code == 401, value


def test_without_tokens_access_stays_open_and_the_user_header_names_the_user(sqlite_url: str) -> None:
    with graphless_api_server(sqlite_url) as api:
        created = api.client.post("/api/v1/wants", json={"refs": ["open/x=1"]}, headers={"X-Partbuild-User": "ann"})
        assert created.status_code == 201
        assert api.client.post("/api/v1/retention", json={"retain_days": 1, "dry_run": True}).status_code < 400
        assert api.client.get("/metrics").status_code == 200
        event = api.client.get("/api/v1/events").json()["items"][0]
        assert event["event"]["source"]["manual"]["user"] == "ann"


def test_once_a_token_existed_revoking_every_token_does_not_reopen_access(tmp_path: Path) -> None:
    with Database.open(f"sqlite:///{tmp_path / 'p.db'}") as db:
        auth = Authenticator(db.tokens, max_age_s=0.0)
        assert auth.open_access()
        db.tokens.add("only", Role.ADMIN, now_ms=1)
        db.tokens.revoke("only", now_ms=2)
        assert not auth.open_access()


def test_the_token_cache_bounds_how_long_a_revoked_token_works(tmp_path: Path) -> None:
    with Database.open(f"sqlite:///{tmp_path / 'p.db'}") as db:
        token = db.tokens.add("cached", Role.WRITER, now_ms=1)
        auth = Authenticator(db.tokens, max_age_s=0.3)
        assert auth.active_token(token) is not None
        db.tokens.revoke("cached", now_ms=2)
        time.sleep(0.35)
        assert auth.active_token(token) is None
        assert auth.active_name("cached") is None


# ----------------------------------------------------------------- the session seam for the web pages


def _request_for(auth: Authenticator, *, scheme: str = "http", cookie: str | None = None) -> Request:
    headers = [] if cookie is None else [(b"cookie", f"{SESSION_COOKIE}={cookie}".encode())]
    app = SimpleNamespace(state=SimpleNamespace(auth=auth))
    scope: dict[str, Any] = {
        "type": "http",
        "method": "GET",
        "scheme": scheme,
        "path": "/",
        "query_string": b"",
        "headers": headers,
        "server": ("testserver", 443 if scheme == "https" else 80),
        "app": app,
    }
    return Request(scope)


def _set_cookie(response: Response) -> str:
    values = [value.decode() for name, value in response.raw_headers if name == b"set-cookie"]
    assert len(values) == 1
    return values[0]


def test_sign_in_sets_a_signed_httponly_cookie_that_identity_of_reads(tmp_path: Path) -> None:
    with Database.open(f"sqlite:///{tmp_path / 'p.db'}") as db:
        auth = Authenticator(db.tokens, max_age_s=0.0)
        assert identity_of(_request_for(auth)) == OPEN_ACCESS  # no tokens yet: open access
        token = db.tokens.add("ann", Role.WRITER, now_ms=1)
        assert identity_of(_request_for(auth)) is None

        response = Response()
        assert sign_in(_request_for(auth, scheme="https"), response, token) == Identity("ann", Role.WRITER, "session")
        header = _set_cookie(response)
        value = header.split(";")[0].removeprefix(f"{SESSION_COOKIE}=")
        attributes = {part.strip().lower() for part in header.split(";")[1:]}
        assert {"httponly", "secure", "samesite=lax", "path=/", f"max-age={SESSION_MAX_AGE_S}"} <= attributes
        assert token not in header and "ann" not in value.split(".")[1]

        assert identity_of(_request_for(auth, cookie=value)) == Identity("ann", Role.WRITER, "session")
        assert identity_of(_request_for(auth, cookie=value[:-1] + ("A" if value[-1] != "A" else "B"))) is None

        plain = Response()
        sign_in(_request_for(auth, scheme="http"), plain, token)
        assert "secure" not in {part.strip().lower() for part in _set_cookie(plain).split(";")}

        db.tokens.revoke("ann", now_ms=2)  # revoking the token ends its sessions
        assert identity_of(_request_for(auth, cookie=value)) is None
        with pytest.raises(Unauthorized, match="unknown or revoked token"):
            sign_in(_request_for(auth), Response(), token)


def test_sign_out_clears_the_cookie_and_sessions_survive_a_new_authenticator(tmp_path: Path) -> None:
    with Database.open(f"sqlite:///{tmp_path / 'p.db'}") as db:
        token = db.tokens.add("bob", Role.READER, now_ms=1)
        response = Response()
        sign_in(_request_for(Authenticator(db.tokens)), response, token)
        value = _set_cookie(response).split(";")[0].removeprefix(f"{SESSION_COOKIE}=")
        # Another process serving the same database checks with the same per-database key.
        assert identity_of(_request_for(Authenticator(db.tokens), cookie=value)) == Identity(
            "bob", Role.READER, "session"
        )
        out = Response()
        sign_out(out)
        cleared = _set_cookie(out).lower()
        assert cleared.startswith(f"{SESSION_COOKIE}=") and "max-age=0" in cleared


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.3.2.1", True),
        ("::1", True),
        ("[::1]", True),
        ("localhost", True),
        ("LOCALHOST", True),
        ("0.0.0.0", False),
        ("::", False),
        ("10.0.0.1", False),
        ("example.com", False),
        ("localhost.example.com", False),
    ],
)
def test_loopback_addresses(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback
