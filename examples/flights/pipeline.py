"""Flights: a fan-out then a fan-in, no Spark: raw days -> one partition per carrier and day -> per carrier and month.

- source `raw/flights/date=YYYY-MM-DD`: one CSV a day (`carrier,flight,dep_delay`), see `generate.py`;
- `flights/daily/carrier=XX/date=YYYY-MM-DD` (job `split_by_carrier`, fan-out): that day's rows of carrier XX.
  One run reads each raw day it needs once and writes every carrier of that day that is wanted;
- `flights/monthly/carrier=XX/month=YYYY-MM` (job `monthly_delays`, fan-in): the month's dailies of XX summed:
  `flights`, `delayed` (dep_delay > 15) and `mean_delay`, one CSV row.

W1 fans dailies in to weeks on Spark; here one input fans out to many outputs, and the jobs are plain Python
(`ctx.spark` is never read, so no JVM starts). The month is the built-in `month` field type, the carrier a `str`.
Data root: `PARTBUILD_FLIGHTS_ROOT` (default `flights-data`). Only `partbuild.*` is imported: `partbuild run
--graph examples/flights/pipeline.py` loads this file by path.

    partbuild want --db sqlite:///flights.db flights/monthly/carrier=AA/month=2013-01
    partbuild run --db sqlite:///flights.db --graph examples/flights/pipeline.py --warehouse wh --until-idle
"""

from __future__ import annotations

import calendar
import csv
import datetime as dt
import os
from collections import defaultdict
from pathlib import Path

from partbuild.orchestrator.context import JobContext
from partbuild.orchestrator.graph import Graph, Job, Partition, PartitionPattern, SourceDataset

CARRIERS = ("AA", "B6", "DL", "UA")
RAW = "raw/flights/date={date:date}"
DAILY = "flights/daily/carrier={carrier}/date={date:date}"
MONTHLY = "flights/monthly/carrier={carrier}/month={month:month}"
DELAYED_MINUTES = 15

_RAW, _DAILY, _MONTHLY = PartitionPattern(RAW), PartitionPattern(DAILY), PartitionPattern(MONTHLY)


def raw_ref(day: dt.date) -> str:
    return _RAW.format(date=day)


def daily_ref(carrier: str, day: dt.date) -> str:
    return _DAILY.format(carrier=carrier, date=day)


def monthly_ref(carrier: str, month: dt.date) -> str:
    return _MONTHLY.format(carrier=carrier, month=month)


def days_of(month: dt.date) -> list[dt.date]:
    """Every day of the month of `month`."""
    first = month.replace(day=1)
    return [first.replace(day=day) for day in range(1, calendar.monthrange(first.year, first.month)[1] + 1)]


def raw_path(root: Path, day: dt.date) -> Path:
    return root / "raw" / "flights" / f"date={day.isoformat()}.csv"


def split_by_carrier(ctx: JobContext) -> None:
    """Fan-out: each raw day read once, its rows written to the wanted carriers' partitions of that day."""
    by_day: dict[dt.date, list] = defaultdict(list)
    for target in ctx.outputs:
        by_day[target.partition["date"]].append(target)
    for day, targets in sorted(by_day.items()):
        with open(ctx.input(raw_ref(day)), newline="") as raw:
            rows = list(csv.DictReader(raw))
        for target in targets:
            carrier = target.partition["carrier"]
            mine = [row for row in rows if row["carrier"] == carrier]
            _write(target.location, ["flight", "dep_delay"], [[row["flight"], row["dep_delay"]] for row in mine])
            ctx.record(target.ref, row_count=len(mine))
        ctx.log.info("split %s into %d carrier partition(s)", day, len(targets))


def monthly_delays(ctx: JobContext) -> None:
    """Fan-in: a carrier's month from its dailies."""
    for target in ctx.outputs:
        carrier, month = target.partition["carrier"], target.partition["month"]
        delays: list[int] = []
        for location in ctx.inputs([daily_ref(carrier, day) for day in days_of(month)]):
            with open(Path(location) / "part.csv", newline="") as daily:
                delays.extend(int(row["dep_delay"]) for row in csv.DictReader(daily))
        delayed = sum(delay > DELAYED_MINUTES for delay in delays)
        mean = round(sum(delays) / len(delays), 3) if delays else 0.0
        _write(target.location, ["flights", "delayed", "mean_delay"], [[len(delays), delayed, mean]])
        ctx.record(target.ref, row_count=1, flights=len(delays))


def _write(location: str, header: list[str], rows: list[list]) -> None:
    directory = Path(location)
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / "part.csv", "w", newline="") as out:
        writer = csv.writer(out)
        writer.writerow(header)
        writer.writerows(rows)


def build_graph(root: Path) -> Graph:
    """The flights graph over raw data under `root`."""

    def locate(partition: Partition) -> str | None:
        path = raw_path(root, partition["date"])
        return str(path) if path.exists() else None

    return Graph(
        [
            Job(
                "split_by_carrier",
                [DAILY],
                split_by_carrier,
                inputs=lambda p: [raw_ref(p["date"])],
                batch_size=len(CARRIERS) * 7,  # a week of days, every carrier
            ),
            Job(
                "monthly_delays",
                [MONTHLY],
                monthly_delays,
                inputs=lambda p: [daily_ref(p["carrier"], day) for day in days_of(p["month"])],
                batch_size=len(CARRIERS),
            ),
        ],
        [SourceDataset("raw_flights", RAW, locate=locate)],
    )


def graph() -> Graph:
    """What `partbuild run --graph examples/flights/pipeline.py` loads."""
    return build_graph(Path(os.environ.get("PARTBUILD_FLIGHTS_ROOT", "flights-data")))
