"""Bulk actions from the pages (api/web/bulk.py): the grid's form, a partition's retry/rebuild button.

A real Service on a real SQLite file holding `gridkit`'s W1 history (failed, tainted and Live dailies),
under access control (a reader and a writer token, sent as bearer tokens), through Starlette's TestClient.
Only writers get the controls; a preview shows the dry run's count and records nothing; a confirmed post
with the CSRF field appends one want naming exactly the failed refs and goes back to the grid, where they
left the failed state; without the field, or from a reader, nothing is recorded; over the size limit the
API's 413 message is on the page.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from partbuild.api.app import create_app
from partbuild.api.auth import Authenticator
from partbuild.api.service import Service
from partbuild.api.web.bulk import safe_back
from partbuild.state.database import Database
from partbuild.state.ops.tokens import Role

from gridkit import TAINTED, grid_graph, write_history

GRID = "/jobs/daily_clicks"


@dataclass
class Site:
    service: Service
    writer: TestClient
    reader: TestClient


@pytest.fixture
def site(tmp_path: Path) -> Iterator[Site]:
    url = f"sqlite:///{tmp_path / 'partbuild.db'}"
    write_history(url)
    with Database.open(url, auto_upgrade=True) as db:
        tokens = {
            name: db.tokens.add(name, role, now_ms=1) for name, role in (("rita", Role.READER), ("wes", Role.WRITER))
        }
        service = Service(db, graph=grid_graph())
        app = create_app(service)
        app.state.auth = Authenticator(db.tokens, max_age_s=0.0)

        def client(name: str) -> TestClient:
            return TestClient(app, follow_redirects=False, headers={"Authorization": f"Bearer {tokens[name]}"})

        with client("wes") as writer, client("rita") as reader:
            yield Site(service, writer, reader)
        service.stop()


def _get(client: TestClient, path: str, **params: str) -> str:
    response = client.get(path, params=params or None)
    assert response.status_code == 200, response.text[:1000]
    return response.text


def _cells(html: str) -> dict[str, str]:
    return dict(re.findall(r'data-testid="grid-cell" data-ref="([^"]+)" data-state="([a-z_]+)"', html))


def _csrf(html: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', html)
    assert found is not None, html[:500]
    return found.group(1)


def _failed(site: Site) -> list[str]:
    return sorted(ref for ref, state in _cells(_get(site.writer, GRID)).items() if state == "failed")


def _form(token: str, refs: list[str], step: str, **fields: str) -> dict[str, str]:
    return {
        "csrf": token,
        "step": step,
        "scope": "refs",
        "refs": "\n".join(refs),
        "action": "retry",
        "back": GRID,
    } | fields


def test_only_writers_get_the_bulk_form_and_the_retry_or_rebuild_buttons(site: Site) -> None:
    failed = _failed(site)
    assert failed
    grid = _get(site.writer, GRID)
    assert 'id="bulk-form"' in grid and 'src="/static/bulk.js"' in grid and 'data-testid="bulk-scope-filter"' in grid
    assert 'value="agg/daily_clicks/site=0/date="' in grid  # the filter's selection: the job's one pattern
    assert 'id="bulk-form"' not in _get(site.reader, GRID)
    assert 'id="bulk-form"' not in _get(site.writer, GRID, as_of="10")  # the past cannot be changed
    assert 'data-testid="bulk-scope-filter"' not in _get(site.writer, GRID, state="warning")  # not a prefix's filter
    pages = {failed[0]: "retry-button", TAINTED: "rebuild-button"}
    for ref, button in pages.items():
        assert f'data-testid="{button}"' in _get(site.writer, "/partition", ref=ref)
        assert 'id="rebuild-form"' not in _get(site.reader, "/partition", ref=ref)
    live = next(ref for ref, state in _cells(grid).items() if state == "live")
    assert 'id="rebuild-form"' not in _get(site.writer, "/partition", ref=live)


def test_a_preview_shows_the_dry_run_count_then_the_confirmation_makes_one_want(site: Site) -> None:
    grid = _get(site.writer, GRID)
    failed, token, service = _failed(site), _csrf(grid), site.service
    live = next(ref for ref, state in _cells(grid).items() if state == "live")
    head = service.log.head()
    preview = site.writer.post("/actions/bulk", data=_form(token, [*failed, live], "preview"))
    assert preview.status_code == 200, preview.text
    counts = re.search(
        r'data-testid="bulk-preview" data-action="retry" data-selected="(\d+)" data-acted-on="(\d+)"', preview.text
    )
    assert counts is not None and counts.groups() == (str(len(failed) + 1), str(len(failed)))
    assert 'data-testid="bulk-confirm"' in preview.text and service.log.head() == head
    confirm = dict(re.findall(r'<input type="hidden" name="([a-z_]+)" value="([^"]*)"', preview.text))
    refs = re.search(r'<textarea name="refs" hidden>([^<]*)</textarea>', preview.text)
    assert refs is not None and confirm["step"] == "run"
    done = site.writer.post("/actions/bulk", data=confirm | {"refs": refs.group(1)})
    assert done.status_code == 303, done.text
    (row,) = service.log.read(head, 10)
    assert row.event_type == "want_create"
    want_id = re.search(r"bulk_want=([^&]+)", done.headers["location"])
    assert want_id is not None and sorted(service.want(want_id.group(1)).refs) == failed
    assert done.headers["location"].startswith(f"{GRID}?bulk=retry&bulk_acted={len(failed)}&")
    after = _get(site.writer, done.headers["location"])
    assert 'data-testid="bulk-done" data-action="retry"' in after
    assert {_cells(after)[ref] for ref in failed} == {"missing"}


def test_without_the_csrf_field_or_as_a_reader_nothing_is_recorded(site: Site) -> None:
    failed, token = _failed(site), _csrf(_get(site.writer, GRID))
    head = site.service.log.head()
    refused = site.writer.post(
        "/actions/bulk", data={k: v for k, v in _form(token, failed, "run").items() if k != "csrf"}
    )
    assert refused.status_code == 403 and "CSRF" in refused.text
    wrong = site.writer.post("/actions/bulk", data=_form("x" * 43, failed, "run"))
    assert wrong.status_code == 403
    _get(site.reader, GRID)  # no form for a reader, but the CSRF cookie: a post as valid as it can make
    reader_token = site.reader.cookies.get("partbuild_csrf")
    assert reader_token
    by_reader = site.reader.post("/actions/bulk", data=_form(reader_token, failed, "run"))
    assert by_reader.status_code == 403 and "rita (reader) may not change anything" in by_reader.text
    assert site.service.log.head() == head and _failed(site) == failed


def test_over_the_size_limit_the_page_shows_the_413_message(site: Site, monkeypatch: pytest.MonkeyPatch) -> None:
    import partbuild.api.service.bulk as bulk_service

    monkeypatch.setattr(bulk_service, "MAX_BULK_REFS", 2)  # the real limit, 100,000, takes a bigger log
    failed, token = _failed(site), _csrf(_get(site.writer, GRID))
    head = site.service.log.head()
    for fields in [{}, {"scope": "filter", "ref_prefix": "agg/daily_clicks/", "state": ""}]:
        answer = site.writer.post("/actions/bulk", data=_form(token, failed, "run") | fields)
        assert answer.status_code == 413, answer.text
        assert 'data-testid="form-error"' in answer.text and re.search(r"(at most|more than) 2\b", answer.text)
        assert f'<a href="{GRID}" data-testid="bulk-back">' in answer.text
    assert site.service.log.head() == head


def test_the_filter_scope_the_rebuild_button_and_refused_fields(site: Site) -> None:
    failed, token, service = _failed(site), _csrf(_get(site.writer, GRID)), site.service
    prefix = {"scope": "filter", "ref_prefix": "agg/daily_clicks/site=0/", "state": "failed"}
    preview = site.writer.post("/actions/bulk", data=_form(token, [], "preview") | prefix)
    assert f'data-selected="{len(failed)}" data-acted-on="{len(failed)}"' in preview.text
    head = service.log.head()
    rebuild = {"back": f"/partition?ref={TAINTED}", "action": "want"}
    done = site.writer.post("/actions/bulk", data=_form(token, [TAINTED], "run") | rebuild)
    assert done.status_code == 303 and done.headers["location"].startswith(f"/partition?ref={TAINTED}&bulk=want&")
    (row,) = service.log.read(head, 10)
    assert row.event_type == "want_create" and service.canonical(TAINTED).state == "missing"
    refusals = {
        "a taint needs a reason": {"action": "taint"},
        "action must be one of": {"action": "delete"},
        "select at least one partition": {"refs": ""},
        "scope must be refs or filter": {"scope": "all"},
    }
    for message, fields in refusals.items():
        answer = site.writer.post("/actions/bulk", data=_form(token, failed, "run") | fields)
        assert answer.status_code == 422 and message in answer.text, (fields, answer.text[:800])
    nothing = site.writer.post("/actions/bulk", data=_form(token, failed[:1], "preview", action="recheck"))
    assert 'data-testid="bulk-nothing"' in nothing.text and 'data-testid="bulk-confirm"' not in nothing.text
    assert service.log.head() == head + 1


def test_only_this_site_s_grid_and_partition_pages_are_gone_back_to() -> None:
    assert safe_back("/jobs/daily_clicks?state=failed") == "/jobs/daily_clicks?state=failed"
    assert safe_back("/partition?ref=a%2Fb") == "/partition?ref=a%2Fb"
    for outside in ["https://evil.example/jobs/", "//evil.example/jobs/x", "/\\evil.example", "/wants", "javascript:x"]:
        assert safe_back(outside) == "/"
