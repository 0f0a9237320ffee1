"""Spark settings in a real driver JVM, started in a child process: what spark-defaults.conf sets stays over
partbuild's defaults, and the user's settings beat the file. Resolving the settings without a JVM:
tests/orchestrator/test_spark_conf.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.process, pytest.mark.spark]  # the child starts a driver JVM

SESSION_SCRIPT = """
import json, sys
from partbuild.orchestrator.spark import spark_session

spark = spark_session("local[1]", conf={"spark.sql.session.timeZone": "Asia/Tokyo"})
keys = ["spark.sql.shuffle.partitions", "spark.sql.session.timeZone", "spark.ui.enabled", "spark.app.name"]
json.dump({key: spark.conf.get(key) for key in keys}, sys.stdout)
spark.stop()
"""


def test_spark_defaults_conf_beats_partbuild_defaults_in_a_real_session(tmp_path: Path) -> None:
    (tmp_path / "spark-defaults.conf").write_text(
        "spark.sql.shuffle.partitions  9\nspark.sql.session.timeZone  America/New_York\nspark.app.name from-file\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", SESSION_SCRIPT],
        env=os.environ | {"SPARK_CONF_DIR": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout) == {
        "spark.sql.shuffle.partitions": "9",  # the file's, not our 4
        "spark.sql.session.timeZone": "Asia/Tokyo",  # the user's setting beats the file
        "spark.ui.enabled": "false",  # a default the file does not touch still applies
        "spark.app.name": "from-file",  # partbuild's app name is a default too
    }
