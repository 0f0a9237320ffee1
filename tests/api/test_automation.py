"""Automation over HTTP (a real uvicorn on a real SQLite log): schedules listed with their last and next ticks, as
of any seq; pause and resume as the fold allows; a tick by hand makes a want that says why it exists."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator

import pytest

from partbuild.api.service import Service
from partbuild.orchestrator.context import JobContext
from partbuild.orchestrator.graph import Graph, Job
from partbuild.orchestrator.reactions import on_upstream_change
from partbuild.orchestrator.schedules import CatchUp, Schedule
from partbuild.orchestrator.ticks import Ticker
from partbuild.state.database import Database
from partbuild.state.log.events import system

from golden_reaction_notes import reaction_note_events
from httpkit import API, ok, problem
from serverkit import ApiServer, serve_service

AUTOMATION = f"{API}/automation"
HOUR = 3_600_000
T0 = 1_800_000_000_000 // HOUR * HOUR


def noop(ctx: JobContext) -> None:
    """Never run."""


def report_of(tick: dt.datetime) -> list[str]:
    return [f"report/{tick:%Y%m%d%H%M%S}"]


def failing(tick: dt.datetime) -> list[str]:
    raise RuntimeError("no calendar")


GRAPH = Graph(
    [Job("report", ["report/{key}"], noop)],
    schedules=[
        Schedule("hourly", report_of, every=dt.timedelta(hours=1), catch_up=CatchUp.NONE, ttl=dt.timedelta(hours=1)),
        Schedule("broken", failing, cron="0 3 * * *", timezone="Europe/Paris"),
    ],
)


class Clock:
    def __init__(self, now_ms: int) -> None:
        self.now_ms = now_ms

    def __call__(self) -> int:
        return self.now_ms


@pytest.fixture
def clock() -> Clock:
    return Clock(T0 + 10)


@pytest.fixture
def served(sqlite_url: str, clock: Clock) -> Iterator[ApiServer]:
    with (
        Database.open(sqlite_url, auto_upgrade=True) as db,
        serve_service(Service(db, graph=GRAPH, clock=clock)) as api,
    ):
        yield api


def tick_hourly(api: ApiServer, now_ms: int) -> None:
    """What an orchestrator's step appends for `hourly` at `now_ms`, having first seen it an hour earlier."""
    ticker = Ticker(GRAPH, clock=lambda: now_ms)
    ticker.first_seen_ms["hourly"] = now_ms - HOUR
    api.service.refresh()
    with api.service.live.read() as state:
        events = ticker.due(state, now_ms, lambda key: key == "schedule:hourly", system("orchestrator"))
    api.log.append(events)
    api.service.refresh()


def schedules(api: ApiServer, **params: int) -> dict[str, dict]:  # type: ignore[type-arg]
    return {s["name"]: s for s in ok(api.client.get(AUTOMATION, params=params))["schedules"]}


def test_schedules_show_their_ticks_and_next_time_and_pausing_follows_the_folds_rules(
    served: ApiServer, clock: Clock
) -> None:
    before = schedules(served)
    assert before["hourly"] | {"next_tick_ms": None} == {
        "name": "hourly",
        "declared": True,
        "when": "every 1:00:00",
        "catch_up": "none",
        "paused": False,
        "pause_reason": "",
        "ticks": 0,
        "missed": 0,
        "last_tick": None,
        "last_want_id": None,
        "last_error": None,
        "next_tick_ms": None,
        "recent_want_ids": [],
    }
    assert before["hourly"]["next_tick_ms"] == T0 + HOUR
    assert before["broken"]["when"] == "cron 0 3 * * * Europe/Paris"

    tick_hourly(served, T0 + 10)
    ticked_seq = served.service.state.head_seq
    hourly = schedules(served)["hourly"]
    assert hourly["last_tick"] == {"tick_ms": T0, "at": "2027-01-15T08:00:00Z", "kind": "scheduled", "seq": ticked_seq}
    want_id = hourly["last_want_id"]
    assert want_id == "schedule:hourly:2027-01-15T08:00:00Z" and hourly["ticks"] == 1
    assert hourly["recent_want_ids"] == [want_id]
    want = ok(served.client.get(f"{API}/wants/{want_id}"))
    assert want["cause"] == "schedule hourly ticked at 2027-01-15T08:00:00Z"
    assert want["refs"] == ["report/20270115080000"] and want["ttl_seconds"] == 3600

    paused = ok(served.client.post(f"{AUTOMATION}/schedules/hourly/pause", json={"reason": "maintenance"}))
    assert paused["schedule"]["paused"] and paused["schedule"]["pause_reason"] == "maintenance"
    assert paused["schedule"]["next_tick_ms"] is None
    problem(served.client.post(f"{AUTOMATION}/schedules/hourly/pause"), 409, "already paused")
    problem(served.client.post(f"{AUTOMATION}/schedules/hourly/pause", json={"reason": 5}), 422, "reason")
    problem(served.client.post(f"{AUTOMATION}/schedules/nope/pause"), 404, "no schedule 'nope'")
    # As of the tick, before the pause: running, and no next time (the past has none).
    then = schedules(served, as_of_seq=ticked_seq)["hourly"]
    assert not then["paused"] and then["ticks"] == 1 and then["next_tick_ms"] is None
    assert schedules(served, as_of_seq=ticked_seq - 1)["hourly"]["ticks"] == 0

    resumed = ok(served.client.post(f"{AUTOMATION}/schedules/hourly/resume"))
    assert not resumed["schedule"]["paused"] and resumed["seq"] == paused["seq"] + 1
    problem(served.client.post(f"{AUTOMATION}/schedules/hourly/resume"), 409, "already running")


