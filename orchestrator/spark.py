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
