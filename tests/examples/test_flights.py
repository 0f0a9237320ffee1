"""The flights example (examples/flights): a fan-out (one raw day -> a partition per carrier) then a fan-in (a
carrier's days -> its month, a `month` field), built by a real orchestrator on a real SQLite log from small
generated data; its jobs are plain Python, so no Spark starts."""

from __future__ import annotations

import csv
import datetime as dt
from collections.abc import Iterator
from pathlib import Path

import pytest

from examples.flights.generate import generate, write_day
from examples.flights.pipeline import (
    CARRIERS,
    DELAYED_MINUTES,
    build_graph,
    daily_ref,
    days_of,
    monthly_ref,
    raw_path,
    raw_ref,
)
from partbuild.orchestrator.graph import load_graph
from partbuild.orchestrator.loop import Orchestrator
from partbuild.orchestrator.spark import LazySpark
from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.database import Database
from partbuild.state.fold.records import InstanceState, JobRunState
from partbuild.state.log.events import envelope, manual

REPO_ROOT = Path(__file__).resolve().parents[2]
FEBRUARY = dt.date(2013, 2, 1)


class NoSpark:
    """A session factory that must never be called: these jobs do not read `ctx.spark`."""

    calls = 0

    def __call__(self) -> None:
        NoSpark.calls += 1
        raise AssertionError("a flights job asked for Spark")


@pytest.fixture
def database(sqlite_url: str) -> Iterator[Database]:
    with Database.open(sqlite_url, auto_upgrade=True) as db:
        yield db


def expected_month(root: Path, carrier: str, month: dt.date) -> tuple[int, int, float]:
    """(flights, delayed, mean delay) computed straight from the raw files."""
    delays = []
    for day in days_of(month):
        with raw_path(root, day).open(newline="") as raw:
            delays.extend(int(row["dep_delay"]) for row in csv.DictReader(raw) if row["carrier"] == carrier)
    return len(delays), sum(d > DELAYED_MINUTES for d in delays), round(sum(delays) / len(delays), 3)


def build(db: Database, tmp_path: Path, root: Path, *refs: str) -> Orchestrator:
    orchestrator = Orchestrator(
        db, build_graph(root), warehouse=str(tmp_path / "wh"), spark=LazySpark(NoSpark()), poll_interval_s=0.01
    )
    want = pb.WantCreate(want_id="months", partition_refs=list(refs))
    orchestrator.log.append([envelope(want, source=manual("t"))])
    assert orchestrator.run_until_idle(120)
    return orchestrator


def test_refs_and_the_graph_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert monthly_ref("AA", dt.date(2013, 2, 17)) == "flights/monthly/carrier=AA/month=2013-02"
    assert daily_ref("UA", dt.date(2013, 2, 3)) == "flights/daily/carrier=UA/date=2013-02-03"
    assert len(days_of(FEBRUARY)) == 28 and len(days_of(dt.date(2012, 2, 1))) == 29
    monkeypatch.setenv("PARTBUILD_FLIGHTS_ROOT", str(tmp_path))
    graph = load_graph(str(REPO_ROOT / "examples" / "flights" / "pipeline.py"))
    month = graph.resolve("flights/monthly/carrier=B6/month=2013-02")
    assert month.producer.label == "monthly_delays"  # type: ignore[union-attr]
    assert graph.resolve("flights/daily/carrier=B6/date=2013-02-28").producer.label == "split_by_carrier"  # type: ignore[union-attr]
    assert graph.resolve(raw_ref(FEBRUARY)).producer.name == "raw_flights"  # type: ignore[union-attr]


def test_months_per_carrier_match_the_raw_data_and_only_wanted_carriers_are_split(
    database: Database, tmp_path: Path
) -> None:
    root = tmp_path / "data"
    generate(root, FEBRUARY, per_day=12)
    wanted = [monthly_ref(carrier, FEBRUARY) for carrier in ("AA", "UA")]
    orchestrator = build(database, tmp_path, root, *wanted)
    state = orchestrator.state
    for carrier, ref in zip(("AA", "UA"), wanted, strict=True):
        instance = state.canonical_instance(ref)
        assert instance is not None and instance.state == InstanceState.LIVE
        with (Path(instance.location) / "part.csv").open(newline="") as out:
            row = next(csv.DictReader(out))
        flights, delayed, mean = expected_month(root, carrier, FEBRUARY)
        assert (int(row["flights"]), int(row["delayed"]), float(row["mean_delay"])) == (flights, delayed, mean)
    for day in days_of(FEBRUARY):
        assert state.canonical_instance(daily_ref("AA", day)).state == InstanceState.LIVE  # type: ignore[union-attr]
        assert state.canonical_instance(daily_ref("DL", day)) is None  # nobody wanted DL: not split out
    # The fan-out: 56 dailies in runs of up to 28 partitions (7 days of every carrier), each day read once a run.
    splits = [run for run in state.job_runs.values() if run.job_label == "split_by_carrier"]
    assert all(run.state == JobRunState.SUCCEEDED for run in splits) and len(splits) >= 2
    assert NoSpark.calls == 0


def test_a_late_day_is_waited_for_then_built(database: Database, tmp_path: Path) -> None:
    """A month whose last day has not arrived waits on it; once the file lands, the month is built."""
    root = tmp_path / "data"
    generate(root, FEBRUARY, per_day=6)
    last = days_of(FEBRUARY)[-1]
    raw_path(root, last).unlink()
    orchestrator = Orchestrator(
        database, build_graph(root), warehouse=str(tmp_path / "wh"), spark=LazySpark(NoSpark()), poll_interval_s=0.01
    )
    ref = monthly_ref("B6", FEBRUARY)
    want = pb.WantCreate(want_id="late", partition_refs=[ref], ttl_seconds=3600)
    orchestrator.log.append([envelope(want, source=manual("t"))])
    assert not orchestrator.run_until_idle(3)  # the month waits for its last day (a TTL of 0 would wait forever)
    assert orchestrator.state.canonical_instance(ref).state == InstanceState.UPSTREAM_BUILDING  # type: ignore[union-attr]
    write_day(root, last, [(carrier, n, 30) for n, carrier in enumerate(CARRIERS)])
    assert orchestrator.run_until_idle(120)
    assert orchestrator.state.canonical_instance(ref).state == InstanceState.LIVE  # type: ignore[union-attr]
