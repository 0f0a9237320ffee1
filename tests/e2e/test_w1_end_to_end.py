"""W1 end to end on real Spark: wants for the weekly partitions only, built through partbuild.

Data: the session's W1 raw data (conftest: D=10 days from 2026-01-01, R=1000
rows a day). 2026-01-01 is a Thursday: 2026-W01 holds 4 days (Jan 1-4), 2026-W02 6.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from examples.clicks.pipeline import build_graph, daily_ref, raw_ref, week_days_in_range, weekly_ref, weeks_in_range
from partbuild.examples.clicks.isoweek import IsoWeek
from partbuild.orchestrator.loop import Orchestrator
from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.database import Database
from partbuild.state.fold.build_state import BuildState
from partbuild.state.fold.records import InstanceState, WantState
from partbuild.state.log.digest import state_digest
from partbuild.state.log.events import envelope, manual
from partbuild.state.log.store import EventLog
from partbuild.state.queries.lineage import lineage, ref_history

from sparkkit import CLICKS_DAYS, CLICKS_ROWS, CLICKS_START

WEEKS = weeks_in_range(CLICKS_DAYS, CLICKS_START)


def expected_weekly(week: IsoWeek) -> dict[str, int]:
    """Per url: R/50 clicks a day (W1: url = /p/(i % 50)) times the week's days in range."""
    per_day = Counter("/p/" + str(i % 50) for i in range(CLICKS_ROWS))
    days = len(week_days_in_range(week, CLICKS_DAYS, CLICKS_START))
    return {url: n * days for url, n in per_day.items()}


def read_counts(spark: Any, location: str) -> dict[str, int]:
    return {row["url"]: row["count"] for row in spark.read.parquet(location).collect()}


def want(log: EventLog, want_id: str, *refs: str) -> None:
    log.append([envelope(pb.WantCreate(want_id=want_id, partition_refs=list(refs)), source=manual("test"))])


@pytest.fixture
def orchestrator(spark: Any, clicks_root: Path, tmp_path: Path) -> Any:
    db = Database.open(f"sqlite:///{tmp_path / 'w1.db'}")
    graph = build_graph(clicks_root, days=CLICKS_DAYS, start=CLICKS_START)
    orch = Orchestrator(
        db, graph, warehouse=str(tmp_path / "warehouse"), spark=spark, source_check_interval_s=0, poll_interval_s=0.01
    )
    yield orch
    orch.close()
    db.close()


def test_weekly_wants_build_w1_with_lineage(spark: Any, orchestrator: Orchestrator) -> None:
    for week in WEEKS:
        want(orchestrator.log, f"weekly-{week}", weekly_ref(week))
    assert orchestrator.run_until_idle(timeout_s=180)
    state = orchestrator.state
    assert not state.rejections
    assert {w.want_id: w.state for w in state.wants.values() if w.state != WantState.SUCCESSFUL} == {}
    # The dailies came as derivative wants of the weekly ones.
    derived = [w for w in state.wants.values() if w.parent_want_id]
    assert derived and {w.root_want_id for w in derived} <= {f"weekly-{week}" for week in WEEKS}

    for week in WEEKS:
        weekly = state.canonical_instance(weekly_ref(week))
        assert weekly is not None and weekly.state == InstanceState.LIVE
        assert weekly.uuid in (weekly.location or "")  # instance-specific location
        assert read_counts(spark, weekly.location or "") == expected_weekly(week)
        days = week_days_in_range(week, CLICKS_DAYS, CLICKS_START)
        dailies = [state.canonical_instance(daily_ref(day)) for day in days]
        assert list(weekly.inputs) == [d.uuid for d in dailies if d is not None]
        for day, daily in zip(days, dailies, strict=True):
            assert daily is not None and daily.state == InstanceState.LIVE
            raw = state.canonical_instance(raw_ref(day))
            assert raw is not None and daily.inputs == (raw.uuid,)
            assert raw.built_by is None and raw.location  # observed source data
        graph = lineage(state, weekly.uuid, direction="upstream", depth=2)
        assert len(graph.nodes) == 1 + 2 * len(days)

    # Dailies were built in batches of up to 7 partitions per job run.
    daily_runs = [run for run in state.job_runs.values() if run.job_label == "daily_clicks"]
    assert all(1 <= len(run.instance_uuids) <= 7 for run in daily_runs)
    assert sum(len(run.instance_uuids) for run in daily_runs) == CLICKS_DAYS


def test_taint_daily_then_new_weekly_want_rebuilds_both(spark: Any, orchestrator: Orchestrator) -> None:
    week = WEEKS[0]
    want(orchestrator.log, "first", weekly_ref(week))
    assert orchestrator.run_until_idle(timeout_s=120)
    state = orchestrator.state
    day = week_days_in_range(week, CLICKS_DAYS, CLICKS_START)[1]
    old_daily = state.canonical_instance(daily_ref(day))
    old_weekly = state.canonical_instance(weekly_ref(week))
    assert old_daily is not None and old_weekly is not None

    orchestrator.log.append([envelope(pb.PartitionTaint(partition_ref=daily_ref(day), reason="late clicks"))])
    want(orchestrator.log, "again", weekly_ref(week))
    assert orchestrator.run_until_idle(timeout_s=120)

    new_daily = state.canonical_instance(daily_ref(day))
    new_weekly = state.canonical_instance(weekly_ref(week))
    assert new_daily is not None and new_weekly is not None
    assert new_daily.uuid != old_daily.uuid and new_weekly.uuid != old_weekly.uuid
    assert new_daily.uuid in new_weekly.inputs and old_daily.uuid not in new_weekly.inputs
    assert state.wants["again"].state == WantState.SUCCESSFUL
    # The old instances stay queryable, and their data was not overwritten.
    assert old_daily.state == InstanceState.TAINTED and old_weekly.state == InstanceState.TAINTED
    assert [i.uuid for i in ref_history(state, weekly_ref(week))] == [new_weekly.uuid, old_weekly.uuid]
    assert read_counts(spark, old_weekly.location or "") == read_counts(spark, new_weekly.location or "")
    assert new_weekly.location != old_weekly.location
    # Untouched dailies of the same week were reused, not rebuilt.
    other = state.canonical_instance(daily_ref(week_days_in_range(week, CLICKS_DAYS, CLICKS_START)[0]))
    assert other is not None and len(other.attempts) == 1


def test_replay_of_the_w1_log_matches_the_live_state(orchestrator: Orchestrator) -> None:
    want(orchestrator.log, "w", weekly_ref(WEEKS[1]))
    assert orchestrator.run_until_idle(timeout_s=120)
    replayed = BuildState(strict=True)
    for seq, payload in orchestrator.log.iter_payloads():
        replayed.apply_payload(seq, payload)
    assert state_digest(replayed) == state_digest(orchestrator.state)
