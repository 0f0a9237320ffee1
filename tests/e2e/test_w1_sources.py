"""W1 end to end on real Spark with the raw clicks discovered by scanning a connector, then a raw day rewritten.

Two connectors: the filesystem (the raw data where `generate_raw` wrote it) and an
S3-compatible server (moto, in a child process; `s3kit`). Spark here has no S3
connector, so in the S3 case the daily job stages a raw day's objects into a local
directory first (`build_graph(stage_raw=...)`).

Each test wants every weekly, runs until idle, rewrites one raw day with other
rows, waits for the scanner to observe the new version, and runs until idle again:
the daily and weekly built from that day are new instances (the old ones stale,
served until the new ones went Live, and still readable), everything else keeps its instance, and the weekly's data is
`groupBy(url).count()` over the week's raw days as they are now.
"""

from __future__ import annotations

import calendar
import shutil
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import date, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pytest

from examples.clicks.generate import generate_raw
from examples.clicks.pipeline import (
    RAW_KEYS,
    build_graph,
    daily_ref,
    raw_ref,
    week_days_in_range,
    weekly_ref,
    weeks_in_range,
)
from partbuild.examples.clicks.isoweek import IsoWeek
from partbuild.orchestrator.loop import Orchestrator
from partbuild.orchestrator.sources.discovery import Discovery, filesystem_discovery, object_store_discovery
from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.database import Database
from partbuild.state.fold.records import InstanceState, WantState
from partbuild.state.log.events import envelope, manual
from partbuild.state.log.store import EventLog

from sparkkit import CLICKS_START

DAYS = 10  # 2026-01-01 (a Thursday) .. 01-10: 2026-W01 has 4 days, 2026-W02 6
ROWS = 200
START = CLICKS_START
WEEKS = weeks_in_range(DAYS, START)
REWRITTEN = date(2026, 1, 6)  # a day of 2026-W02
REWRITTEN_WEEK = IsoWeek.of(REWRITTEN)
BUCKET = "clicks"
TIMEOUT_S = 120


# --- data ----------------------------------------------------------------------------------------


def write_other_rows(spark: Any, directory: Path) -> None:
    """Write, with Spark, 3*ROWS rows of another shape than W1's (urls /p/0../p/12) as one parquet file."""
    from pyspark.sql import functions as F

    midnight = calendar.timegm(REWRITTEN.timetuple())  # the day's midnight UTC
    i = F.col("id")
    rows = spark.range(0, 3 * ROWS, 1, numPartitions=1).select(
        (i % F.lit(1000)).cast("int").alias("user_id"),
        F.concat(F.lit("/p/"), (i * F.lit(7) % F.lit(13)).cast("string")).alias("url"),
        F.timestamp_seconds(F.lit(midnight) + i).alias("ts"),
    )
    rows.write.mode("overwrite").parquet(str(directory))


def data_files(directory: Path) -> list[Path]:
    """The parquet files Spark wrote in `directory` (no checksums, no markers)."""
    return sorted(path for path in directory.iterdir() if path.name.endswith(".parquet"))


def rewrite_local_day(raw_day: Path, staging: Path) -> None:
    """Replace the day's files with those in `staging`, the `_SUCCESS` marker last (absent meanwhile).

    A scan in between sees the day without its marker, incomplete: it is not observed half-written.
    """
    (raw_day / "_SUCCESS").unlink()
    for path in raw_day.iterdir():
        path.unlink()
    for path in data_files(staging):
        shutil.copy2(path, raw_day / path.name)
    (raw_day / "_SUCCESS").touch()


def raw_counts(spark: Any, directories: list[Path]) -> dict[str, int]:
    """`groupBy(url).count()` over these raw day directories, straight from the parquet files."""
    rows = spark.read.parquet(*(str(d) for d in directories)).groupBy("url").count().collect()
    return {row["url"]: row["count"] for row in rows}


def read_counts(spark: Any, location: str) -> dict[str, int]:
    return {row["url"]: row["count"] for row in spark.read.parquet(location).collect()}


# --- running -------------------------------------------------------------------------------------


