"""The process's SparkSession starts at the first job run that asks for `ctx.spark`, never before: with the
tests' shared local[2] session (the run that asks starts it once and labels its Spark jobs with its run
id), and in a real `partbuild run` process whose jobs do not use Spark (no JVM at all). Without a JVM or a
process: tests/orchestrator/test_spark.py.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from partbuild.orchestrator.context import JobContext
from partbuild.orchestrator.spark import LazySpark
from partbuild.state.fold.build_state import BuildState
from partbuild.state.log.replay import replay_into
from partbuild.state.log.store import EventLog

from sparkstartkit import CountingStart, run_jobs


def test_the_run_that_asks_starts_spark_and_its_jobs_carry_its_run_id(spark: Any, tmp_path: Path) -> None:
    start = CountingStart(spark)
    seen: dict[str, tuple[str | None, int]] = {}

    def job(ctx: JobContext) -> None:
        if ctx.job_run_id == "quiet":
            return
        session = ctx.spark
        count = session.sparkContext.parallelize(range(10), 2).count()  # a real Spark job of this run
        seen[ctx.job_run_id] = (session.sparkContext.getLocalProperty("spark.jobGroup.id"), count)

    outcomes = run_jobs(LazySpark(start), job, ["quiet", "first", "second"], tmp_path)
    assert outcomes == ["job_run_success"] * 3
    assert start.calls == 1  # started once, by whichever run asked first
    assert seen == {"first": ("first", 10), "second": ("second", 10)}


@pytest.mark.process
def test_a_process_whose_jobs_do_not_use_spark_starts_no_jvm(sqlite_url: str, tmp_path: Path) -> None:
    """`partbuild run` with a master that cannot work: nothing asks for Spark, so all is built."""
    graph = tmp_path / "graph.py"
    graph.write_text(
        "from partbuild.orchestrator.graph import Graph, Job\n"
        "def write(ctx):\n"
        "    for target in ctx.outputs:\n"
        "        ctx.record(target.ref, row_count=1)\n"
        "graph = Graph([Job('noop', ['t/noop/part={n:int}'], write)])\n"
    )
    exe = shutil.which("partbuild", path=str(Path(sys.executable).parent))
    assert exe is not None
    common = ["--db", sqlite_url]
    for n in range(3):
        want = subprocess.run([exe, "want", *common, f"t/noop/part={n}"], capture_output=True, text=True, timeout=60)
        assert want.returncode == 0, want.stderr
    env = os.environ | {"PARTBUILD_SPARK_MASTER": "bogus://nowhere"}
    done = subprocess.run(
        [exe, "run", *common, "--graph", str(graph), "--warehouse", str(tmp_path / "w"), "--until-idle"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "starting Spark" not in done.stderr and "Setting default log level" not in done.stderr
    with EventLog.open(sqlite_url) as log:
        state = BuildState(strict=True)
        replay_into(state, log)
    assert [want.state.name for want in state.wants.values()] == ["SUCCESSFUL"] * 3
