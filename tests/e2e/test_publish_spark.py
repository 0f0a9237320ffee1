"""Publishing to a catalog table on real Spark (issue 24, item 4): readers see only canonical, checked instances.

A `daily/d={n:int}` job copies `raw/d={n}` (parquet the test writes) with a blocking `rows_nonzero` check
and publishes to `<db>.daily` in the local (in-memory) catalog of the tests' SparkSession. The orchestrator
runs in the test's thread (`run_until_idle`, one `step`), so each `SELECT` sees what the step just made
of the log. Each test uses its own database (the session's catalog outlives a test) and drops it after.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from partbuild.orchestrator.checks import row_count_at_least
from partbuild.orchestrator.context import JobContext
from partbuild.orchestrator.graph import Graph, Job, Partition, SourceDataset
from partbuild.orchestrator.loop import Orchestrator
from partbuild.orchestrator.publish import Publish
from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.database import Database
from partbuild.state.fold.records import InstanceState
from partbuild.state.log.events import envelope, manual

TIMEOUT_S = 120


def write_raw(spark: Any, root: Path, n: int, urls: list[str]) -> None:
    """Raw day n: one row per url (an empty list writes an empty partition, schema kept)."""
    frame = spark.createDataFrame([(url,) for url in urls], "url string")
    frame.coalesce(1).write.mode("overwrite").parquet(str(root / f"d={n}"))


def published_graph(root: Path, table: str) -> Graph:
    def locate(partition: Partition) -> str | None:
        location = root / f"d={partition['n']}"
        return str(location) if (location / "_SUCCESS").exists() else None

    def run_daily(ctx: JobContext) -> None:
        for target in ctx.outputs:
            raw = ctx.input(f"raw/d={target.partition['n']}")
            ctx.spark.read.parquet(raw).coalesce(1).write.mode("overwrite").parquet(target.location)

    daily = Job(
        "daily",
        ["daily/d={n:int}"],
        run_daily,
        inputs=lambda p: [f"raw/d={p['n']}"],
        checks=[row_count_at_least(1, name="rows_nonzero")],
        publish=Publish(table),
    )
    return Graph([daily], [SourceDataset("raw", "raw/d={n:int}", locate=locate)])


class Setup:
    """The database, graph and warehouse of one test; orchestrators made on them are closed after it."""

    def __init__(self, db: Database, graph: Graph, warehouse: Path, spark: Any, table: str, raw: Path) -> None:
        self.db, self.graph, self.warehouse, self.spark, self.table, self.raw = db, graph, warehouse, spark, table, raw
        self.made: list[Orchestrator] = []

    def orchestrator(self) -> Orchestrator:
        made = Orchestrator(
            self.db, self.graph, warehouse=str(self.warehouse), spark=self.spark, source_check_interval_s=0
        )
        self.made.append(made)
        return made

    def append(self, *payloads: Any) -> None:
        self.db.log.append([envelope(payload, source=manual("test")) for payload in payloads])

    def rows(self) -> set[tuple[str, str, str]]:
        """(n, url, the instance UUID its file is under) of every row the table answers."""
        found = self.spark.sql(f"SELECT n, url, input_file_name() AS file FROM {self.table}").collect()
        return {(row["n"], row["url"], row["file"].split("_instance=")[1].split("/")[0]) for row in found}


@pytest.fixture
def setup(sqlite_url: str, tmp_path: Path, spark: Any) -> Iterator[Setup]:
    database = f"published_{uuid.uuid4().hex[:12]}"
    table = f"{database}.daily"
    raw = tmp_path / "raw"
    with Database.open(sqlite_url, auto_upgrade=True) as db:
        made = Setup(db, published_graph(raw, table), tmp_path / "warehouse", spark, table, raw)
        try:
            yield made
        finally:
            for orchestrator in made.made:
                orchestrator.close()
            spark.sql(f"DROP DATABASE IF EXISTS {database} CASCADE")


def build(orchestrator: Orchestrator, want_id: str, *refs: str) -> None:
    orchestrator.log.append([envelope(pb.WantCreate(want_id=want_id, partition_refs=list(refs)), source=manual("t"))])
    assert orchestrator.run_until_idle(TIMEOUT_S)


def canonical(orchestrator: Orchestrator, ref: str) -> tuple[str, InstanceState]:
    instance = orchestrator.state.canonical_instance(ref)
    assert instance is not None
    return instance.uuid, instance.state


def test_the_table_answers_with_the_canonical_checked_instance_before_and_after_a_rebuild(setup: Setup) -> None:
    spark, raw = setup.spark, setup.raw
    write_raw(spark, raw, 1, ["/a", "/b"])
    write_raw(spark, raw, 2, [])  # empty: rows_nonzero fails, the instance never goes Live
    orchestrator = setup.orchestrator()
    build(orchestrator, "first", "daily/d=1", "daily/d=2")
    first, state = canonical(orchestrator, "daily/d=1")
    _, failed_state = canonical(orchestrator, "daily/d=2")
    assert (state, failed_state) == (InstanceState.LIVE, InstanceState.FAILED)
    # The table exists (created from the first Live instance's schema) and shows d=1 only: d=2 failed its check.
    assert setup.rows() == {("1", "/a", first), ("1", "/b", first)}
    assert [c.name for c in spark.catalog.listColumns(setup.table) if c.isPartition] == ["n"]

    # A taint with nothing Live replacing it withdraws the partition at once.
    setup.append(pb.PartitionTaint(partition_ref="daily/d=1", reason="late clicks"))
    orchestrator.step()
    assert setup.rows() == set()

    # The rebuild (new data) goes Live after its checks: the table moves to the new instance.
    write_raw(spark, raw, 1, ["/c"])
    build(orchestrator, "rebuild", "daily/d=1")
    rebuilt, state = canonical(orchestrator, "daily/d=1")
    assert rebuilt != first and state == InstanceState.LIVE
    assert setup.rows() == {("1", "/c", rebuilt)}

    # d=2 fixed and wanted again: it joins the table; d=1 still shows the rebuild.
    write_raw(spark, raw, 2, ["/z"])
    build(orchestrator, "fixed", "daily/d=2")
    fixed, _ = canonical(orchestrator, "daily/d=2")
    assert setup.rows() == {("1", "/c", rebuilt), ("2", "/z", fixed)}

    # A rebuild whose blocking check fails: its instance is never shown, and the tainted one it replaced is gone.
    write_raw(spark, raw, 1, [])
    setup.append(pb.PartitionTaint(partition_ref="daily/d=1", reason="bad day"))
    build(orchestrator, "bad", "daily/d=1")
    bad, state = canonical(orchestrator, "daily/d=1")
    assert state == InstanceState.FAILED and bad != rebuilt
    assert setup.rows() == {("2", "/z", fixed)}
    assert orchestrator.publisher is not None and orchestrator.publisher.failures == 0


def test_a_restarted_orchestrator_reconciles_a_catalog_that_kept_its_partitions(setup: Setup) -> None:
    """A Hive metastore keeps the table across restarts, as the session's catalog does here: on start,
    every partition is pointed at its Live instance and those the log has nothing Live for are dropped."""
    spark, raw = setup.spark, setup.raw
    write_raw(spark, raw, 1, ["/a"])
    write_raw(spark, raw, 2, ["/b"])
    first = setup.orchestrator()
    build(first, "both", "daily/d=1", "daily/d=2")
    one, _ = canonical(first, "daily/d=1")
    two, _ = canonical(first, "daily/d=2")
    assert setup.rows() == {("1", "/a", one), ("2", "/b", two)}
    first.close()
    setup.made.remove(first)

    # While no orchestrator runs: d=2 is tainted in the log, and someone points d=1 elsewhere and adds d=9.
    setup.append(pb.PartitionTaint(partition_ref="daily/d=2", reason="late"))
    elsewhere = setup.warehouse / "elsewhere"
    spark.createDataFrame([("/x",)], "url string").write.parquet(f"{elsewhere}/_instance=other")
    spark.sql(
        f"ALTER TABLE {setup.table} PARTITION (n = '1') SET LOCATION :location",
        args={"location": f"{elsewhere}/_instance=other"},
    )
    spark.sql(
        f"ALTER TABLE {setup.table} ADD PARTITION (n = '9') LOCATION :location",
        args={"location": f"{elsewhere}/_instance=other"},
    )
    assert {row[0] for row in setup.rows()} == {"1", "2", "9"}

    second = setup.orchestrator()
    second.step()
    assert setup.rows() == {("1", "/a", one)}
    assert second.publisher is not None and second.publisher.failures == 0


def test_partition_values_and_locations_are_parameters_never_sql(sqlite_url: str, tmp_path: Path, spark: Any) -> None:
    """Refs with quotes, backslashes and SQL in a str field: published as they are, and kept by a restart's sweep."""
    database = f"published_{uuid.uuid4().hex[:12]}"
    table = f"{database}.sites"

    def run_site(ctx: JobContext) -> None:
        for target in ctx.outputs:
            frame = ctx.spark.createDataFrame([(target.partition["site"],)], "name string")
            frame.coalesce(1).write.mode("overwrite").parquet(target.location)

    graph = Graph([Job("sites", ["sites/site={site}"], run_site, publish=table)])
    sites = ["it's", "a\\b", "x'); DROP TABLE t; --", "100%25"]
    refs = [f"sites/site={site}" for site in sites]
    with Database.open(sqlite_url, auto_upgrade=True) as db:
        made = Setup(db, graph, tmp_path / "warehouse", spark, table, tmp_path)
        try:
            build(made.orchestrator(), "sites", *refs)
            answer = {(row["site"], row["name"]) for row in spark.sql(f"SELECT site, name FROM {table}").collect()}
            assert answer == {(site, site) for site in sites}
            made.made.pop().close()
            stale = tmp_path / "stale"
            spark.createDataFrame([("stale",)], "name string").write.parquet(str(stale))
            spark.sql(f"ALTER TABLE {table} ADD PARTITION (site = 'gone''d') LOCATION :at", args={"at": str(stale)})
            assert len(spark.sql(f"SELECT site FROM {table}").collect()) == len(sites) + 1
            # A restart: its sweep reads SHOW PARTITIONS (escaped as paths), drops the stale one, keeps the rest.
            made.orchestrator().step()
            assert {row["site"] for row in spark.sql(f"SELECT site FROM {table}").collect()} == set(sites)
        finally:
            for orchestrator in made.made:
                orchestrator.close()
            spark.sql(f"DROP DATABASE IF EXISTS {database} CASCADE")