def run_w1(spark: Any, tmp_path: Path, discovery: Discovery, **graph_options: Any) -> Orchestrator:
    db = Database.open(f"sqlite:///{tmp_path / 'w1.db'}")
    graph = build_graph(tmp_path / "data", days=DAYS, start=START, raw_discovery=discovery, **graph_options)
    return Orchestrator(
        db, graph, warehouse=str(tmp_path / "warehouse"), spark=spark, source_check_interval_s=0, poll_interval_s=0.01
    )


def uuids(orchestrator: Orchestrator) -> dict[str, str]:
    """ref -> UUID of its canonical instance, for every raw, daily and weekly ref of the range."""
    state = orchestrator.state
    refs = [f(day) for day in (START + timedelta(days=k) for k in range(DAYS)) for f in (raw_ref, daily_ref)]
    found = {}
    for ref in [*refs, *(weekly_ref(week) for week in WEEKS)]:
        instance = state.canonical_instance(ref)
        assert instance is not None, ref
        found[ref] = instance.uuid
    return found


def assert_all_live(orchestrator: Orchestrator) -> None:
    state = orchestrator.state
    assert not state.rejections
    assert {w.want_id: w.state for w in state.wants.values() if w.state != WantState.SUCCESSFUL} == {}
    for ref in uuids(orchestrator):
        instance = state.canonical_instance(ref)
        assert instance is not None and instance.state == InstanceState.LIVE, ref