def test_a_tick_by_hand_wants_now_and_leaves_the_schedules_times_alone(served: ApiServer, clock: Clock) -> None:
    clock.now_ms = T0 + 1234
    written = ok(served.client.post(f"{AUTOMATION}/schedules/hourly/trigger"), 201)
    assert written["want_id"] == "schedule:hourly:manual:2027-01-15T08:00:01.234Z"
    assert written["schedule"]["last_tick"] is None and written["schedule"]["ticks"] == 1
    want = ok(served.client.get(f"{API}/wants/{written['want_id']}"))
    assert want["cause"] == "schedule hourly ticked at 2027-01-15T08:00:01.234Z (by hand)"
    assert want["source"] == "manual:anonymous"  # who asked, as for any want
    problem(served.client.post(f"{AUTOMATION}/schedules/hourly/trigger"), 409, "already exists")  # same instant
    detail = problem(served.client.post(f"{AUTOMATION}/schedules/broken/trigger"), 422, "no calendar")
    assert "want function raised RuntimeError" in detail
    problem(served.client.post(f"{AUTOMATION}/schedules/nope/trigger"), 404, "no schedule 'nope'")
    # A scheduled tick at the same hour is still due: a manual one does not take its place.
    tick_hourly(served, T0 + 2000)
    assert schedules(served)["hourly"]["last_tick"]["tick_ms"] == T0


def test_without_a_graph_the_log_s_schedules_are_listed_and_nothing_can_be_triggered(api_server: ApiServer) -> None:
    assert ok(api_server.client.get(AUTOMATION))["schedules"] == []
    problem(api_server.client.post(f"{AUTOMATION}/schedules/hourly/trigger"), 409, "no graph")
    problem(api_server.client.post(f"{AUTOMATION}/schedules/hourly/pause"), 404, "no schedule 'hourly'")


REACTING = Graph([Job("d", ["d/{n}"], noop, reactions=[on_upstream_change(debounce=dt.timedelta(seconds=30))])])


def test_reactions_show_their_firings_what_they_owe_and_their_errors_as_of_any_seq(sqlite_url: str) -> None:
    """The golden log of issue 35: a debounced firing noted, restarted, fired; another owed; one failed."""
    with (
        Database.open(sqlite_url, auto_upgrade=True) as db,
        serve_service(Service(db, graph=REACTING)) as api,
    ):
        api.log.append(reaction_note_events())
        api.service.refresh()

        def reactions(**params: int) -> dict[str, dict]:  # type: ignore[type-arg]
            found = ok(api.client.get(AUTOMATION, params=params))["reactions"]
            return {f"{r['job']} {r['kind']}": r for r in found}

        now = reactions()
        assert list(now) == ["d on_upstream_change", "gone on_upstream_change"]
        d, gone = now["d on_upstream_change"], now["gone on_upstream_change"]
        assert (d["declared"], d["debounce_s"], d["fired"], d["last_fired_seq"], d["pending_total"]) == (
            True, 30.0, 1, 15, 1
        )  # fmt: skip
        assert [(p["partition_ref"], p["cause_seq"], p["noted_seq"]) for p in d["pending"]] == [("d/1", 23, 24)]
        assert (gone["declared"], gone["fired"], gone["failed"]) == (False, 0, 1)
        assert gone["last_error"] == "job gone is not in the graph"
        # Before the firing landed: the restarted window's cause was owed, the older one replaced.
        then = reactions(as_of_seq=14)["d on_upstream_change"]
        assert (then["fired"], then["pending_total"], then["pending"][0]["cause_seq"]) == (0, 1, 9)
        assert "gone on_upstream_change" not in reactions(as_of_seq=14)
        early = reactions(as_of_seq=5)["d on_upstream_change"]  # declared, nothing in the log yet
        assert (early["fired"], early["pending"], early["failed"]) == (0, [], 0)
        metrics = api.client.get("/metrics").text
        for line in (
            'partbuild_reaction_pending{job="d",reaction="on_upstream_change"} 1.0',
            'partbuild_reaction_fired_total{job="d",reaction="on_upstream_change"} 1.0',
            'partbuild_reaction_failed_total{job="gone",reaction="on_upstream_change"} 1.0',
        ):
            assert line in metrics
