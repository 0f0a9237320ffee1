"""The W1 clicks example on real Spark: generator, graph declaration, job functions, and the plain-loop floor.

One module-wide data set (D=10 days from 2026-01-01, R=1000 rows a day) keeps
the module fast. Expected values come straight from the W1 formulas, computed
here in Python, never from the code under test. 2026-01-01 is a Thursday, so
2026-W01 has 4 days in range (Jan 1-4) and 2026-W02 is the last, partial week
with 6 (Jan 5-10). Its refs and week helpers without Spark: tests/examples/test_clicks.py.
"""

from __future__ import annotations

import logging
from collections import Counter
from datetime import date, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

import pytest
from pyspark.sql import functions as F

from examples.clicks.pipeline import build_graph, daily_ref, raw_ref, run_daily, run_weekly, weekly_ref
from examples.clicks.plain import run_plain
from partbuild.examples.clicks.isoweek import IsoWeek
from partbuild.orchestrator.context import JobContext, MissingInputs, OutputTarget, PermanentJobError
from partbuild.orchestrator.graph import Graph, GraphError, Job, SourceDataset, load_graph

REPO_ROOT = Path(__file__).resolve().parents[2]
D = 10
R = 1000
START = date(2026, 1, 1)
DAYS = [START + timedelta(days=k) for k in range(D)]
W01, W02 = IsoWeek(2026, 1), IsoWeek(2026, 2)
WEEK_DAYS = {W01: DAYS[:4], W02: DAYS[4:]}
MIDNIGHT_2026_01_01 = 1767225600  # epoch seconds


def w1_row(day_index: int, i: int) -> tuple[int, str, int]:
    """Row i of a day per the W1 formulas: (user_id, url, ts as epoch seconds)."""
    return (i * 7919) % 1000, "/p/" + str(i % 50), MIDNIGHT_2026_01_01 + day_index * 86400 + i % 86400


def expected_daily() -> dict[str, int]:
    return dict(Counter("/p/" + str(i % 50) for i in range(R)))


def expected_weekly(week: IsoWeek) -> dict[str, int]:
    return {url: n * len(WEEK_DAYS[week]) for url, n in expected_daily().items()}


def read_counts(spark: Any, locations: dict[str, str]) -> dict[str, dict[str, int]]:
    """The url -> count contents of several outputs (ref -> location), read in one Spark job."""
    frame = spark.read.parquet(*locations.values())
    assert frame.columns == ["url", "count"]
    by_directory: dict[str, dict[str, int]] = {}
    for row in frame.select("url", "count", "_metadata.file_path").collect():
        directory = str(Path(unquote(urlparse(row["file_path"]).path)).parent)
        counts = by_directory.setdefault(directory, {})
        assert row["url"] not in counts, f"{row['url']} twice in {directory}"
        counts[row["url"]] = row["count"]
    return {ref: by_directory.get(str(Path(location)), {}) for ref, location in locations.items()}


def make_ctx(
    spark: Any, graph: Graph, job_label: str, refs: list[str], input_locations: dict[str, str], out_dir: Path
) -> JobContext:
    """A JobContext as the executor would build it: one instance-specific location per output."""
    outputs = [
        OutputTarget(graph.resolve(ref).partition, f"instance-{n}", str(out_dir / ref / f"instance-{n}"))
        for n, ref in enumerate(refs)
    ]
    return JobContext(
        open_spark=lambda: spark,
        job_run_id=f"run-{job_label}",
        job_label=job_label,
        outputs=outputs,
        input_locations=input_locations,
        log=logging.getLogger("test.clicks"),
    )


@pytest.fixture(scope="module")
def data_root(clicks_root: Path) -> Path:
    """The session's W1 raw data (conftest: D=10, R=1000 from 2026-01-01)."""
    days = sorted(p.name for p in (clicks_root / "raw/clicks").iterdir() if p.is_dir())
    assert days == [f"date={d.isoformat()}" for d in DAYS]
    return clicks_root


@pytest.fixture(scope="module")
def graph(data_root: Path) -> Graph:
    return build_graph(data_root, days=D, start=START)


