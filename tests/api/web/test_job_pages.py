"""The job graph page (/jobs) and a job's partition grid (/jobs/{name}) over the W1 history of `gridkit`.

A real Service on a real SQLite file through Starlette's TestClient: the grid shows each known daily in the
state the API reports, laid out by day (a month per row), its legend counts the summary's, its filters and
zoom bound what is shown, time travel shows the past; the graph page lists the three nodes and two edges.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from partbuild.api.app import create_app
from partbuild.api.service import Service

from gridkit import TAINTED, grid_service, write_history


@dataclass
class World:
    client: TestClient
    service: Service
    head: int


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    url = f"sqlite:///{tmp_path_factory.mktemp('grid') / 'partbuild.db'}"
    head = write_history(url)
    with grid_service(url) as service, TestClient(create_app(service)) as client:
        yield World(client, service, head)


def cells(html: str) -> dict[str, str]:
    """The ref -> state of each single-ref cell of a grid page."""
    return dict(re.findall(r'data-testid="grid-cell" data-ref="([^"]+)" data-state="([^"]+)"', html))


def api_states(world: World, name: str, **params: object) -> dict[str, int]:
    response = world.client.get(f"/api/v1/jobs/{name}/partitions/summary", params=params)
    assert response.status_code == 200, response.text
    return response.json()["counts"]


def test_the_grid_shows_each_daily_in_its_state_by_month(world: World) -> None:
    page = world.client.get("/jobs/daily_clicks")
    assert page.status_code == 200 and 'data-testid="nav-jobs"' in page.text
    shown = cells(page.text)
    counts = api_states(world, "daily_clicks")
    assert len(shown) == sum(counts.values())
    assert {state: list(shown.values()).count(state) for state in counts} == counts
    assert shown[TAINTED] == "tainted" and "failed" in shown.values()
    legend = dict(re.findall(r'data-testid="legend-item" data-state="([a-z_]+)" data-count="(\d+)"', page.text))
    assert {state: int(count) for state, count in legend.items()} == counts
    months = re.findall(r'data-testid="grid-month" data-year="(\d+)" data-month="(\d+)"', page.text)
    assert months == [("2026", "1"), ("2026", "2"), ("2026", "3")]
    assert 'data-testid="grid-year">2026<' in page.text
    link = re.search(r'href="(/partition\?ref=[^"]+)"[^>]*data-ref="' + re.escape(TAINTED), page.text)
    assert link is not None and world.client.get(link.group(1).replace("&amp;", "&")).status_code == 200


def test_filters_zoom_and_time_travel(world: World) -> None:
    failed = cells(world.client.get("/jobs/daily_clicks", params={"state": "failed"}).text)
    assert set(failed.values()) == {"failed"} and len(failed) == api_states(world, "daily_clicks")["failed"]
    everything = sorted(cells(world.client.get("/jobs/daily_clicks").text))
    start, end = everything[3], everything[9]
    zoomed = cells(world.client.get("/jobs/daily_clicks", params={"start": start, "end": end}).text)
    assert sorted(zoomed) == everything[3:10]
    half = world.head // 2
    past_page = world.client.get("/jobs/daily_clicks", params={"as_of": half})
    assert 'data-testid="time-travel-banner"' in past_page.text
    past = cells(past_page.text)
    assert TAINTED in past and past[TAINTED] != "tainted"  # tainted only at the end
    counts = api_states(world, "daily_clicks", as_of_seq=half)
    assert {state: list(past.values()).count(state) for state in counts} == counts
    bad = world.client.get("/jobs/daily_clicks", params={"state": "nope"})
    assert bad.status_code == 422 and "state must be one of" in bad.text
    assert world.client.get("/jobs/nope").status_code == 404


def test_the_job_graph_page_lists_nodes_edges_and_counts(world: World) -> None:
    page = world.client.get("/jobs")
    assert page.status_code == 200
    names = re.findall(r'data-testid="job-node-row" data-name="([a-z_]+)"', page.text)
    assert sorted(names) == ["daily_clicks", "raw_clicks", "weekly_clicks"]
    edges = set(re.findall(r'data-testid="job-edge" data-input="([a-z_]+)" data-output="([a-z_]+)"', page.text))
    assert edges == {("raw_clicks", "daily_clicks"), ("daily_clicks", "weekly_clicks")}
    assert 'data-kind="graph"' in page.text and 'data-api="/api/v1/graph"' in page.text
    assert 'href="/jobs/daily_clicks"' in page.text


def test_a_big_grid_stays_bounded(tmp_path: Path) -> None:
    """2,500 dailies over 2,500 days: more than a page's cells, so runs of equal state (or ranges) are shown."""
    import datetime as dt

    from partbuild.proto.v1 import events_pb2 as pb
    from partbuild.state.database import Database
    from partbuild.state.log.events import envelope, manual

    day = dt.date(2000, 1, 1)
    refs = [f"raw/clicks/site=0/date={(day + dt.timedelta(days=n)).isoformat()}" for n in range(2_500)]
    url = f"sqlite:///{tmp_path / 'big.db'}"
    with Database.open(url, auto_upgrade=True) as db:
        observed = [pb.PartitionObserved(partition_ref=ref, location=f"/d/{ref}") for ref in refs]
        db.log.append([envelope(o, source=manual("t"), timestamp_ms=1) for o in observed])
    with grid_service(url) as service, TestClient(create_app(service)) as client:
        page = client.get("/jobs/raw_clicks")
        assert page.status_code == 200
        assert cells(page.text) == {}  # one range: all Live
        ranges = re.findall(r'data-first="([^"]+)" data-last="([^"]+)" data-count="(\d+)" data-state="live"', page.text)
        assert ranges == [(refs[0], refs[-1], "2500")]
        assert len(page.text) < 20_000
        zoom = client.get("/jobs/raw_clicks", params={"start": refs[10], "end": refs[19]})
        assert sorted(cells(zoom.text)) == refs[10:20]
        # Every other day tainted: 2,500 runs of one ref each, more than a page holds: 2,000 ranges at most,
        # each mixed; the legend still counts every ref, and the state filter shows the tainted ones.
        taints = [pb.PartitionTaint(partition_ref=ref, reason="bad", only_this_ref=True) for ref in refs[::2]]
        service.log.append([envelope(t, source=manual("t"), timestamp_ms=2) for t in taints])
        service.refresh()
        page = client.get("/jobs/raw_clicks")
        ranges = re.findall(r'data-count="(\d+)" data-state="([a-z]+)"', page.text)
        assert 0 < len(ranges) <= 2_000 and {state for _, state in ranges} == {"mixed"}
        assert sum(int(count) for count, _ in ranges) == 2_500
        legend = dict(re.findall(r'data-testid="legend-item" data-state="([a-z_]+)" data-count="(\d+)"', page.text))
        assert legend == {"live": "1250", "tainted": "1250"}
        tainted = client.get("/jobs/raw_clicks", params={"state": "tainted"})
        assert cells(tainted.text) == dict.fromkeys(refs[::2], "tainted")  # 1,250 fit: one cell each
