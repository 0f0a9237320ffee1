"""Every due time ticks when the loop wakes at or after it (orchestrator/schedules.py, orchestrator/ticks.py): a fake
clock steps a real Ticker through the due times of seconds crons, minute crons and intervals, waking at the exact
millisecond and late, folding each tick into a real BuildState; a missed time means nobody was ticking. Crons that
never fire, or not within a year, are refused when declared."""

from __future__ import annotations

import datetime as dt
import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from partbuild.orchestrator.context import JobContext
from partbuild.orchestrator.graph import Graph, Job
from partbuild.orchestrator.schedules import Schedule, ScheduleError
from partbuild.orchestrator.ticks import Ticker
from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.fold.build_state import BuildState
from partbuild.state.log.events import system

SECOND = 1_000
T0 = 1_800_000_000_000 // 3_600_000 * 3_600_000 + 17 * SECOND  # 17 s after a whole hour, UTC
SOURCE = system("orchestrator")
# How late the loop wakes after a due time: at its millisecond, just after, and later within the period.
LATENESS_MS = (0, 1, 0, 7, 250, 0, 999, 3)


def noop(ctx: JobContext) -> None:
    """Never run: these schedules want nothing."""


def nothing(tick: dt.datetime) -> list[str]:
    return []


def cron(expression: str, timezone: str = "UTC") -> Schedule:
    return Schedule("s", nothing, cron=expression, timezone=timezone)


def interval(seconds: int) -> Schedule:
    return Schedule("s", nothing, every=dt.timedelta(seconds=seconds))


WAKING = [
    pytest.param(cron("* * * * * *"), 40, 1 * SECOND, id="every second (a seconds field)"),
    pytest.param(cron("*/2 * * * * 0,20,40"), 12, 20 * SECOND, id="seconds 0/20/40 of even minutes"),
    pytest.param(cron("* * * * * */5", "Europe/Paris"), 20, 5 * SECOND, id="every 5 s in Paris"),
    pytest.param(cron("* * * * *"), 15, 60 * SECOND, id="every minute"),
    pytest.param(cron("30 */3 * * *", "America/New_York"), 10, 3 * 3_600 * SECOND, id="every 3 h at :30"),
    pytest.param(interval(1), 40, 1 * SECOND, id="interval 1 s"),
    pytest.param(interval(2), 30, 2 * SECOND, id="interval 2 s"),
    pytest.param(interval(90), 10, 90 * SECOND, id="interval 90 s"),
]


def _fold(state: BuildState, events: list[pb.Event]) -> None:
    for event in events:
        assert state.apply(state.head_seq + 1, event) is None


@pytest.mark.parametrize(("schedule", "times", "shortest_ms"), WAKING)
def test_the_loop_waking_at_or_after_each_due_time_ticks_it_once_and_misses_none(
    schedule: Schedule, times: int, shortest_ms: int
) -> None:
    state, ticker = BuildState(strict=True), Ticker(Graph([Job("j", ["j/{n}"], noop)], schedules=[schedule]), int)
    assert ticker.due(state, T0, lambda key: True, SOURCE) == []  # first seen: nothing before is due
    ticked: list[int] = []
    lateness = itertools.cycle(LATENESS_MS)
    for _ in range(times):
        due = ticker.next_due_ms  # what the loop sleeps towards
        assert due is not None and due == schedule.next_after(ticked[-1] if ticked else T0)
        assert ticker.due(state, due - 1, lambda key: True, SOURCE) == []  # a millisecond early: not yet
        late = min(next(lateness), shortest_ms - 1)
        events = ticker.due(state, due + late, lambda key: True, SOURCE)
        assert [(e.schedule_tick.tick_ms, e.schedule_tick.missed) for e in events] == [(due, 0)], (due, late)
        # Within its grace a tick is on time; later (a short interval's grace is half its period) a catch-up one.
        on_time = late <= schedule.grace_ms
        assert events[0].schedule_tick.kind == (pb.TICK_KIND_SCHEDULED if on_time else pb.TICK_KIND_CATCH_UP)
        _fold(state, events)
        ticked.append(due)
        assert ticker.due(state, due + late, lambda key: True, SOURCE) == []  # the same step again: once only
    row = state.schedules["s"]
    assert (row.ticks, row.missed, row.last_tick_ms) == (times, 0, ticked[-1])
    assert ticked == list(itertools.islice(schedule.times_after(T0), times))  # every time, in order


@pytest.mark.parametrize(
    ("schedule", "period_ms"),
    [(cron("* * * * * *"), SECOND), (cron("* * * * *"), 60 * SECOND), (interval(2), 2 * SECOND)],
    ids=["seconds cron", "minute cron", "interval"],
)
def test_times_that_pass_while_nobody_ticks_are_the_ones_counted_missed(schedule: Schedule, period_ms: int) -> None:
    state, ticker = BuildState(strict=True), Ticker(Graph([], schedules=[schedule]), int)
    ticker.due(state, T0, lambda key: True, SOURCE)
    first = schedule.next_after(T0)
    assert first is not None
    _fold(state, ticker.due(state, first, lambda key: True, SOURCE))
    down_until = first + 4 * period_ms  # not running for the next three times, back at the fourth's millisecond
    (event,) = ticker.due(state, down_until, lambda key: True, SOURCE)
    assert (event.schedule_tick.tick_ms, event.schedule_tick.missed) == (down_until, 3)