@pytest.fixture(scope="module")
def built(spark: Any, graph: Graph, data_root: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Every daily and weekly partition built by the job functions: ref -> location."""
    out = tmp_path_factory.mktemp("clicks-out")
    daily_refs = [daily_ref(day) for day in DAYS]
    raw_locations = {raw_ref(day): str(data_root / "raw" / "clicks" / f"date={day}") for day in DAYS}
    daily_ctx = make_ctx(spark, graph, "daily_clicks", daily_refs, raw_locations, out)
    run_daily(daily_ctx)
    locations = {target.ref: target.location for target in daily_ctx.outputs}
    weekly_ctx = make_ctx(spark, graph, "weekly_clicks", [weekly_ref(W01), weekly_ref(W02)], dict(locations), out)
    run_weekly(weekly_ctx, days=D, start=START)
    locations.update({target.ref: target.location for target in weekly_ctx.outputs})
    return locations


# --- generator -------------------------------------------------------------------------------------


def test_generator_writes_one_complete_directory_per_day(spark: Any, data_root: Path) -> None:
    table = data_root / "raw" / "clicks"
    day_dirs = sorted(p.name for p in table.iterdir() if p.is_dir())
    assert day_dirs == [f"date={day.isoformat()}" for day in DAYS]
    for name in day_dirs:
        assert (table / name / "_SUCCESS").is_file()
        assert len(list((table / name).glob("*.parquet"))) == 1, f"{name}: expected one parquet file"
    # Reading the table root discovers `date` as a partition column: R rows in every day.
    per_day = spark.read.parquet(str(table)).groupBy("date").count().collect()
    assert {row["date"]: row["count"] for row in per_day} == dict.fromkeys(DAYS, R)


def test_generated_rows_follow_w1_formulas(spark: Any, data_root: Path) -> None:
    day_index = 2  # 2026-01-03
    frame = spark.read.parquet(str(data_root / raw_ref(DAYS[day_index])))
    # Reading a day directory directly yields exactly the three W1 columns (date is in the path only).
    assert [(f.name, f.dataType.simpleString()) for f in frame.schema.fields] == [
        ("user_id", "int"),
        ("url", "string"),
        ("ts", "timestamp"),
    ]
    # Epoch seconds, so the check does not depend on the Python process's time zone.
    rows = [tuple(row) for row in frame.select("user_id", "url", F.unix_seconds("ts")).collect()]
    # A few rows spelled out by hand ...
    day_midnight = 1767398400  # 2026-01-03T00:00:00Z
    assert (0, "/p/0", day_midnight) in rows
    assert (919, "/p/1", day_midnight + 1) in rows
    assert (81, "/p/49", day_midnight + 999) in rows  # 999 * 7919 = 7911081
    # ... and the whole day, as a multiset, against the formulas.
    assert Counter(rows) == Counter(w1_row(day_index, i) for i in range(R))


# --- graph declaration -----------------------------------------------------------------------------


def test_graph_resolves_each_ref_to_its_producer(graph: Graph) -> None:
    raw = graph.resolve(raw_ref(DAYS[0]))
    assert isinstance(raw.producer, SourceDataset) and raw.producer.name == "raw_clicks"
    daily = graph.resolve(daily_ref(DAYS[3]))
    assert isinstance(daily.producer, Job) and daily.producer.label == "daily_clicks"
    assert (daily.producer.batch_size, daily.producer.max_concurrency) == (7, 2)
    assert daily.partition["date"] == DAYS[3]
    weekly = graph.resolve(weekly_ref(W02))
    assert isinstance(weekly.producer, Job) and weekly.producer.label == "weekly_clicks"
    assert (weekly.producer.batch_size, weekly.producer.max_concurrency) == (1, 2)
    assert weekly.partition["week"] == W02
    with pytest.raises(GraphError):
        graph.resolve("agg/monthly_clicks/month=2026-01")


def test_graph_inputs(graph: Graph) -> None:
    assert graph.inputs_of(raw_ref(DAYS[0])) == []
    assert graph.inputs_of(daily_ref(DAYS[5])) == [raw_ref(DAYS[5])]
    # W01 straddles the range start: Mon-Wed (2025-12-29..31) are outside it.
    assert graph.inputs_of(weekly_ref(W01)) == [f"agg/daily_clicks/date=2026-01-0{d}" for d in range(1, 5)]
    # W02 is cut by the range end: Sunday 2026-01-11 is outside it.
    assert graph.inputs_of(weekly_ref(W02)) == [
        "agg/daily_clicks/date=2026-01-05",
        "agg/daily_clicks/date=2026-01-06",
        "agg/daily_clicks/date=2026-01-07",
        "agg/daily_clicks/date=2026-01-08",
        "agg/daily_clicks/date=2026-01-09",
        "agg/daily_clicks/date=2026-01-10",
    ]
    assert graph.inputs_of(weekly_ref(IsoWeek(2026, 3))) == []


def test_raw_source_locates_only_complete_partitions(graph: Graph, data_root: Path, tmp_path: Path) -> None:
    def locate(g: Graph, ref: str) -> str | None:
        resolution = g.resolve(ref)
        assert isinstance(resolution.producer, SourceDataset)
        return resolution.producer.locate(resolution.partition)

    assert locate(graph, raw_ref(DAYS[0])) == str(data_root.absolute() / "raw/clicks/date=2026-01-01")
    assert locate(graph, raw_ref(DAYS[-1] + timedelta(days=1))) is None  # never generated
    # A directory Spark has not finished (no _SUCCESS yet) is still absent.
    half_written = tmp_path / "raw/clicks/date=2026-01-01"
    half_written.mkdir(parents=True)
    (half_written / "part-00000.snappy.parquet").write_bytes(b"")
    assert locate(build_graph(tmp_path, days=D), raw_ref(DAYS[0])) is None
    (half_written / "_SUCCESS").touch()
    assert locate(build_graph(tmp_path, days=D), raw_ref(DAYS[0])) == str(half_written)


def test_load_graph_calls_the_graph_function(data_root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PARTBUILD_CLICKS_ROOT", str(data_root))
    monkeypatch.setenv("PARTBUILD_CLICKS_DAYS", "3")
    loaded = load_graph(REPO_ROOT / "examples" / "clicks" / "pipeline.py")
    assert set(loaded.jobs) == {"daily_clicks", "weekly_clicks"} and set(loaded.sources) == {"raw_clicks"}
    assert loaded.inputs_of(weekly_ref(W01)) == [daily_ref(day) for day in DAYS[:3]]
    source = loaded.sources["raw_clicks"]
    assert source.locate(loaded.resolve(raw_ref(DAYS[0])).partition) == str(data_root / raw_ref(DAYS[0]))


# --- job functions ---------------------------------------------------------------------------------


def test_job_functions_write_w1_counts(spark: Any, built: dict[str, str]) -> None:
    assert expected_daily() == {f"/p/{k}": R // 50 for k in range(50)}  # the formula, sanity-checked
    contents = read_counts(spark, built)
    for day in DAYS:
        assert contents[daily_ref(day)] == expected_daily(), day
    assert contents[weekly_ref(W01)] == {f"/p/{k}": 4 * R // 50 for k in range(50)}
    assert contents[weekly_ref(W02)] == expected_weekly(W02)


def test_run_daily_missing_input_names_it_before_any_write(
    spark: Any, graph: Graph, data_root: Path, tmp_path: Path
) -> None:
    present = {raw_ref(DAYS[0]): str(data_root / raw_ref(DAYS[0]))}
    ctx = make_ctx(spark, graph, "daily_clicks", [daily_ref(DAYS[0]), daily_ref(DAYS[1])], present, tmp_path)
    with pytest.raises(MissingInputs) as raised:
        run_daily(ctx)
    assert raised.value.refs == [raw_ref(DAYS[1])]
    assert raw_ref(DAYS[1]) in str(raised.value)
    assert not any(Path(target.location).exists() for target in ctx.outputs)  # the batch failed fast


def test_run_weekly_missing_inputs_names_every_absent_ref(
    spark: Any, graph: Graph, built: dict[str, str], tmp_path: Path
) -> None:
    partial = {ref: built[ref] for ref in (daily_ref(DAYS[0]), daily_ref(DAYS[2]))}
    ctx = make_ctx(spark, graph, "weekly_clicks", [weekly_ref(W01)], partial, tmp_path)
    with pytest.raises(MissingInputs) as raised:
        run_weekly(ctx, days=D, start=START)
    assert raised.value.refs == [daily_ref(DAYS[1]), daily_ref(DAYS[3])]


def test_run_weekly_outside_the_range_is_permanent(spark: Any, graph: Graph, tmp_path: Path) -> None:
    ctx = make_ctx(spark, graph, "weekly_clicks", [weekly_ref(IsoWeek(2026, 3))], {}, tmp_path)
    with pytest.raises(PermanentJobError, match=r"2026-W03.*2026-01-01\.\.2026-01-10"):
        run_weekly(ctx, days=D, start=START)
    # The graph's own run function applies the graph's range.
    with pytest.raises(PermanentJobError):
        graph.jobs["weekly_clicks"].run(ctx)


# --- plain-loop floor ------------------------------------------------------------------------------


def test_run_plain_builds_the_same_partitions(
    spark: Any, data_root: Path, built: dict[str, str], tmp_path: Path
) -> None:
    run_plain(spark, data_root, tmp_path, days=D, start=START)
    written = sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.glob("agg/*/*") if p.is_dir())
    assert written == sorted([daily_ref(day) for day in DAYS] + [weekly_ref(W01), weekly_ref(W02)])
    plain = read_counts(spark, {ref: str(tmp_path / ref) for ref in built})
    assert plain == read_counts(spark, built)
    assert all(plain.values())  # nothing compared empty to empty
