"""W1-shaped histories and a graph naming their refs, for the partition grid and the job graph.

`examples/clicks/simulate.py` (through `timetravelkit.w1_history`) writes refs under `site=N/`; the graph
here declares site 0's: `raw_clicks` (source), `daily_clicks` (reads its day's raw) and `weekly_clicks`
(reads its week's dailies), each pattern with one field, so the dailies lay out by day.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from contextlib import contextmanager

from partbuild.api.service import Service
from partbuild.orchestrator.graph import Graph, Job, Partition, SourceDataset
from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.database import Database
from partbuild.state.log.events import envelope, manual

from timetravelkit import PLAN, w1_history

DAILY = "agg/daily_clicks/site=0/date={date:date}"
WEEKLY = "agg/weekly_clicks/site=0/week={week}"
RAW = "raw/clicks/site=0/date={date:date}"
TAINTED = "agg/daily_clicks/site=0/date=2026-01-20"  # Live in the history; tainted at its end


def _no_run(_: object) -> None:
    raise AssertionError("no job runs here")


def _daily_inputs(partition: Partition) -> list[str]:
    return [f"raw/clicks/site=0/date={partition['date'].isoformat()}"]


def _weekly_inputs(partition: Partition) -> list[str]:
    year, week = partition["week"].split("-W")
    monday = dt.date.fromisocalendar(int(year), int(week), 1)
    return [f"agg/daily_clicks/site=0/date={(monday + dt.timedelta(days=n)).isoformat()}" for n in range(7)]


def _nowhere(_: Partition) -> str | None:
    return None


def grid_graph() -> Graph:
    return Graph(
        jobs=[
            Job("daily_clicks", [DAILY], run=_no_run, inputs=_daily_inputs),
            Job("weekly_clicks", [WEEKLY], run=_no_run, inputs=_weekly_inputs),
        ],
        sources=[SourceDataset("raw_clicks", RAW, locate=_nowhere)],
    )


def write_history(url: str) -> int:
    """Append the W1 history (two sites: taints, failures, check warnings) to a fresh log; returns its head.

    Its retention events become clock ticks (the seqs, so the instances' UUIDs, stay): every past seq reads."""
    events = w1_history(PLAN)
    for event in events:
        if event.WhichOneof("payload") == "instance_retention":
            event.ClearField("instance_retention")
            event.clock_tick.SetInParent()
    last = events[-1]
    taint = pb.PartitionTaint(partition_ref=TAINTED, reason="bad by hand", only_this_ref=True)
    events.append(envelope(taint, source=manual("ann"), timestamp_ms=last.timestamp_ms + 1_000, event_id="grid-taint"))
    with Database.open(url, auto_upgrade=True) as db:
        return db.log.append(events, expected_head=0).last_seq


@contextmanager
def grid_service(url: str) -> Iterator[Service]:
    with Database.open(url, auto_upgrade=True) as db:
        service = Service(db, graph=grid_graph())
        try:
            yield service
        finally:
            service.stop()
