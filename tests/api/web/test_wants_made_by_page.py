"""The web wants page: who made each want, the `made_by` filter, and people's wants first (issue 35, item 4).

A real Service on a SQLite file, served through Starlette's TestClient like tests/api/web/test_pages.py:
a person's two wants, then more wants made by a reaction than a page holds, so the newest page of all
wants shows none of the person's. Also the page parameters this issue made strict: a value a page cannot
use is a 422 page saying why (never ignored, never a 500 from an integer too long for `int()` or SQL).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from urllib.parse import urlencode

import pytest
from fastapi.testclient import TestClient

from partbuild.api.app import create_app
from partbuild.api.models.wants import WantRequest
from partbuild.api.service import Service
from partbuild.api.web.views import PAGE
from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.database import Database
from partbuild.state.fold.reactions import reaction_want_id
from partbuild.state.log.events import envelope, system

REACTED = PAGE + 5  # more than a page of automation's wants after the person's


@dataclass
class Wants:
    client: TestClient
    service: Service
    raw_uuid: str
    people_seq: int  # the log head once the person's wants were made, before any reaction


def _fire(service: Service, cause: str, n: int) -> None:
    ref = f"d/{n}"
    want_id = reaction_want_id("daily", pb.REACTION_KIND_UPSTREAM_CHANGE, cause, ref)
    fired = pb.ReactionFired(
        job="daily",
        kind=pb.REACTION_KIND_UPSTREAM_CHANGE,
        cause_ref="raw/1",
        cause_instance_uuid=cause,
        want=pb.WantCreate(want_id=want_id, partition_refs=[ref]),
    )
    service.log.append([envelope(fired, source=system("orchestrator"), timestamp_ms=service.clock())])


@pytest.fixture(scope="module")
def wants(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Wants]:
    url = f"sqlite:///{tmp_path_factory.mktemp('web_made_by') / 'partbuild.db'}"
    with Database.open(url, auto_upgrade=True) as db:
        service = Service(db)
        service.log.append([envelope(pb.PartitionObserved(partition_ref="raw/1", location="/data/raw/1"))])
        service.refresh()
        raw_uuid = service.state.canonical["raw/1"]
        service.create_want(WantRequest(refs=["p/1"], want_id="ann-first"), "ann")
        people_seq = service.create_want(WantRequest(refs=["p/2"], want_id="ann-second"), "ann").seq
        for n in range(REACTED):
            _fire(service, raw_uuid, n)
        service.refresh()
        with TestClient(create_app(service)) as client:
            yield Wants(client, service, raw_uuid, people_seq)


def page(wants: Wants, path: str, status: int = 200, **params: object) -> str:
    response = wants.client.get(f"{path}?{urlencode(params)}" if params else path)
    assert response.status_code == status, response.text[:2000]
    return response.text


def rows(html: str, table: str) -> list[tuple[str, str]]:
    """(want id, made by) of each row of the table with data-testid `table`, in order."""
    found = re.search(rf'data-testid="{table}">(.*?)</table>', html, re.S)
    assert found is not None, f"no {table} on the page"
    return re.findall(r'data-testid="want-row" data-want-id="([^"]+)" data-made-by="([^"]+)"', found.group(1))


def test_a_persons_wants_come_first_though_automation_made_more_than_a_page(wants: Wants) -> None:
    """Unfiltered, the newest page of all wants is the reaction's; the people's section above it shows ann's."""
    html = page(wants, "/wants")
    assert html.index('data-testid="people-wants"') < html.index('data-testid="wants-list"')
    assert rows(html, "people-wants") == [("ann-second", "user:ann"), ("ann-first", "user:ann")]
    listed = rows(html, "wants-list")
    assert len(listed) == PAGE and {made_by for _, made_by in listed} == {"reaction:daily"}
    assert 'href="/wants?made_by=user%3Aann"' in html  # each maker links to its filter


def test_the_filter_lists_only_that_makers_wants_and_no_people_section(wants: Wants) -> None:
    html = page(wants, "/wants", made_by="user:ann")
    assert 'data-testid="people-wants"' not in html
    assert rows(html, "wants-list") == [("ann-second", "user:ann"), ("ann-first", "user:ann")]
    reacted = page(wants, "/wants", made_by="reaction")
    assert {made_by for _, made_by in rows(reacted, "wants-list")} == {"reaction:daily"}
    assert 'data-testid="next-page"' in reacted and "made_by=reaction" in reacted  # the pager keeps the filter
    assert rows(page(wants, "/wants", made_by="schedule"), "wants-list") == []
    assert 'value="user:ann"' in html  # the filter shows what it filters by


def test_the_filter_holds_as_of_a_seq(wants: Wants) -> None:
    """Time travel: as of the person's second want, the reaction had made nothing; the filter still applies."""
    then = page(wants, "/wants", made_by="reaction", as_of=wants.people_seq)
    assert rows(then, "wants-list") == []
    people = page(wants, "/wants", made_by="user", as_of=wants.people_seq - 1)
    assert rows(people, "wants-list") == [("ann-first", "user:ann")]


@pytest.mark.parametrize(
    ("made_by", "words"),
    [("robot", "must be one of user, schedule, reaction"), ("user:", "no name after it"), ("Reaction", "must be")],
)
def test_an_unknown_maker_is_a_422_page_saying_why(wants: Wants, made_by: str, words: str) -> None:
    head = wants.service.log.head()
    html = page(wants, "/wants", 422, made_by=made_by)
    assert 'data-testid="error-status"' in html and words in html.replace("&#39;", "'")
    assert wants.service.log.head() == head


def test_page_parameters_are_strict_and_bounded(wants: Wants) -> None:
    """What a page cannot use is a 422 naming the parameter: never ignored, never a 500."""
    instance = f"/instances/{wants.raw_uuid}"
    cases = [
        ("/wants", {"state": "bogus"}, "state must be one of"),
        ("/wants", {"before": "9" * 40}, "cursor must be a seq"),
        ("/", {"as_of": "9" * 5000}, "as_of must be a seq"),
        (instance, {"depth": "51"}, "depth must be an integer from 0 to 50"),
        (instance, {"depth": "9" * 5000}, "depth must be"),
        (instance, {"depth": "²"}, "depth must be"),
        (instance, {"direction": "sideways"}, "direction must be one of upstream, downstream, both"),
        ("/changes", {"from": "1", "to": "99999999999999999"}, "to must be a seq"),
    ]
    for path, params, words in cases:
        assert words in page(wants, path, 422, **params).replace("&#39;", "'"), (path, params)
    assert 'data-depth="0"' in page(wants, instance, depth="0", direction="both")


@pytest.mark.parametrize("sla", ["²", "9" * 5000, "9007199254740992", "-1"])
def test_the_want_forms_sla_is_ascii_digits_within_the_bound(wants: Wants, sla: str) -> None:
    found = re.search(r'name="csrf" value="([^"]+)"', page(wants, "/wants"))
    assert found is not None
    head = wants.service.log.head()
    form = {"csrf": found.group(1), "mode": "one", "ref": "form/x", "sla_seconds": sla, "action": "want"}
    response = wants.client.post("/actions/want", data=form)
    assert response.status_code == 422 and "sla_seconds must be a whole number" in response.text, response.text[:500]
    assert wants.service.log.head() == head
