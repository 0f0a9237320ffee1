"""Schedules declared in the graph, and which of their times are due (pure: the loop appends the ticks).

    Schedule("nightly", cron="0 2 * * *", timezone="Europe/Paris",
             want=lambda tick: [f"daily/date={(tick - timedelta(days=1)).date()}"], ttl=timedelta(days=2))
    Schedule("often", every=timedelta(minutes=5), want=...)

A schedule's times are the cron expression's in its time zone (croniter; a wall time the
clocks go back over ticks once, at its first occurrence) or the multiples of `every` since the Unix epoch: the
same for every orchestrator, so a tick's identity (schedule, time) is the same whoever
evaluates it, and the fold keeps the first copy (state/fold/schedules.py).

Which times are due at `now`, given the schedule's last tick in the log:

| catch-up policy | times since the last tick | ticks |
| --- | --- | --- |
| `LATEST` (default) | any | the latest only; the others counted as missed |
| `ALL` (`catch_up_window`) | any | each in the window, oldest first, a bounded batch a step; older missed |
| `NONE` | the latest on time (within `grace`) | it; the others missed |
| `NONE` | none on time | one skipped tick at the latest, recorded, no want |

A tick later than `grace` after its time is a catch-up tick (the orchestrator was down
or paused). A schedule that never ticked starts at the first time after the orchestrator
first saw it: nothing before that is missed.

A time is due from its very millisecond: the loop waking at (or after) it ticks it, whatever the cron's
resolution (a seconds field included), so a missed time means nobody was ticking then. A cron expression
that never fires (`0 0 30 2 *`) or whose next time is more than a year away is refused at declaration.
"""

from __future__ import annotations

import datetime as dt
import enum
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from partbuild.orchestrator.declarations import DeclarationError, duration_problem, text_problem
from partbuild.proto.v1 import events_pb2 as pb

MAX_TICKS_PER_STEP = 50  # ALL: a long outage is caught up a bounded batch at a time, never dropped
MAX_COUNTED = 100_000  # missed times of a cron schedule are counted up to this many
DEFAULT_GRACE = dt.timedelta(minutes=1)
# A cron's next time must come within this when it is declared: a yearly one does (a leap year's 366 days);
# one that never fires (February 30th) or not for years (a year field far ahead) is a mistake, refused at load.
MAX_CRON_WAIT = dt.timedelta(days=366)
_SECOND = dt.timedelta(seconds=1)
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)

WantFunction = Callable[[dt.datetime], Iterable[str]]


class ScheduleError(DeclarationError):
    """A schedule that cannot be declared (its message says which setting and why)."""


class CatchUp(enum.Enum):
    """What to do with the times that passed while nobody was ticking."""

    LATEST = "latest"
    ALL = "all"
    NONE = "none"


