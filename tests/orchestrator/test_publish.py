"""Declaring a published table, and the publisher in the real run loop where Spark is absent (no JVM here).

What the table answers is tested on real Spark in tests/e2e/test_publish_spark.py; here: which declarations
a graph refuses and why, how a ref becomes partition values, that a graph with no published job has no
publisher and starts no Spark, and that a publisher that cannot reach Spark counts, retries and never
touches the log nor stops the loop.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from partbuild.examples.clicks.isoweek import IsoWeek  # registers the isoweek field type
from partbuild.orchestrator.context import JobContext
from partbuild.orchestrator.graph import Graph, GraphError, Job
from partbuild.orchestrator.loop import Orchestrator
from partbuild.orchestrator.publish import Publish, PublishDeclarationError, Publisher
from partbuild.orchestrator.spark import LazySpark
from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.database import Database
from partbuild.state.fold.records import InstanceState
from partbuild.state.log.events import envelope, manual

from waitkit import wait_for


def nothing(ctx: JobContext) -> None:
    for target in ctx.outputs:
        Path(target.location).mkdir(parents=True)


# ----------------------------------------------------------------- declarations


@pytest.mark.parametrize("table", ["t", "db.t", "_a.B_9", "x" * 128])
def test_a_table_is_one_or_two_identifiers(table: str) -> None:
    assert Publish(table).table == table


@pytest.mark.parametrize(
    "table", ["", "a.b.c", "1t", "db.", ".t", "a-b", "t;DROP TABLE x", "`t`", "t'", "db.t ", "x" * 129, 5, None]
)
def test_any_other_table_name_is_refused_naming_it(table: Any) -> None:
    with pytest.raises(PublishDeclarationError, match=r"must be \[db\.\]table") as raised:
        Publish(table)
    assert repr(table) in str(raised.value)


def test_the_format_is_one_spark_reads_a_schema_from() -> None:
    assert Publish("t", "orc").format == "orc"
    with pytest.raises(PublishDeclarationError, match="format 'delta' must be one of parquet, orc"):
        Publish("t", "delta")


def test_a_job_takes_a_publish_or_a_table_name() -> None:
    assert Job("d", ["d/{n:int}"], nothing, publish="db.t").publish == Publish("db.t")
    assert Job("d", ["d/{n:int}"], nothing, publish=Publish("t", "orc")).publish == Publish("t", "orc")
    assert Job("d", ["d/{n:int}"], nothing).publish is None
    with pytest.raises(PublishDeclarationError, match="must be a Publish, a table name or None, not int"):
        Job("d", ["d/{n:int}"], nothing, publish=3)  # type: ignore[arg-type]
    with pytest.raises(PublishDeclarationError, match="'a b'"):
        Job("d", ["d/{n:int}"], nothing, publish="a b")


@pytest.mark.parametrize(
    ("patterns", "problem"),
    [
        (["a/{n:int}", "b/{n:int}"], "exactly one output pattern"),
        (["a/all"], "no field to partition the table by"),
        (["a/{day}/{DAY}"], "fields that differ only in case"),
    ],
)
def test_a_published_job_has_one_pattern_with_distinct_fields(patterns: list[str], problem: str) -> None:
    Job("d", patterns, nothing)  # fine unpublished
    with pytest.raises(GraphError, match=f"job 'd': .*{problem}"):
        Job("d", patterns, nothing, publish="t")


def test_two_jobs_never_publish_one_table() -> None:
    one = Job("one", ["one/{n:int}"], nothing, publish="db.Daily")
    with pytest.raises(GraphError, match=r"jobs 'one' and 'two' both publish table 'DB\.daily'"):
        Graph([one, Job("two", ["two/{n:int}"], nothing, publish="DB.daily")])
    graph = Graph([one, Job("two", ["two/{n:int}"], nothing, publish="db.weekly")])
    assert {label: table.publish.table for label, table in tables(graph).items()} == {
        "one": "db.Daily",
        "two": "db.weekly",
    }


def tables(graph: Graph) -> dict[str, Any]:
    publisher = Publisher.for_graph(graph, LazySpark.of(None), "/warehouse")
    assert publisher is not None
    return dict(publisher.tables)


def test_the_pattern_fields_are_the_partition_columns_in_order_with_the_refs_text() -> None:
    job = Job("d", ["agg/week={week:isoweek}/day={day:date}/n={n:int}/{site}"], nothing, publish="t")
    table = tables(Graph([job]))["d"]
    assert table.fields == ("week", "day", "n", "site")
    ref = job.outputs[0].format(week=IsoWeek(2026, 2), day=dt.date(2026, 1, 7), n=-3, site="it's")  # type: ignore[union-attr]
    assert ref == "agg/week=2026-W02/day=2026-01-07/n=-3/it's"
    assert table.values(ref) == ("2026-W02", "2026-01-07", "-3", "it's")
    with pytest.raises(ValueError, match="does not fit"):
        table.values("agg/week=2026-W02/day=2026-02-30/n=1/x")  # the shape, but no date


# ----------------------------------------------------------------- in the run loop, without Spark


class CountingStart:
    """A Spark start that fails (no JVM in these tests), counting the tries."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self) -> Any:
        self.calls += 1
        raise RuntimeError("no Spark in unit tests")


@pytest.fixture
def database(sqlite_url: str) -> Iterator[Database]:
    with Database.open(sqlite_url, auto_upgrade=True) as db:
        yield db


def orchestrator_for(db: Database, graph: Graph, start: CountingStart, tmp_path: Path) -> Orchestrator:
    return Orchestrator(db, graph, warehouse=str(tmp_path / "wh"), spark=LazySpark(start), poll_interval_s=0.01)


def build(orchestrator: Orchestrator, *refs: str) -> None:
    want = pb.WantCreate(want_id="-".join(refs), partition_refs=list(refs))
    orchestrator.log.append([envelope(want, source=manual("t"))])
    assert orchestrator.run_until_idle(60)
    for ref in refs:
        instance = orchestrator.state.canonical_instance(ref)
        assert instance is not None and instance.state == InstanceState.LIVE


def test_a_graph_with_no_published_job_has_no_publisher_and_starts_no_spark(database: Database, tmp_path: Path) -> None:
    start = CountingStart()
    orchestrator = orchestrator_for(database, Graph([Job("d", ["d/{n:int}"], nothing)]), start, tmp_path)
    try:
        assert orchestrator.publisher is None
        build(orchestrator, "d/1")
        assert start.calls == 0
    finally:
        orchestrator.close()


def test_a_publisher_that_cannot_reach_spark_counts_retries_and_leaves_the_log_alone(
    database: Database, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    start = CountingStart()
    graph = Graph([Job("d", ["d/{n:int}"], nothing, publish="db.d"), Job("other", ["o/{n:int}"], nothing)])
    orchestrator = orchestrator_for(database, graph, start, tmp_path)
    try:
        publisher = orchestrator.publisher
        assert publisher is not None
        build(orchestrator, "o/1")  # nothing to publish: Spark is not started for the publisher
        assert (start.calls, publisher.failures) == (0, 0)

        build(orchestrator, "d/1", "d/2")  # the loop goes on: both built and Live, though neither is published
        assert publisher.failures >= 1 and publisher.applied == 0
        assert "publishing d/" in caplog.text and "no Spark in unit tests" in caplog.text
        head = orchestrator.log.head()

        def retried() -> bool:
            orchestrator.step()
            return publisher.failures >= 3  # d/1 and d/2 tried again after the backoff

        wait_for("the publisher to try again", retried, 30)
        assert orchestrator.log.head() == head  # the log never records the table
    finally:
        orchestrator.close()
