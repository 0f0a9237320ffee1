"""The W1 clicks example without Spark: its partition patterns and refs, the weeks a day range covers, and
the graph the pipeline file builds from its environment. On real Spark: tests/e2e/test_clicks_spark.py.

2026-01-01 is a Thursday, so over D=10 days 2026-W01 has 4 days in range (Jan 1-4) and 2026-W02 is the
last, partial week with 6 (Jan 5-10).
"""

from __future__ import annotations

from datetime import date, timedelta
from pathlib import Path

import pytest

from examples.clicks.pipeline import (
    DAILY,
    RAW,
    RAW_KEYS,
    WEEKLY,
    daily_ref,
    raw_ref,
    week_days_in_range,
    weekly_ref,
    weeks_in_range,
)
from partbuild.examples.clicks.isoweek import IsoWeek
from partbuild.orchestrator.graph import load_graph
from partbuild.orchestrator.publish import Publish

REPO_ROOT = Path(__file__).resolve().parents[2]
D = 10
START = date(2026, 1, 1)
DAYS = [START + timedelta(days=k) for k in range(D)]
W01, W02 = IsoWeek(2026, 1), IsoWeek(2026, 2)
WEEK_DAYS = {W01: DAYS[:4], W02: DAYS[4:]}


def test_patterns_and_refs() -> None:
    assert (RAW, DAILY, WEEKLY) == (
        "raw/clicks/date={date:date}",
        "agg/daily_clicks/date={date:date}",
        "agg/weekly_clicks/week={week:isoweek}",
    )
    assert raw_ref(date(2026, 1, 9)) == "raw/clicks/date=2026-01-09"
    assert daily_ref(date(2026, 1, 9)) == "agg/daily_clicks/date=2026-01-09"
    assert weekly_ref(W01) == "agg/weekly_clicks/week=2026-W01"


def test_week_helpers_cover_partial_weeks_at_both_ends() -> None:
    assert weeks_in_range(D, START) == [W01, W02]
    assert week_days_in_range(W01, D, START) == WEEK_DAYS[W01]
    assert week_days_in_range(W02, D, START) == WEEK_DAYS[W02]
    assert week_days_in_range(IsoWeek(2026, 3), D, START) == []
    # Default W1 (28 days): Jan 1-4, four full weeks' worth ... and Jan 26-28 in a partial W05.
    assert weeks_in_range(28) == [IsoWeek(2026, n) for n in range(1, 6)]
    assert week_days_in_range(IsoWeek(2026, 5), 28) == [date(2026, 1, 26), date(2026, 1, 27), date(2026, 1, 28)]
    assert week_days_in_range(IsoWeek(2025, 52), 28) == []


def test_the_env_configured_graph_discovers_raw_clicks_on_request(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pipeline = REPO_ROOT / "examples" / "clicks" / "pipeline.py"
    (tmp_path / "raw" / "clicks").mkdir(parents=True)
    monkeypatch.setenv("PARTBUILD_CLICKS_ROOT", str(tmp_path))
    assert load_graph(pipeline).sources["raw_clicks"].discovery is None  # by default: located when wanted
    monkeypatch.setenv("PARTBUILD_CLICKS_DISCOVER", "1")
    source = load_graph(pipeline).sources["raw_clicks"]
    assert source.locate is None and source.discovery is not None
    assert source.discovery.keys == RAW_KEYS
    assert source.discovery.location_of("date=2026-01-01") == f"{tmp_path.absolute()}/raw/clicks/date=2026-01-01"


def test_the_env_configured_graph_publishes_tables_on_request(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pipeline = REPO_ROOT / "examples" / "clicks" / "pipeline.py"
    monkeypatch.setenv("PARTBUILD_CLICKS_ROOT", str(tmp_path))
    assert [job.publish for job in load_graph(pipeline).jobs.values()] == [None, None]  # by default: no table
    monkeypatch.setenv("PARTBUILD_CLICKS_PUBLISH", "clicks")
    published = {label: job.publish for label, job in load_graph(pipeline).jobs.items()}
    assert published == {
        "daily_clicks": Publish("clicks.daily_clicks"),
        "weekly_clicks": Publish("clicks.weekly_clicks"),
    }


def test_the_env_configured_graph_leaves_the_checks_out_on_request(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pipeline = REPO_ROOT / "examples" / "clicks" / "pipeline.py"
    monkeypatch.setenv("PARTBUILD_CLICKS_ROOT", str(tmp_path))
    checks = {label: [check.name for check in job.checks] for label, job in load_graph(pipeline).jobs.items()}
    assert checks == {"daily_clicks": ["daily_not_empty"], "weekly_clicks": ["weekly_total_matches_dailies"]}
    monkeypatch.setenv("PARTBUILD_CLICKS_CHECKS", "0")
    assert [job.checks for job in load_graph(pipeline).jobs.values()] == [(), ()]