def wait_for_new_raw(orchestrator: Orchestrator, old_uuid: str, timeout_s: float = 30.0) -> None:
    """Until the scanner has observed the rewritten day as a new raw instance."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        orchestrator.catch_up()
        current = orchestrator.state.canonical_instance(raw_ref(REWRITTEN))
        if current is not None and current.uuid != old_uuid:
            return
        time.sleep(0.05)
    raise AssertionError(f"no new instance of {raw_ref(REWRITTEN)} within {timeout_s} s")


def scanner_wants(log: EventLog) -> list[pb.WantCreate]:
    wants = []
    for _, payload in log.iter_payloads():
        event = pb.Event.FromString(payload)
        if event.WhichOneof("payload") == "want_create" and event.source.system.component == "source-scanner":
            wants.append(event.want_create)
    return wants


def build_rewrite_and_rebuild(
    spark: Any,
    orchestrator: Orchestrator,
    rewrite: Callable[[], None],
    expected_location: Callable[[str], str],
    local_raw_day: Callable[[date], Path],
) -> None:
    """The scenario both connectors run; `local_raw_day`: a local copy of a raw day, as it is now."""
    for week in WEEKS:
        orchestrator.log.append(
            [envelope(pb.WantCreate(want_id=f"w-{week}", partition_refs=[weekly_ref(week)]), source=manual("t"))]
        )
    assert orchestrator.run_until_idle(timeout_s=TIMEOUT_S)
    assert_all_live(orchestrator)
    state = orchestrator.state
    for day in (START + timedelta(days=k) for k in range(DAYS)):
        raw = state.canonical_instance(raw_ref(day))
        assert raw is not None and raw.built_by is None  # observed, not built
        assert raw.location == expected_location(raw_ref(day).removeprefix("raw/clicks/"))
        assert raw.version is not None and raw.version[0] and raw.byte_count > 0
    before = uuids(orchestrator)
    old_daily = state.instances[before[daily_ref(REWRITTEN)]]
    old_weekly = state.instances[before[weekly_ref(REWRITTEN_WEEK)]]
    old_weekly_counts = read_counts(spark, old_weekly.location or "")
    old_version = state.instances[before[raw_ref(REWRITTEN)]].version

    rewrite()
    wait_for_new_raw(orchestrator, before[raw_ref(REWRITTEN)])
    assert orchestrator.run_until_idle(timeout_s=TIMEOUT_S)
    assert_all_live(orchestrator)

    after = uuids(orchestrator)
    changed = {raw_ref(REWRITTEN), daily_ref(REWRITTEN), weekly_ref(REWRITTEN_WEEK)}
    assert {ref for ref in before if before[ref] != after[ref]} == changed
    assert state.instances[after[raw_ref(REWRITTEN)]].version != old_version
    # The old daily and weekly went stale (still Live, served until their rebuilds went Live), and are still
    # there to query, data and all.
    assert old_daily.state == InstanceState.LIVE and old_weekly.state == InstanceState.LIVE
    assert old_daily.superseded_seq and old_weekly.superseded_seq and not state.serving
    assert "stale: upstream" in (old_daily.note or "") and "stale: upstream" in (old_weekly.note or "")
    assert state.instances[old_daily.uuid] is old_daily and state.instances[old_weekly.uuid] is old_weekly
    assert read_counts(spark, old_weekly.location or "") == old_weekly_counts
    new_weekly = state.instances[after[weekly_ref(REWRITTEN_WEEK)]]
    assert after[daily_ref(REWRITTEN)] in new_weekly.inputs and old_daily.uuid not in new_weekly.inputs
    # The weekly's data is the week's raw data as it is now, counted directly.
    week_days = week_days_in_range(REWRITTEN_WEEK, DAYS, START)
    expected = raw_counts(spark, [local_raw_day(day) for day in week_days])
    assert read_counts(spark, new_weekly.location or "") == expected != old_weekly_counts
    # Exactly one re-want, from the scanner, of the root-wanted weekly the new day tainted.
    assert [list(want.partition_refs) for want in scanner_wants(orchestrator.log)] == [[weekly_ref(REWRITTEN_WEEK)]]


@pytest.fixture
def closing() -> Iterator[list[Orchestrator]]:
    opened: list[Orchestrator] = []
    yield opened
    for orchestrator in opened:
        orchestrator.close()
        orchestrator.db.close()


# --- the tests -----------------------------------------------------------------------------------


def test_w1_from_the_filesystem_connector_rebuilds_a_rewritten_day(
    spark: Any, tmp_path: Path, closing: list[Orchestrator]
) -> None:
    generate_raw(spark, tmp_path / "data", days=DAYS, rows_per_day=ROWS, start=START)
    raw_root = tmp_path / "data" / "raw" / "clicks"
    discovery = filesystem_discovery(raw_root, RAW_KEYS, rescan_every_s=0.5, rewant_tainted=True)
    orchestrator = run_w1(spark, tmp_path, discovery)
    closing.append(orchestrator)

    def rewrite() -> None:
        write_other_rows(spark, tmp_path / "staging")
        rewrite_local_day(tmp_path / "data" / raw_ref(REWRITTEN), tmp_path / "staging")

    build_rewrite_and_rebuild(
        spark,
        orchestrator,
        rewrite,
        expected_location=lambda directory: f"{raw_root.absolute()}/{directory}",
        local_raw_day=lambda day: tmp_path / "data" / raw_ref(day),
    )


@pytest.fixture
def moto() -> Iterator[Any]:
    from s3kit import MotoServer

    server = MotoServer()
    try:
        yield server
    finally:
        server.stop()


def upload_day(client: Any, local_day: Path, key_prefix: str) -> None:
    """Put the day's parquet files under `key_prefix`, then its `_SUCCESS` marker."""
    for path in data_files(local_day):
        client.put_object(Bucket=BUCKET, Key=f"{key_prefix}/{path.name}", Body=path.read_bytes())
    client.put_object(Bucket=BUCKET, Key=f"{key_prefix}/_SUCCESS", Body=b"")


