"""The ticks a step appends (orchestrator/ticks.py), folded into a real BuildState: wants with their cause, errors
recorded instead of lost, pauses, ownership, and nothing evaluated on idle steps."""

from __future__ import annotations

import datetime as dt

from partbuild.orchestrator.context import JobContext
from partbuild.orchestrator.graph import Graph, Job
from partbuild.orchestrator.schedules import Schedule
from partbuild.orchestrator.ticks import Ticker, schedule_owner_key
from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.fold.build_state import BuildState
from partbuild.state.fold.records import WantState
from partbuild.state.log.events import envelope, manual, system

MINUTE = 60_000
T0 = 1_800_000_000_000 // 3_600_000 * 3_600_000
SOURCE = system("orchestrator")


def noop(ctx: JobContext) -> None:
    """Never run: ticks only want."""


def hourly_report(tick: dt.datetime) -> list[str]:
    return [f"report/{tick:%Y%m%d%H}"]


def graph(*schedules: Schedule) -> Graph:
    return Graph([Job("report", ["report/{key}"], noop)], schedules=schedules)


def hourly(want: object = hourly_report, name: str = "hourly") -> Schedule:
    return Schedule(name, want, every=dt.timedelta(hours=1), ttl=dt.timedelta(hours=2), comment="c")  # type: ignore[arg-type]


def fold(state: BuildState, events: list[pb.Event]) -> None:
    for event in events:
        assert state.apply(state.head_seq + 1, event) is None


def test_a_due_tick_wants_its_refs_with_the_tick_as_the_cause() -> None:
    state, ticker = BuildState(strict=True), Ticker(graph(hourly()), clock=lambda: 0)
    assert ticker.due(state, T0 - 30 * MINUTE, lambda key: True, SOURCE) == []  # first seen: nothing before
    assert ticker.next_due_ms == T0
    events = ticker.due(state, T0 + 5, lambda key: True, SOURCE)
    (tick,) = [event.schedule_tick for event in events]
    assert (tick.schedule, tick.tick_ms, tick.kind, tick.missed) == ("hourly", T0, pb.TICK_KIND_SCHEDULED, 0)
    assert list(tick.want.partition_refs) == [hourly_report(dt.datetime.fromtimestamp(T0 / 1000, dt.UTC))[0]]
    assert (tick.want.ttl_seconds, tick.want.comment, tick.want.data_timestamp_ms) == (7200, "c", T0)
    fold(state, events)
    want = state.wants[tick.want.want_id]
    assert want.state == WantState.IDLE and want.source == "system:orchestrator"
    assert state.want_causes[want.want_id] == f"schedule hourly ticked at {_iso(T0)}"
    assert state.schedules["hourly"].last_tick_ms == T0
    # The same time evaluated again (a restart, a second orchestrator): nothing due; a copy is rejected.
    assert ticker.due(state, T0 + 10, lambda key: True, SOURCE) == []
    assert Ticker(graph(hourly()), clock=lambda: 0).due(state, T0 + 10, lambda key: True, SOURCE) == []
    assert state.apply(state.head_seq + 1, events[0]) == f"schedule 'hourly' already ticked at {_iso(T0)}"


def test_a_failing_want_function_is_recorded_with_the_tick_not_retried_forever() -> None:
    def broken(tick: dt.datetime) -> list[str]:
        raise KeyError("region")

    def nobodys(tick: dt.datetime) -> list[str]:
        return ["nobody/makes/this"]

    state = BuildState(strict=True)
    ticker = Ticker(graph(hourly(broken, "a"), hourly(nobodys, "b")), clock=lambda: 0)
    ticker.due(state, T0 - 1, lambda key: True, SOURCE)
    events = ticker.due(state, T0 + 1, lambda key: True, SOURCE)
    errors = {event.schedule_tick.schedule: event.schedule_tick.error for event in events}
    assert errors["a"] == "want function raised KeyError: 'region'"
    assert errors["b"].startswith("want function returned 'nobody/makes/this': ")
    assert not any(event.schedule_tick.HasField("want") for event in events)
    fold(state, events)
    assert not state.wants and state.schedules["a"].last_error == errors["a"]
    assert ticker.due(state, T0 + 2, lambda key: True, SOURCE) == []


def test_a_paused_schedule_ticks_nothing_until_resumed_and_then_follows_its_policy() -> None:
    state, ticker = BuildState(strict=True), Ticker(graph(hourly()), clock=lambda: 0)
    ticker.due(state, T0 - 1, lambda key: True, SOURCE)
    fold(state, [envelope(pb.ScheduleControl(schedule="hourly", paused=True), source=manual("ann"))])
    assert ticker.due(state, T0 + 3 * 60 * MINUTE + 1, lambda key: True, SOURCE) == []
    fold(state, [envelope(pb.ScheduleControl(schedule="hourly", paused=False), source=manual("ann"))])
    (event,) = ticker.due(state, T0 + 3 * 60 * MINUTE + 2, lambda key: True, SOURCE)
    assert (event.schedule_tick.tick_ms, event.schedule_tick.missed) == (T0 + 3 * 60 * MINUTE, 3)


def test_only_the_owner_of_a_schedules_bucket_ticks_it() -> None:
    schedules = [hourly(name="mine"), hourly(name="theirs")]
    state, ticker = BuildState(strict=True), Ticker(graph(*schedules), clock=lambda: 0)
    owns = {schedule_owner_key("mine")}.__contains__
    ticker.due(state, T0 - 1, owns, SOURCE)
    events = ticker.due(state, T0 + 1, owns, SOURCE)
    assert [event.schedule_tick.schedule for event in events] == ["mine"]


def test_an_idle_step_before_the_next_time_evaluates_no_schedule() -> None:
    calls: list[dt.datetime] = []

    def counted(tick: dt.datetime) -> list[str]:
        calls.append(tick)
        return hourly_report(tick)

    state, ticker = BuildState(strict=True), Ticker(graph(hourly(counted)), clock=lambda: 0)
    ticker.due(state, T0 - 1, lambda key: True, SOURCE)
    ticker.seen_head = state.head_seq
    fold(state, ticker.due(state, T0 + 1, lambda key: True, SOURCE))
    assert len(calls) == 1
    ticker.due(state, T0 + 2, lambda key: True, SOURCE)  # the head moved: evaluated once more, nothing due
    assert ticker.next_due_ms == T0 + 60 * MINUTE
    ticker.next_due_ms = marker = T0 + 59 * MINUTE  # an evaluation would set it back to T0 + 60 min
    assert ticker.due(state, T0 + 3, lambda key: True, SOURCE) == []
    assert ticker.next_due_ms == marker and len(calls) == 1
    fold(state, [envelope(pb.ClockTick(), source=SOURCE)])  # something folded: evaluated again
    assert ticker.due(state, T0 + 4, lambda key: True, SOURCE) == []
    assert ticker.next_due_ms == T0 + 60 * MINUTE


def _iso(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).isoformat().replace("+00:00", "Z")
