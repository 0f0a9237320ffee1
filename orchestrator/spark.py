"""The one long-lived SparkSession of an orchestrator process.

Start-up costs seconds, so a process creates its session once and every job
run uses it. Master: `local[*]` by default, a cluster master URL
(`spark://host:7077`, `yarn`, `k8s://...`), or a Spark Connect remote (`sc://host:15002`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

DEFAULT_MASTER = "local[*]"
# Small-data defaults: W1-sized partitions are tiny, and 200 shuffle partitions
# would make every aggregation schedule 200 tasks.
DEFAULT_CONF: dict[str, str] = {
    "spark.sql.shuffle.partitions": "4",
    "spark.ui.enabled": "false",
    # Progress bars on the console would interleave with the orchestrator's log lines.
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.session.timeZone": "UTC",
}


def spark_session(master: str | None = None, app_name: str = "partbuild", conf: Mapping[str, str] | None = None) -> Any:
    """Get or create the process's SparkSession for `master` (env PARTBUILD_SPARK_MASTER, else local[*])."""
    from pyspark.sql import SparkSession  # imported here: only processes that run jobs need Spark

    master = master or os.environ.get("PARTBUILD_SPARK_MASTER") or DEFAULT_MASTER
    builder = SparkSession.builder.appName(app_name)
    if master.startswith("sc://"):
        builder = builder.remote(master)
    else:
        builder = builder.master(master)
        for key, value in {**DEFAULT_CONF, **(conf or {})}.items():
            builder = builder.config(key, value)
    return builder.getOrCreate()


# --- Tagging a job run's Spark jobs, to cancel them from another thread -----------------------------
#
# Classic sessions: a job group. `setJobGroup` labels the Spark jobs the calling thread starts (PySpark
# pins each Python thread to its own JVM thread), and `cancelJobGroup` cancels them from any thread.
# Session tags (`addTag`/`interruptTag`, classic since Spark 4.0) do not fit here: classic
# `interruptTag(tag)` looks the tag up in the *calling* thread's tags, so the orchestrator thread
# cannot cancel a job thread's work with it, and it only covers DataFrame/SQL executions, not RDD jobs.
# Spark Connect sessions have no SparkContext: the client sends the calling thread's tags with every
# operation, and `interruptTag` asks the server to interrupt every operation of the session that
# carries the tag, whichever thread asks.


def tag_spark_jobs(spark: Any, run_id: str, description: str) -> None:
    """Label the Spark jobs this thread starts from now on as the run's (Spark UI, cancellation)."""
    context = _spark_context(spark)
    if context is not None:
        context.setJobGroup(run_id, description, interruptOnCancel=True)  # interrupt running tasks too
    else:
        spark.addTag(connect_tag(run_id))


def untag_spark_jobs(spark: Any, run_id: str) -> None:
    """Stop labelling this thread's Spark jobs as the run's (the thread goes back to the pool)."""
    # Classic: PySpark has no clearJobGroup; the next run's setJobGroup replaces the group.
    if _spark_context(spark) is None:
        spark.removeTag(connect_tag(run_id))


def cancel_spark_jobs(spark: Any, run_id: str) -> None:
    """Cancel the run's active Spark jobs, from any thread; jobs it starts later are not affected."""
    context = _spark_context(spark)
    if context is not None:
        context.cancelJobGroup(run_id)
    else:
        spark.interruptTag(connect_tag(run_id))


def connect_tag(run_id: str) -> str:
    """The run's Spark Connect operation tag: tags may not contain ',' (escaped, so still one per run)."""
    return run_id.replace("%", "%25").replace(",", "%2C")


def _spark_context(spark: Any) -> Any:
    # A Spark Connect session raises an AttributeError for `sparkContext`.
    return getattr(spark, "sparkContext", None)