@pytest.mark.process  # moto's S3 server
def test_w1_from_an_s3_compatible_server_rebuilds_a_rewritten_day(
    spark: Any, tmp_path: Path, moto: Any, closing: list[Orchestrator]
) -> None:
    local = tmp_path / "local"  # the raw data as generated, then as rewritten: uploaded, and for expectations
    generate_raw(spark, local, days=DAYS, rows_per_day=ROWS, start=START)
    config = moto.config(BUCKET, "raw/clicks/")
    client = config.make_client()
    client.create_bucket(Bucket=BUCKET)
    for day in (START + timedelta(days=k) for k in range(DAYS)):
        upload_day(client, local / raw_ref(day), raw_ref(day))

    staged = tmp_path / "staged"

    def stage_raw(location: str) -> str:
        """Download the objects of the raw day at `location` (s3a://bucket/key) into a fresh local directory."""
        parsed = urlparse(location)
        assert parsed.scheme == "s3a" and parsed.netloc == BUCKET, location
        prefix = parsed.path.lstrip("/").rstrip("/") + "/"
        target = staged / uuid.uuid4().hex
        target.mkdir(parents=True)
        s3 = config.make_client()  # one per call: job threads run at once
        pages = s3.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix)
        for obj in (obj for page in pages for obj in page.get("Contents", [])):
            body = s3.get_object(Bucket=BUCKET, Key=obj["Key"])["Body"].read()
            (target / obj["Key"].removeprefix(prefix)).write_bytes(body)
        return str(target)

    discovery = object_store_discovery(config, RAW_KEYS, rescan_every_s=0.5, rewant_tainted=True)
    orchestrator = run_w1(spark, tmp_path, discovery, stage_raw=stage_raw)
    closing.append(orchestrator)

    def rewrite() -> None:
        key_prefix = raw_ref(REWRITTEN)
        write_other_rows(spark, tmp_path / "staging")
        rewrite_local_day(local / key_prefix, tmp_path / "staging")
        # The marker goes first and comes back last: a scan in between sees an incomplete day.
        client.delete_object(Bucket=BUCKET, Key=f"{key_prefix}/_SUCCESS")
        old = client.list_objects_v2(Bucket=BUCKET, Prefix=f"{key_prefix}/").get("Contents", [])
        for obj in old:
            client.delete_object(Bucket=BUCKET, Key=obj["Key"])
        upload_day(client, local / key_prefix, key_prefix)

    build_rewrite_and_rebuild(
        spark,
        orchestrator,
        rewrite,
        expected_location=lambda directory: f"s3a://{BUCKET}/raw/clicks/{directory}",
        local_raw_day=lambda day: local / raw_ref(day),
    )


# --- found while writing these tests -------------------------------------------------------------


def test_a_raw_day_rewritten_while_its_daily_runs_ends_in_a_weekly_of_the_new_data(
    spark: Any, tmp_path: Path, closing: list[Orchestrator]
) -> None:
    import threading

    generate_raw(spark, tmp_path / "data", days=DAYS, rows_per_day=ROWS, start=START)
    raw_root = tmp_path / "data" / "raw" / "clicks"
    rewritten_day = tmp_path / "data" / raw_ref(REWRITTEN)
    reading, release = threading.Event(), threading.Event()

    def stage_raw(location: str) -> str:
        """A copy of the day, as the S3 staging makes; the rewritten day's first copy is held until the rewrite."""
        copy = tmp_path / "staged" / uuid.uuid4().hex
        shutil.copytree(location, copy)
        if location == str(rewritten_day) and not release.is_set():
            reading.set()
            release.wait(60)
        return str(copy)

    discovery = filesystem_discovery(raw_root, RAW_KEYS, rescan_every_s=0.5, rewant_tainted=True)
    orchestrator = run_w1(spark, tmp_path, discovery, stage_raw=stage_raw)
    closing.append(orchestrator)
    week = weekly_ref(REWRITTEN_WEEK)
    orchestrator.log.append([envelope(pb.WantCreate(want_id="w", partition_refs=[week]), source=manual("t"))])
    first = threading.Thread(target=orchestrator.run_until_idle, kwargs={"timeout_s": TIMEOUT_S})
    first.start()
    try:
        assert reading.wait(TIMEOUT_S), "the daily job never read the day"
        old_raw = orchestrator.live_instance(raw_ref(REWRITTEN))
        assert old_raw is not None
        write_other_rows(spark, tmp_path / "staging")
        rewrite_local_day(rewritten_day, tmp_path / "staging")
        deadline = time.monotonic() + 30
        while (orchestrator.live_instance(raw_ref(REWRITTEN)) or old_raw)[0] == old_raw[0]:
            assert time.monotonic() < deadline, "the rewrite was not observed"
            time.sleep(0.05)
    finally:
        release.set()
        first.join()
    assert orchestrator.run_until_idle(timeout_s=TIMEOUT_S)
    weekly = orchestrator.live_instance(week)
    assert weekly is not None
    week_days = week_days_in_range(REWRITTEN_WEEK, DAYS, START)
    expected = raw_counts(spark, [tmp_path / "data" / raw_ref(day) for day in week_days])
    assert read_counts(spark, weekly[1]) == expected
