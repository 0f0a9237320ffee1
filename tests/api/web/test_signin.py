"""The web UI under access control: signing in with a token, roles on pages and forms, signing out.

A real SQLite file with a reader, a writer and an admin token, the real app through Starlette's
TestClient (cookies kept per client, as a browser keeps them).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from partbuild.api.app import create_app
from partbuild.api.auth import SESSION_COOKIE, Authenticator
from partbuild.api.service import Service
from partbuild.api.web.signin import safe_next
from partbuild.state.database import Database
from partbuild.state.ops.tokens import Role

from httpkit import api_routes


@dataclass
class Site:
    app: object
    db: Database
    service: Service
    tokens: dict[str, str]

    def browser(self) -> TestClient:
        return TestClient(self.app, follow_redirects=False)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    path: Path = tmp_path_factory.mktemp("signin") / "partbuild.db"
    with Database.open(f"sqlite:///{path}", auto_upgrade=True) as db:
        roles = {"rita": Role.READER, "wes": Role.WRITER, "ada": Role.ADMIN}
        tokens = {name: db.tokens.add(name, role, now_ms=1) for name, role in roles.items()}
        service = Service(db)
        app = create_app(service)
        app.state.auth = Authenticator(db.tokens, max_age_s=0.0)  # revocations seen at once
        with TestClient(app):  # runs the lifespan (the service's tailer) once for the module
            yield Site(app, db, service, tokens)


def _csrf(html: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', html)
    assert found is not None, html[:500]
    return found.group(1)


def signed_in(site: Site, name: str, next_path: str = "/") -> TestClient:
    browser = site.browser()
    form = browser.get("/signin", params={"next": next_path})
    assert form.status_code == 200 and 'id="signin-form"' in form.text
    answer = browser.post("/signin", data={"csrf": _csrf(form.text), "token": site.tokens[name], "next": next_path})
    assert answer.status_code == 303 and answer.headers["location"] == next_path
    cookie = answer.headers["set-cookie"]
    assert SESSION_COOKIE in cookie and "HttpOnly" in cookie and "SameSite=lax" in cookie
    return browser


def test_pages_send_a_browser_without_credentials_to_sign_in(site: Site) -> None:
    browser = site.browser()
    answer = browser.get("/wants", params={"state": "active"})
    assert answer.status_code == 303 and answer.headers["location"] == "/signin?next=%2Fwants%3Fstate%3Dactive"
    posted = browser.post("/actions/want", data={"mode": "one", "ref": "x/anon"})
    assert posted.status_code == 303 and posted.headers["location"].startswith("/signin")
    assert browser.get("/static/app.css").status_code == 200  # the sign-in page needs its stylesheet


def test_a_wrong_token_or_a_missing_csrf_token_does_not_sign_in(site: Site) -> None:
    browser = site.browser()
    csrf = _csrf(browser.get("/signin").text)
    wrong = browser.post("/signin", data={"csrf": csrf, "token": "pbt_" + "A" * 43, "next": "/"})
    assert wrong.status_code == 401 and "unknown or revoked token" in wrong.text
    assert "pbt_" + "A" * 43 not in wrong.text and SESSION_COOKIE not in wrong.headers.get("set-cookie", "")
    no_csrf = site.browser().post("/signin", data={"token": site.tokens["ada"], "next": "/"})
    assert no_csrf.status_code == 403 and SESSION_COOKIE not in no_csrf.headers.get("set-cookie", "")


def test_a_reader_sees_pages_without_forms_and_cannot_post(site: Site) -> None:
    browser = signed_in(site, "rita", "/wants")
    html = browser.get("/wants").text
    assert "rita (reader)" in html and 'id="want-form"' not in html and 'id="signout-form"' in html
    head = site.db.log.head()
    posted = browser.post("/actions/want", data={"csrf": _csrf(html), "mode": "one", "ref": "x/reader"})
    assert posted.status_code == 403 and "rita (reader) may not change anything" in posted.text
    assert site.db.log.head() == head


def test_a_writer_wants_through_the_form_and_is_recorded_by_token_name(site: Site) -> None:
    browser = signed_in(site, "wes")
    html = browser.get("/wants").text
    assert 'id="want-form"' in html
    form = {"csrf": _csrf(html), "mode": "one", "ref": "web/who=1"}
    posted = browser.post("/actions/want", data=form, headers={"X-Partbuild-User": "mallory"})
    assert posted.status_code == 303, posted.text[:500]
    site.service.refresh()
    [stored] = site.db.log.read(site.db.log.head() - 1, 1)
    assert stored.event_type == "want_create" and stored.to_event().source.manual.user == "wes"


def test_signing_out_and_revoking_end_the_session(site: Site) -> None:
    browser = signed_in(site, "ada")
    html = browser.get("/").text
    out = browser.post("/signout", data={"csrf": _csrf(html)})
    assert out.status_code == 303 and out.headers["location"] == "/signin"
    assert browser.get("/").status_code == 303
    name = "temp"
    site.tokens[name] = site.db.tokens.add(name, Role.READER, now_ms=2)
    browser = signed_in(site, name)
    assert browser.get("/").status_code == 200
    site.db.tokens.revoke(name, now_ms=3)
    assert browser.get("/").status_code == 303


@pytest.mark.parametrize(
    ("asked", "goes"),
    [("/wants?x=1", "/wants?x=1"), ("//evil.example/", "/"), ("/\\evil.example", "/"), ("https://evil/", "/")],
)
def test_next_only_leads_to_this_site(asked: str, goes: str) -> None:
    assert safe_next(asked) == goes


def test_every_page_and_form_route_asks_for_credentials(site: Site) -> None:
    """No page can forget the guard: each route of the web UI but the sign-in itself sends a stranger away."""
    web = [r for r in api_routes(site.app.routes) if r.endpoint.__module__.startswith("partbuild.api.web.")]  # type: ignore[attr-defined]
    assert len(web) >= 15
    browser = site.browser()
    for route in web:
        path = route.path.replace("{want_id}", "w").replace("{run_id}", "r").replace("{uuid}", "u")
        for method in route.methods - {"HEAD"}:
            answer = browser.request(method, path)
            if path in ("/signin", "/signout"):
                assert answer.status_code in (200, 415), (method, path)  # the form, or no form posted
            else:
                assert answer.status_code == 303 and answer.headers["location"].startswith("/signin"), (method, path)
