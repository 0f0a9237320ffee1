"""Pages that answer "which" (issue 36), on the golden log of issue 34 served with a graph of its job: the grid
filtered by a check, an error's text or who made the wants, as of any seq (a bad filter value is a 422 page, never
ignored); its key of every state's color, its cells' labels and stale marks; and a failed want's page naming the
partitions that failed it and why."""

from __future__ import annotations

import re
from pathlib import Path

from fastapi.testclient import TestClient

from partbuild.api.app import create_app
from partbuild.api.service import Service
from partbuild.orchestrator.context import JobContext
from partbuild.orchestrator.graph import Graph, Job
from partbuild.state.database import Database

from golden_outcomes import outcome_events


def noop(ctx: JobContext) -> None:
    """Never run."""


def cells(client: TestClient, **params: object) -> list[tuple[str, str]]:
    html = client.get("/jobs/d", params=params).text
    return re.findall(r'data-testid="grid-cell" data-ref="([^"]+)" data-state="([^"]+)"', html)


def test_the_grid_shows_only_the_cells_of_a_check_or_an_error_as_of_any_seq(tmp_path: Path) -> None:
    graph = Graph([Job("d", ["d/{n:int}"], noop)])
    with Database.open(f"sqlite:///{tmp_path / 'g.db'}", auto_upgrade=True) as db:
        db.log.append(outcome_events())
        with TestClient(create_app(Service(db, graph=graph))) as client:
            everything = cells(client)
            failed_rows = cells(client, check="rows", check_result="failed")
            by_error = cells(client, error="FILE_FOOTER")
            before = cells(client, check="rows", as_of=4)
            bad = client.get("/jobs/d", params={"check_result": "meh"})
            by_maker = (cells(client, made_by="user:ann"), cells(client, made_by="reaction"))
            bad_maker = client.get("/jobs/d", params={"made_by": "boss"})
            checked_page = client.get("/jobs/d", params={"check": "rows"}).text
            shown = re.findall(r'data-testid="grid-shown" data-count="(\d+)"', checked_page)
            legend_items = r'data-testid="legend-item" data-state="([a-z_]+)" data-count="(\d+)"'
            legend = dict(re.findall(legend_items, checked_page))
    assert len(everything) == 7 and failed_rows == [("d/3", "failed")]
    assert by_error == [("d/4", "up_for_retry")]
    assert before == []  # the outcome that checked them came at seq 5
    assert bad.status_code == 422 and "check_result must be one of" in bad.text
    assert (len(by_maker[0]), by_maker[1]) == (7, [])  # ann wanted every daily; no reaction did
    assert bad_maker.status_code == 422 and "made_by must be one of" in bad_maker.text
    assert shown == ["2"]  # the count of what the filter shows: d/2 passed, d/3 failed
    assert legend == {"live": "1", "failed": "1"}  # and the legend counts the filter's cells by state


def test_the_grid_has_a_key_of_every_state_each_in_its_own_color(tmp_path: Path) -> None:
    """Issue 36: failed and upstream_failed were the same red; every state now has its own color and meaning."""
    from partbuild.api.service.jobs import GRID_STATES

    graph = Graph([Job("d", ["d/{n:int}"], noop)])
    with Database.open(f"sqlite:///{tmp_path / 'k.db'}", auto_upgrade=True) as db:
        db.log.append(outcome_events())
        with TestClient(create_app(Service(db, graph=graph))) as client:
            html = client.get("/jobs/d").text
            css = client.get("/static/app.css").text
    key = re.findall(
        r'data-testid="legend-key-item" data-state="([a-z_]+)"><span class="cell s-\1"></span> ([^<]+)<', html
    )
    assert [state for state, _ in key] == GRID_STATES
    assert len({meaning for _, meaning in key}) == len(GRID_STATES)  # no two states explained alike
    colors = dict(re.findall(r"\.cell\.s-([a-z_]+) \{ background: (#[0-9a-f]{6}); \}", css))
    assert set(GRID_STATES) <= set(colors)
    assert len({colors[state] for state in GRID_STATES}) == len(GRID_STATES)


def test_cells_of_months_years_and_hours_are_labeled_with_their_key(tmp_path: Path) -> None:
    """Issue 36: a monthly job's grid was 12 unlabeled squares; its cells now say which month each is."""
    from partbuild.proto.v1 import events_pb2 as pb
    from partbuild.state.log.events import envelope, manual

    graph = Graph(
        [
            Job("monthly", ["m/month={month:month}"], noop),
            Job("yearly", ["y/year={year:year}"], noop),
            Job("long", ["l/key={key}"], noop),
        ]
    )
    months = [f"m/month=2026-{n:02d}" for n in range(1, 13)]
    refs = [*months, "y/year=2025", "y/year=2026", "l/key=" + "k" * 40]
    with Database.open(f"sqlite:///{tmp_path / 'l.db'}", auto_upgrade=True) as db:
        db.log.append([envelope(pb.WantCreate(want_id="w", partition_refs=refs), source=manual("ann"))])
        with TestClient(create_app(Service(db, graph=graph))) as client:
            labels = {
                name: re.findall(r'data-testid="cell-label">([^<]+)<', client.get(f"/jobs/{name}").text)
                for name in ("monthly", "yearly", "long")
            }
    assert labels["monthly"] == [f"2026-{n:02d}" for n in range(1, 13)]
    assert labels["yearly"] == ["2025", "2026"]
    assert labels["long"] == []  # a key too long for a cell: its title says it


def test_a_stale_instance_still_serving_is_marked_on_its_cell_as_of_any_seq(tmp_path: Path) -> None:
    """Issue 36: staleness shows in the grid: d/1 serves stale from seq 27 to 28, x/1 at the end (issue 34's log)."""
    graph = Graph([Job("d", ["d/{n:int}"], noop), Job("x", ["x/{n:int}"], noop)])
    with Database.open(f"sqlite:///{tmp_path / 's.db'}", auto_upgrade=True) as db:
        db.log.append(outcome_events())
        with TestClient(create_app(Service(db, graph=graph))) as client:

            def marked(name: str, **params: object) -> list[str]:
                html = client.get(f"/jobs/{name}", params=params).text
                return re.findall(r'class="cell s-[a-z_]+[^"]* stale"[^>]*data-ref="([^"]+)"', html)

            assert marked("d", as_of=27) == ["d/1"] and marked("d") == [] and marked("d", as_of=26) == []
            assert marked("x") == ["x/1"] and marked("x", as_of=26) == []


def test_a_failed_wants_page_says_which_partition_failed_it_and_why(tmp_path: Path) -> None:
    """Issue 34's want detail `failures`, on the want's page: w1 failed because d/3 failed its check `rows`."""
    with Database.open(f"sqlite:///{tmp_path / 'w.db'}", auto_upgrade=True) as db:
        db.log.append(outcome_events())
        with TestClient(create_app(Service(db, graph=Graph([Job("d", ["d/{n:int}"], noop)])))) as client:
            failed = client.get("/wants/w1").text
            fine = client.get("/wants/w2").text
            api = client.get("/api/v1/wants/w1").json()["failures"]
    shown = re.findall(r'data-testid="want-failure" data-ref="([^"]+)"', failed)
    assert shown == [failure["ref"] for failure in api] and "d/3" in shown
    assert "<code>rows</code>" in failed and "check rows failed on d/3: 0 rows" in failed
    assert 'data-testid="want-failures"' not in fine