CRONS = [
    "* * * * * *",
    "*/7 * * * * 13,47",
    "* * * * *",
    "0 2 * * *",
    "30 1-3 * * * 0,30",
    "0 0 L * *",
    "15 10 * * 1-5",
    "*/5 * * * * */10",
]


@settings(max_examples=300, deadline=None)
@given(
    expression=st.sampled_from(CRONS),
    timezone=st.sampled_from(["UTC", "Europe/Paris", "America/New_York", "Asia/Kolkata"]),
    at_ms=st.integers(T0, T0 + 400 * 86_400_000),
)
def test_the_latest_time_is_at_or_before_and_the_next_strictly_after_to_the_millisecond(
    expression: str, timezone: str, at_ms: int
) -> None:
    schedule = cron(expression, timezone)
    latest, upcoming = schedule.latest_at_or_before(at_ms), schedule.next_after(at_ms)
    assert latest is not None and upcoming is not None
    assert latest <= at_ms < upcoming
    assert schedule.next_after(latest) == upcoming  # nothing between them: no time skipped
    assert schedule.latest_at_or_before(upcoming) == upcoming  # a due time is the latest at its own millisecond
    assert schedule.latest_at_or_before(upcoming - 1) == latest
    assert schedule.count_between(latest, upcoming) == 0


@pytest.mark.parametrize(
    ("expression", "said"),
    [
        ("0 0 30 2 *", "cron '0 0 30 2 *' never fires"),
        ("0 12 31 4,6,9,11 *", "never fires"),
        ("0 0 1 1 * 0 2001", "never fires"),
        (f"0 0 1 1 * 0 {dt.date.today().year + 3}", "more than a year away"),
        (f"0 0 1 1 * * {dt.date.today().year + 3}-{dt.date.today().year + 5}", "more than a year away"),
    ],
)
def test_a_cron_that_never_fires_or_not_within_a_year_is_refused_in_one_line(expression: str, said: str) -> None:
    with pytest.raises(ScheduleError) as refused:
        Schedule("nightly", nothing, cron=expression)
    message = str(refused.value)
    assert message.startswith("schedule 'nightly': ") and said in message
    assert "\n" not in message


def test_yearly_crons_and_a_year_field_within_a_year_are_accepted() -> None:
    for expression in ("0 0 1 1 *", "0 0 28 2 *", "0 0 31 12 *", "59 23 L 2 *", "0 0 1 1 * 0 *"):
        assert cron(expression).next_after(T0) is not None
    assert cron(f"0 0 1 1 * 0 {_next_year()}").describe == f"cron 0 0 1 1 * 0 {_next_year()} UTC"


def test_a_year_field_cron_ticks_its_time_and_then_no_more_without_failing() -> None:
    year = _next_year()
    schedule = cron(f"0 0 1 1 * 0 {year}")
    only = int(dt.datetime(year, 1, 1, tzinfo=dt.UTC).timestamp() * 1000)
    assert schedule.latest_at_or_before(only - 1) is None  # no time before it: nothing due, no error
    assert schedule.next_after(only) is None  # none after it
    state, ticker = BuildState(strict=True), Ticker(Graph([], schedules=[schedule]), int)
    assert ticker.due(state, only - 60 * SECOND, lambda key: True, SOURCE) == []
    assert ticker.next_due_ms == only
    events = ticker.due(state, only, lambda key: True, SOURCE)
    assert [(e.schedule_tick.tick_ms, e.schedule_tick.missed) for e in events] == [(only, 0)]
    _fold(state, events)
    assert ticker.due(state, only + 86_400_000, lambda key: True, SOURCE) == []
    assert ticker.next_due_ms is None  # nothing to sleep towards


def _next_year() -> int:
    return dt.datetime.now(dt.UTC).year + 1


def test_a_schedule_that_cannot_be_evaluated_is_retried_with_backoff_and_the_others_tick_on() -> None:
    healthy = Schedule("healthy", nothing, every=dt.timedelta(seconds=1))
    broken = Schedule("broken", nothing, every=dt.timedelta(seconds=1))
    graph = Graph([Job("j", ["j/{k}"], noop)], schedules=[healthy, broken])
    object.__setattr__(broken, "every", "not a timedelta")  # what a library failing at run time looks like
    ticker = Ticker(graph, clock=lambda: T0)
    state = BuildState(strict=True)
    tried_at = []
    for step in range(1, 12):
        now = T0 + step * SECOND
        before = dict(ticker.failing)
        _fold(state, ticker.due(state, now, lambda key: True, SOURCE))
        if ticker.failing.get("broken") != before.get("broken"):
            tried_at.append(step)
    assert state.schedules["healthy"].ticks == 10 and state.schedules["healthy"].missed == 0  # ticked on
    assert "broken" not in state.schedules
    assert tried_at == [1, 2, 4, 8]  # tried again after 1, 2, 4 s: backing off
    assert ticker.failing["broken"] == (T0 + 16 * SECOND, 8 * SECOND)
    assert ticker.next_due_ms == T0 + 12 * SECOND  # the healthy one's next time
    object.__setattr__(broken, "every", dt.timedelta(seconds=1))  # fixed: it ticks at its next try
    _fold(state, ticker.due(state, T0 + 16 * SECOND, lambda key: True, SOURCE))
    assert "broken" not in ticker.failing and state.schedules["broken"].ticks == 1
