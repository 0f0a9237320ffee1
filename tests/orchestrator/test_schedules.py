"""Schedules (orchestrator/schedules.py): declaration rules, their times, and which ticks are due under each
catch-up policy."""

from __future__ import annotations

import datetime as dt

import pytest

from partbuild.orchestrator.graph import Graph, GraphError
from partbuild.orchestrator.schedules import (
    MAX_TICKS_PER_STEP,
    CatchUp,
    DueTick,
    Schedule,
    ScheduleError,
    due_ticks,
    tick_time,
)
from partbuild.proto.v1 import events_pb2 as pb

MINUTE = 60_000
HOUR = 60 * MINUTE
T0 = 1_800_000_000_000 // HOUR * HOUR  # a whole hour, UTC


def nothing(tick: dt.datetime) -> list[str]:
    return []


def every(minutes: int, catch_up: CatchUp = CatchUp.LATEST, **more: object) -> Schedule:
    return Schedule("s", nothing, every=dt.timedelta(minutes=minutes), catch_up=catch_up, **more)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({}, "give a cron expression or an interval"),
        ({"cron": "0 * * * *", "every": dt.timedelta(hours=1)}, "give a cron expression or an interval"),
        ({"cron": "61 * * * *"}, "is not a cron expression"),
        ({"every": dt.timedelta(milliseconds=10)}, "at least one second"),
        ({"cron": "0 * * * *", "timezone": "Mars/Olympus"}, "unknown time zone 'Mars/Olympus'"),
        ({"cron": "0 * * * *", "catch_up": "all"}, "catch_up is a CatchUp"),
    ],
)
def test_a_schedule_says_which_setting_is_wrong(settings: dict[str, object], message: str) -> None:
    with pytest.raises(ScheduleError, match=message):
        Schedule("s", nothing, **settings)  # type: ignore[arg-type]


def test_names_are_bounded_and_unique_in_a_graph() -> None:
    with pytest.raises(ScheduleError, match="no '/'"):
        Schedule("a/b", nothing, cron="0 * * * *")
    with pytest.raises(ScheduleError, match="want must be a function"):
        Schedule("s", "daily/x", cron="0 * * * *")  # type: ignore[arg-type]
    one = Schedule("s", nothing, cron="0 * * * *")
    with pytest.raises(GraphError, match="two schedules are named 's'"):
        Graph([], schedules=[one, one])
    with pytest.raises(GraphError, match="must be Schedule objects"):
        Graph([], schedules=["s"])  # type: ignore[list-item]


def test_interval_times_are_multiples_of_the_period_since_the_epoch() -> None:
    schedule = every(15)
    assert schedule.latest_at_or_before(T0 + 20 * MINUTE) == T0 + 15 * MINUTE
    assert schedule.latest_at_or_before(T0) == T0
    assert schedule.next_after(T0) == T0 + 15 * MINUTE
    assert schedule.count_between(T0, T0 + HOUR) == 3  # :15, :30, :45
    assert schedule.count_between(T0 - 1, T0 + 1) == 1


def test_cron_times_follow_the_time_zone_across_a_daylight_saving_change() -> None:
    paris = Schedule("s", nothing, cron="0 2 * * *", timezone="Europe/Paris")
    before = int(dt.datetime(2026, 10, 24, 12, tzinfo=dt.UTC).timestamp() * 1000)
    first = paris.next_after(before)
    second = paris.next_after(first)
    # 2026-10-25: at 03:00 CEST the clocks go back to 02:00 CET, so 02:00 happens twice; it ticks once.
    assert tick_time(paris, first) == dt.datetime(2026, 10, 25, 2, tzinfo=paris.zone)  # CEST: 00:00 UTC
    assert tick_time(paris, second) == dt.datetime(2026, 10, 26, 2, tzinfo=paris.zone)  # CET: 01:00 UTC
    assert second - first == 25 * HOUR
    assert paris.latest_at_or_before(second) == second
    assert paris.latest_at_or_before(second - 1) == first
    assert paris.latest_at_or_before(first + HOUR + 1) == first  # 02:00 CET that day is the repeat: not a time
    assert paris.count_between(first - 1, second + 1) == 2


def test_nothing_is_due_before_the_first_time_after_the_schedule_was_first_seen() -> None:
    schedule = every(60)
    assert due_ticks(schedule, 0, T0 + 10 * MINUTE, T0 + 50 * MINUTE) == []
    assert due_ticks(schedule, 0, T0 + 10 * MINUTE, T0 + HOUR + 5) == [DueTick(T0 + HOUR, pb.TICK_KIND_SCHEDULED)]
    assert due_ticks(schedule, T0 + HOUR, T0, T0 + HOUR + 30 * MINUTE) == []  # already ticked


def test_latest_policy_ticks_the_latest_time_and_counts_the_others_missed() -> None:
    schedule = every(60)
    # Down from just after T0's tick until 3.5 hours later: T0+1h and T0+2h are missed, T0+3h caught up.
    assert due_ticks(schedule, T0, T0, T0 + 3 * HOUR + 30 * MINUTE) == [
        DueTick(T0 + 3 * HOUR, pb.TICK_KIND_CATCH_UP, missed=2)
    ]
    assert due_ticks(schedule, T0, T0, T0 + 3 * HOUR + 10) == [DueTick(T0 + 3 * HOUR, pb.TICK_KIND_SCHEDULED, 2)]


def test_none_policy_ticks_only_on_time_else_records_one_skipped_tick() -> None:
    schedule = every(60, CatchUp.NONE)
    assert due_ticks(schedule, T0, T0, T0 + 3 * HOUR + 10) == [DueTick(T0 + 3 * HOUR, pb.TICK_KIND_SCHEDULED, 2)]
    assert due_ticks(schedule, T0, T0, T0 + 3 * HOUR + 30 * MINUTE) == [
        DueTick(T0 + 3 * HOUR, pb.TICK_KIND_SKIPPED, missed=2)
    ]


def test_all_policy_ticks_every_time_in_the_window_oldest_first_and_bounded() -> None:
    schedule = every(60, CatchUp.ALL, catch_up_window=dt.timedelta(hours=2))
    now = T0 + 5 * HOUR + 10
    assert due_ticks(schedule, T0, T0, now) == [
        DueTick(T0 + 4 * HOUR, pb.TICK_KIND_CATCH_UP, missed=3),  # T0+1h..T0+3h are before the window
        DueTick(T0 + 5 * HOUR, pb.TICK_KIND_SCHEDULED),
    ]
    minutely = every(1, CatchUp.ALL, catch_up_window=dt.timedelta(days=1))
    due = due_ticks(minutely, T0, T0, T0 + 10 * HOUR)
    assert len(due) == MAX_TICKS_PER_STEP  # the rest on the next steps, not dropped
    assert [tick.tick_ms for tick in due] == [T0 + n * MINUTE for n in range(1, MAX_TICKS_PER_STEP + 1)]
    after = due_ticks(minutely, due[-1].tick_ms, T0, T0 + 10 * HOUR)
    assert after[0].tick_ms == due[-1].tick_ms + MINUTE and after[0].missed == 0


def test_an_interval_shorter_than_two_minutes_has_half_its_period_as_grace() -> None:
    assert every(1).grace_ms == 30_000
    assert every(60).grace_ms == MINUTE
    assert every(60, grace=dt.timedelta(minutes=5)).grace_ms == 5 * MINUTE