@dataclass(frozen=True)
class Schedule:
    """A named schedule: when it ticks and which partitions each tick wants."""

    name: str
    want: WantFunction
    cron: str | None = None
    every: dt.timedelta | None = None
    timezone: str = "UTC"
    ttl: dt.timedelta | None = None
    sla: dt.timedelta | None = None
    comment: str = ""
    catch_up: CatchUp = CatchUp.LATEST
    catch_up_window: dt.timedelta = dt.timedelta(days=1)
    grace: dt.timedelta | None = None  # default: a minute, or half the period of a shorter interval

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not 0 < len(self.name) <= 200 or "/" in self.name:
            raise ScheduleError(f"schedule name {self.name!r}: 1 to 200 characters, no '/'")
        if not callable(self.want):
            raise ScheduleError(f"schedule {self.name!r}: want must be a function of the tick's time")
        if (self.cron is None) == (self.every is None):
            raise ScheduleError(f"schedule {self.name!r}: give a cron expression or an interval (every), one of them")
        if self.cron is not None and (not isinstance(self.cron, str) or not _croniter().is_valid(self.cron)):
            raise ScheduleError(f"schedule {self.name!r}: {self.cron!r} is not a cron expression")
        if self.every is not None and (not isinstance(self.every, dt.timedelta) or self.every < _SECOND):
            raise ScheduleError(f"schedule {self.name!r}: an interval is a timedelta of at least one second")
        if problem := _settings_problem(self):
            raise ScheduleError(f"schedule {self.name!r}: {problem}")
        try:
            ZoneInfo(self.timezone)
        except (ZoneInfoNotFoundError, ValueError):
            raise ScheduleError(f"schedule {self.name!r}: unknown time zone {self.timezone!r}") from None
        if not isinstance(self.catch_up, CatchUp):
            raise ScheduleError(f"schedule {self.name!r}: catch_up is a CatchUp, not {self.catch_up!r}")
        if self.cron is not None and (problem := _cron_problem(self.cron, self.zone, time.time_ns() // 1_000_000)):
            raise ScheduleError(f"schedule {self.name!r}: {problem}")

    @property
    def zone(self) -> ZoneInfo:
        return ZoneInfo(self.timezone)

    @property
    def grace_ms(self) -> int:
        if self.grace is not None:
            return int(self.grace.total_seconds() * 1000)
        if self.every is not None:
            return min(_ms(DEFAULT_GRACE), _ms(self.every) // 2)
        return _ms(DEFAULT_GRACE)

    @property
    def describe(self) -> str:
        """When it ticks, in a few words ("cron 0 2 * * * Europe/Paris", "every 0:05:00")."""
        return f"cron {self.cron} {self.timezone}" if self.cron else f"every {self.every}"

    def times_after(self, after_ms: int) -> Iterator[int]:
        """The schedule's times strictly after `after_ms`, ascending: forever, or until a cron's year field ends."""
        if self.every is not None:
            period = _ms(self.every)
            tick = (after_ms // period + 1) * period
            while True:
                yield tick
                tick += period
        yield from _cron_times(self.cron, self.zone, after_ms)  # type: ignore[arg-type]

    def latest_at_or_before(self, at_ms: int) -> int | None:
        """The schedule's last time at or before `at_ms` (None: a cron with none yet, its year field ahead)."""
        if self.every is not None:
            period = _ms(self.every)
            return at_ms // period * period
        from croniter import CroniterBadDateError

        # croniter's get_prev is strictly before its start, to the microsecond: starting 1 ms after `at_ms` makes
        # a time exactly at `at_ms` (the loop woke at the due millisecond) the latest, for minute and seconds
        # crons alike. (Times are whole seconds, so nothing lies between at_ms and at_ms + 1 ms.)
        times = _croniter()(self.cron, _moment(at_ms + 1, self.zone))
        try:
            while _repeated(found := times.get_prev(dt.datetime)):
                pass
        except CroniterBadDateError:
            return None
        return int(found.timestamp() * 1000)

    def next_after(self, at_ms: int) -> int | None:
        """The schedule's first time strictly after `at_ms` (None: a cron whose year field has passed)."""
        return next(self.times_after(at_ms), None)

    def count_between(self, after_ms: int, before_ms: int) -> int:
        """How many times lie strictly between the two (counted up to MAX_COUNTED)."""
        if before_ms <= after_ms:
            return 0
        if self.every is not None:
            period = _ms(self.every)
            return max(0, (before_ms - 1) // period - after_ms // period)
        count = 0
        for tick in self.times_after(after_ms):
            if tick >= before_ms or count >= MAX_COUNTED:
                return count
            count += 1
        return count  # pragma: no cover (the iterator never ends)


@dataclass(frozen=True)
class DueTick:
    """A tick to append: its time, kind and how many times before it were given up."""

    tick_ms: int
    kind: pb.TickKind
    missed: int = 0


def due_ticks(schedule: Schedule, last_tick_ms: int, first_seen_ms: int, now_ms: int) -> list[DueTick]:
    """The ticks due at `now_ms`, oldest first (see the module's table)."""
    start = last_tick_ms or first_seen_ms
    latest = schedule.latest_at_or_before(now_ms)
    if latest is None or latest <= start:
        return []
    grace = schedule.grace_ms

    def kind(tick_ms: int) -> pb.TickKind:
        return pb.TICK_KIND_SCHEDULED if now_ms - tick_ms <= grace else pb.TICK_KIND_CATCH_UP

    if schedule.catch_up is CatchUp.LATEST:
        return [DueTick(latest, kind(latest), schedule.count_between(start, latest))]
    if schedule.catch_up is CatchUp.NONE:
        missed = schedule.count_between(start, latest)
        if now_ms - latest <= grace:
            return [DueTick(latest, pb.TICK_KIND_SCHEDULED, missed)]
        return [DueTick(latest, pb.TICK_KIND_SKIPPED, missed)]
    window_start = now_ms - _ms(schedule.catch_up_window)
    first_kept = max(start, window_start - 1)
    missed = schedule.count_between(start, first_kept + 1) if first_kept > start else 0
    ticks: list[DueTick] = []
    for tick_ms in schedule.times_after(first_kept):
        if tick_ms > now_ms or len(ticks) == MAX_TICKS_PER_STEP:
            break
        ticks.append(DueTick(tick_ms, kind(tick_ms), missed if not ticks else 0))
    return ticks


def tick_time(schedule: Schedule, tick_ms: int) -> dt.datetime:
    """The tick's time as the want function gets it: aware, in the schedule's time zone."""
    return dt.datetime.fromtimestamp(tick_ms / 1000, tz=schedule.zone)


def _settings_problem(schedule: Schedule) -> str | None:
    """Why a schedule's other settings are not of their types and ranges, or None."""
    return (
        text_problem(schedule.timezone, "timezone")
        or duration_problem(schedule.ttl, "ttl", _SECOND, optional=True)  # ticks' wants carry whole seconds
        or duration_problem(schedule.sla, "sla", _SECOND, optional=True)
        or text_problem(schedule.comment, "comment")
        or duration_problem(schedule.catch_up_window, "catch_up_window", _SECOND)
        or duration_problem(schedule.grace, "grace", dt.timedelta(0), optional=True)
    )


def _cron_problem(cron: str, zone: ZoneInfo, now_ms: int) -> str | None:
    """Why a valid cron expression cannot be a schedule's (it never fires, or not within a year of now), or None."""
    upcoming = next(_cron_times(cron, zone, now_ms), None)
    if upcoming is None:
        return f"cron {cron!r} never fires (no time in the next 50 years)"
    if upcoming - now_ms > _ms(MAX_CRON_WAIT):
        return f"cron {cron!r} next fires at {_moment(upcoming, zone).isoformat()}, more than a year away"
    return None


def _cron_times(cron: str, zone: ZoneInfo, after_ms: int) -> Iterator[int]:
    """A cron's times strictly after `after_ms`, ascending (a repeated wall time once), until it has no more."""
    from croniter import CroniterBadDateError

    times = _croniter()(cron, _moment(after_ms, zone))
    while True:
        try:  # croniter searches 50 years ahead, then gives up: no time left (a year field passed, February 30th)
            moment = times.get_next(dt.datetime)
        except CroniterBadDateError:
            return
        if not _repeated(moment):
            yield int(moment.timestamp() * 1000)


def _moment(at_ms: int, zone: ZoneInfo) -> dt.datetime:
    """`at_ms` as an aware time in `zone`, exact to the millisecond (no float on the way)."""
    return (_EPOCH + dt.timedelta(milliseconds=at_ms)).astimezone(zone)


def _croniter() -> Any:
    """croniter, imported when a cron schedule is first used: its import probes the interpreter with a
    child process (`file -b`, platform.architecture), which every graph without cron schedules is spared."""
    from croniter import croniter

    return croniter


def _repeated(moment: dt.datetime) -> bool:
    """Whether a wall time is the second occurrence of one the clocks went back over (a cron time ticks once)."""
    return moment.fold == 1 and moment.replace(fold=0).utcoffset() != moment.utcoffset()


def _ms(delta: dt.timedelta) -> int:
    return int(delta.total_seconds() * 1000)
