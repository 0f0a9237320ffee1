"""Spark test settings: the conf of the one local SparkSession the tests share, and the size of the
W1 clicks data the `clicks_root` fixture (tests/conftest.py) generates with it."""

from __future__ import annotations

from datetime import date

# The flags of every JVM the tests start (tests/conftest.py puts them in the environment; see why there).
TEST_JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
# Tiny test data: two shuffle partitions, no UI.
TEST_SPARK_CONF: dict[str, str] = {
    "spark.ui.enabled": "false",
    "spark.sql.shuffle.partitions": "2",
    "spark.sql.session.timeZone": "UTC",
}
CLICKS_DAYS = 10
CLICKS_ROWS = 1000
CLICKS_START = date(2026, 1, 1)
