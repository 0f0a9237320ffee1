"""The automation page (`/automation`) and its form (`/actions/schedule`) over a real Service with a graph of two
schedules on a real SQLite file: the schedules with their ticks and wants, as of a seq; pause, resume and tick now."""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from partbuild.api.app import create_app
from partbuild.api.service import Service
from partbuild.orchestrator.context import JobContext
from partbuild.orchestrator.graph import Graph, Job
from partbuild.orchestrator.schedules import Schedule
from partbuild.orchestrator.ticks import Ticker
from partbuild.state.database import Database
from partbuild.state.log.events import system

HOUR = 3_600_000
T0 = 1_800_000_000_000 // HOUR * HOUR


def noop(ctx: JobContext) -> None:
    """Never run."""


def hourly_report(tick: dt.datetime) -> list[str]:
    return [f"report/{tick:%Y%m%d%H}"]


def broken(tick: dt.datetime) -> list[str]:
    raise ValueError("<b>no</b> calendar")


GRAPH = Graph(
    [Job("report", ["report/{key}"], noop)],
    schedules=[
        Schedule("hourly", hourly_report, every=dt.timedelta(hours=1)),
        Schedule("broken", broken, every=dt.timedelta(hours=1)),
    ],
)


class Clock:
    now_ms = T0 + 5

    def __call__(self) -> int:
        return self.now_ms


@pytest.fixture
def client(tmp_path: Path) -> Iterator[tuple[TestClient, Service, Clock]]:
    clock = Clock()
    with Database.open(f"sqlite:///{tmp_path / 'pb.db'}", auto_upgrade=True) as db:
        service = Service(db, graph=GRAPH, clock=clock)
        ticker = Ticker(GRAPH, clock=clock)
        ticker.first_seen_ms = {"hourly": T0 - HOUR, "broken": T0 - HOUR}
        for now in (T0 + 5, T0 + HOUR + 5):  # two ticks of each
            with service.live.read() as state:
                events = ticker.due(state, now, lambda key: True, system("orchestrator"))
            service.log.append(events)
            service.refresh()
        with TestClient(create_app(service)) as test_client:
            yield test_client, service, clock


def rows(html: str) -> dict[str, str]:
    found = re.findall(r'(<tr data-testid="schedule-row" data-schedule="([^"]+)".*?</tr>)', html, re.S)
    return {name: row for row, name in found}


def test_the_page_shows_each_schedule_with_its_ticks_wants_and_error_as_of_a_seq(
    client: tuple[TestClient, Service, Clock],
) -> None:
    test_client = client[0]
    html = test_client.get("/automation").text
    shown = rows(html)
    assert set(shown) == {"hourly", "broken"}
    hourly = shown["hourly"]
    assert 'data-paused="false"' in hourly and "every 1:00:00" in hourly
    wants = re.findall(r'data-testid="want-link">([^<]+)<', hourly)
    assert wants == ["schedule:hourly:2027-01-15T09:00:00Z", "schedule:hourly:2027-01-15T08:00:00Z"]  # newest first
    assert "&lt;b&gt;no&lt;/b&gt; calendar" in shown["broken"]  # the error, as text
    assert 'data-testid="nav-automation"' in html
    then = rows(test_client.get("/automation", params={"as_of": 2}).text)  # after the first ticks only
    assert re.findall(r'data-testid="want-link">([^<]+)<', then["hourly"]) == ["schedule:hourly:2027-01-15T08:00:00Z"]
    assert 'data-testid="schedule-form"' not in test_client.get("/automation", params={"as_of": 2}).text


def test_the_form_pauses_resumes_and_ticks_now(client: tuple[TestClient, Service, Clock]) -> None:
    test_client, service, clock = client
    html = test_client.get("/automation").text
    token = re.search(r'name="csrf" value="([^"]+)"', html)
    assert token is not None
    form = {"csrf": token.group(1), "schedule": "hourly"}
    for action, paused in (("pause", "true"), ("resume", "false")):
        response = test_client.post("/actions/schedule", data=form | {"action": action}, follow_redirects=False)
        assert (response.status_code, response.headers["location"]) == (303, "/automation")
        assert f'data-paused="{paused}"' in rows(test_client.get("/automation").text)["hourly"]
    clock.now_ms = T0 + HOUR + 60_000
    head = service.log.head()
    response = test_client.post("/actions/schedule", data=form | {"action": "trigger"}, follow_redirects=False)
    assert response.status_code == 303 and service.log.head() == head + 1
    assert "schedule:hourly:manual:2027-01-15T09:01:00Z" in rows(test_client.get("/automation").text)["hourly"]
    refused = test_client.post("/actions/schedule", data=form | {"action": "resume"})
    assert refused.status_code == 409 and "already running" in refused.text
    bad = test_client.post("/actions/schedule", data=form | {"action": "explode"})
    assert bad.status_code == 422 and service.log.head() == head + 1
    no_csrf = test_client.post("/actions/schedule", data={"schedule": "hourly", "action": "pause"})
    assert no_csrf.status_code == 403 and service.log.head() == head + 1


def test_the_page_lists_reactions_with_what_they_owe_and_their_errors(tmp_path: Path) -> None:
    from partbuild.orchestrator.reactions import on_upstream_change

    from golden_reaction_notes import reaction_note_events

    reacting = Graph([Job("d", ["d/{n}"], noop, reactions=[on_upstream_change(debounce=dt.timedelta(seconds=30))])])
    with Database.open(f"sqlite:///{tmp_path / 'r.db'}", auto_upgrade=True) as db:
        db.log.append(reaction_note_events())
        with TestClient(create_app(Service(db, graph=reacting))) as client:
            page = client.get("/automation").text
            then = client.get("/automation", params={"as_of": 14}).text
    rows = re.findall(r'<tr data-testid="reaction-row" data-job="([^"]+)" data-kind="([^"]+)">', page)
    assert rows == [("d", "on_upstream_change"), ("gone", "on_upstream_change")]
    assert "job gone is not in the graph" in page and "30.0 s" in page and "d/1" in page
    assert re.findall(r'data-testid="reaction-pending">(\d+)', then) == ["1"]  # as of seq 14: owed, not fired
    assert "never" in then
