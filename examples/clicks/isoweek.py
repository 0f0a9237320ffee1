"""ISO 8601 weeks as a partition field type (`{week:isoweek}`, written `2026-W02`), for the clicks example."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from partbuild.orchestrator.graph import register_field_type


@dataclass(frozen=True, order=True)
class IsoWeek:
    """An ISO 8601 week, written `2026-W02`."""

    year: int
    week: int

    @classmethod
    def parse(cls, text: str) -> IsoWeek:
        year, week = text.split("-W")
        parsed = cls(int(year), int(week))
        parsed.monday()  # raises ValueError for a week the year does not have
        return parsed

    @classmethod
    def of(cls, day: dt.date) -> IsoWeek:
        year, week, _ = day.isocalendar()
        return cls(year, week)

    def monday(self) -> dt.date:
        return dt.date.fromisocalendar(self.year, self.week, 1)

    def days(self) -> list[dt.date]:
        first = self.monday()
        return [first + dt.timedelta(days=offset) for offset in range(7)]

    def __str__(self) -> str:
        return f"{self.year}-W{self.week:02d}"


register_field_type("isoweek", r"[0-9]{4}-W[0-9]{2}", IsoWeek.parse, str)
