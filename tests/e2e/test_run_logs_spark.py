"""A run's log ends with the Spark jobs it started (orchestrator/run_logs.py `spark_job_lines`), on the
shared local SparkSession through a real `JobExecutor`."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from partbuild.orchestrator.context import JobContext, OutputTarget
from partbuild.orchestrator.decide import RunPlan, instance_location
from partbuild.orchestrator.executor import JobExecutor
from partbuild.orchestrator.graph import Graph, Job
from partbuild.orchestrator.run_logs import RunLogWriter
from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.database import Database

from waitkit import wait_for


def test_a_run_logs_the_ids_and_statuses_of_its_spark_jobs(tmp_path: Path, spark: Any) -> None:
    def job(ctx: JobContext) -> None:
        ctx.log.info("counted %d", ctx.spark.range(100).count())
        ctx.spark.range(10).collect()

    graph = Graph([Job("j", ["j/n={n:int}"], job)])
    target = OutputTarget(graph.resolve("j/n=1").partition, "uuid-1", instance_location(str(tmp_path), "j/n=1", "u"))
    appended: list[pb.Event] = []
    with Database.open(f"sqlite:///{tmp_path / 'partbuild.db'}", auto_upgrade=True) as db:
        executor = JobExecutor(spark, appended.extend, heartbeat_interval_s=60, run_logs=RunLogWriter(db.run_logs))
        try:
            executor.submit(RunPlan(graph.jobs["j"], "spark-run", [target], {}, {"uuid-1": ()}, 0))
            wait_for(
                "the run's success", lambda: any(e.WhichOneof("payload") == "job_run_success" for e in appended), 120
            )
        finally:
            executor.shutdown(wait=True)
        texts = [x.text for x in db.run_logs.lines("spark-run")]
    assert texts[0] == "counted 100"
    spark_lines = texts[1:]
    assert len(spark_lines) >= 2
    assert all(
        re.fullmatch(r"Spark job \d+: SUCCEEDED, \d+\.\d{3} s, stages \[[\d, ]*\]", line) for line in spark_lines
    ), texts
