"""W1 on a real Spark Connect server: `partbuild run --master sc://...` builds through the gRPC client.

The server is PySpark's own Spark Connect server (spark-submit of
SparkConnectServer, local[2]) in a separate JVM on a free port; the orchestrator
process talks to it only over gRPC and starts no JVM of its own. A canceled job
run's operations are interrupted on the server through their tag.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from examples.clicks.pipeline import weekly_ref
from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.fold.records import InstanceState, JobRunState, WantState
from partbuild.state.log.events import envelope, manual
from partbuild.state.log.store import EventLog

from bucketkit import GITHUB_KEY, KEYS, SPEC_VECTORS, TOTALS, reference, sample_strings
from w1kit import WEEKS, finished, read_counts, replay, start_orchestrator, want_weeklies

pytestmark = pytest.mark.process

SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
STARTUP_TIMEOUT_S = 180


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture(scope="module")
def connect_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """(sc:// URL, server log file) of a Spark Connect server started for this module."""
    pytest.importorskip("pyspark.sql.connect.session", reason="needs pip install 'partbuild[connect]'")
    import pyspark

    spark_home = Path(pyspark.__file__).parent
    port = _free_port()
    log_file = tmp_path_factory.mktemp("spark-connect") / "server.log"
    command = [
        str(spark_home / "bin" / "spark-submit"), "--class", SERVER_CLASS, "--master", "local[2]",
        "--conf", f"spark.connect.grpc.binding.port={port}", "--conf", "spark.connect.grpc.binding.address=127.0.0.1",
        "--conf", "spark.ui.enabled=false", "--conf", "spark.sql.shuffle.partitions=2",
        "--name", "partbuild-tests", "spark-internal",
    ]  # fmt: skip
    with log_file.open("wb") as output:
        server = subprocess.Popen(
            command,
            env=os.environ | {"SPARK_HOME": str(spark_home)},
            stdout=output,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
    try:
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while "Spark Connect server started" not in log_file.read_text(errors="replace"):
            assert server.poll() is None, f"Spark Connect server exited:\n{log_file.read_text()[-3000:]}"
            assert time.monotonic() < deadline, f"no Spark Connect server in {STARTUP_TIMEOUT_S} s"
            time.sleep(0.2)
        yield f"sc://127.0.0.1:{port}", log_file
    finally:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


def test_w1_builds_on_a_spark_connect_server(
    connect_server: tuple[str, Path], spark: Any, clicks_root: Path, tmp_path: Path
) -> None:
    url, server_log = connect_server
    db = f"sqlite:///{tmp_path / 'connect.db'}"
    want_weeklies(db)
    extra = ("--master", url, "--until-idle", "--timeout", "240")
    process = start_orchestrator(db, clicks_root, tmp_path, "connect", *extra)
    run_log = tmp_path / "connect.log"
    assert finished(process, 300, run_log) == 0, run_log.read_text()[-3000:]

    state = replay(db)
    assert not state.rejections
    assert {w.state for w in state.wants.values()} == {WantState.SUCCESSFUL}
    written_by_server = server_log.read_text(errors="replace")
    for week in WEEKS:
        weekly = state.canonical_instance(weekly_ref(week))
        assert weekly is not None and weekly.state == InstanceState.LIVE and weekly.location
        # The server's JVM wrote the output (the orchestrator process has none).
        assert f"file:{weekly.location}" in written_by_server, weekly.location
    last = state.canonical_instance(weekly_ref(WEEKS[-1]))
    assert last is not None and sum(read_counts(spark, last.location or "").values()) == 6 * 1000


# A graph whose first attempt at a partition holds a Spark operation for CONNECT_SLEEP_MS on the server
# (a SQL sleep: no Python worker involved) and notes when and how that operation ended.
CANCEL_GRAPH = """
import time
from pathlib import Path

from partbuild.orchestrator.graph import Graph, Job

ROOT = Path(__file__).parent
SLEEP = "reflect('java.lang.Thread', 'sleep', cast({sleep_ms} as bigint))"


def run(ctx):
    for target in ctx.outputs:
        marker = ROOT / f"attempted-{{target.partition['n']}}"
        if not marker.exists():
            marker.touch()
            spark = ctx.spark  # the session first (slow to open on a busy host): the cancel must find it tagged
            (ROOT / "first-started").write_text(ctx.job_run_id)
            try:
                spark.range(0, 2, 1, 2).selectExpr(SLEEP).collect()
            except Exception as exc:
                (ROOT / "first-ended").write_text(f"{{time.time()}}\\n{{exc}}")
                raise
        ctx.spark.range(10).write.mode("overwrite").parquet(target.location)


graph = Graph([Job("slow", ["slow/n={{n:int}}"], run, max_concurrency=2)])
"""
CONNECT_SLEEP_MS = 60_000


def test_canceling_a_run_interrupts_its_operation_on_the_server(
    connect_server: tuple[str, Path], tmp_path: Path
) -> None:
    url, _ = connect_server
    db = f"sqlite:///{tmp_path / 'cancel.db'}"
    graph_file = tmp_path / "graph.py"
    graph_file.write_text(CANCEL_GRAPH.format(sleep_ms=CONNECT_SLEEP_MS))
    with EventLog.open(db, auto_upgrade=True) as log:
        log.append([envelope(pb.WantCreate(want_id="w1", partition_refs=["slow/n=1"]), source=manual("test"))])
    exe = shutil.which("partbuild", path=str(Path(sys.executable).parent))
    assert exe is not None
    command = [
        exe, "run", "--db", db, "--graph", str(graph_file), "--warehouse", str(tmp_path / "warehouse"),
        "--master", url, "--until-idle", "--timeout", "120", "--heartbeat-interval", "1",
    ]  # fmt: skip
    run_log = tmp_path / "cancel.log"
    with run_log.open("wb") as output:
        process = subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while not (tmp_path / "first-started").exists():
            assert process.poll() is None, run_log.read_text()[-3000:]
            assert time.monotonic() < deadline, "the first attempt did not start within 60 s"
            time.sleep(0.05)
        time.sleep(1)  # let the operation reach the server (a cancel before it is repeated every heartbeat)
        first = (tmp_path / "first-started").read_text()
        canceled_at = time.time()
        with EventLog.open(db) as log:
            log.append([envelope(pb.JobRunCancel(job_run_id=first, reason="test"), source=manual("test"))])
        assert finished(process, 120, run_log) == 0, run_log.read_text()[-3000:]
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()

    ended_at, error = (tmp_path / "first-ended").read_text().split("\n", 1)
    assert "OPERATION_CANCELED" in error
    assert float(ended_at) - canceled_at < 20  # the server stopped it long before its sleep would end
    state = replay(db)
    assert state.job_runs[first].state == JobRunState.CANCELED
    instance = state.canonical_instance("slow/n=1")
    assert instance is not None and instance.state == InstanceState.LIVE
    assert instance.built_by not in (None, first)
    # A periodic heartbeat may race the cancel (appended after it, before the orchestrator folded it).
    assert [r for r in state.rejections if r.event_type != "job_run_heartbeat"] == []


# A Spark Connect client process (no JVM of its own): reads {url, values, combos} on stdin, computes
# `bucket_column` for every (key, total) on the server and prints the rows as JSON.
BUCKET_CLIENT = """
import json, sys

from pyspark.sql import Column
from partbuild.orchestrator.spark import bucket_column, spark_session

job = json.load(sys.stdin)
spark = spark_session(job["url"])
column = bucket_column("k", "s", 12)
assert isinstance(column, Column) and type(column).__module__.startswith("pyspark.sql.connect"), type(column)
frame = spark.createDataFrame(list(enumerate(job["values"])), "i long, s string")
buckets = [bucket_column(key, "s", total).alias(f"b{n}") for n, (key, total) in enumerate(job["combos"])]
rows = frame.select("i", *buckets).orderBy("i").collect()
json.dump([list(row) for row in rows], sys.stdout)
"""


def test_bucket_column_equals_the_reference_on_a_spark_connect_server(
    connect_server: tuple[str, Path], tmp_path: Path
) -> None:
    url, _ = connect_server
    values = [data for data, _, _ in SPEC_VECTORS] + sample_strings(300, seed=15)
    combos = [(key, total) for key in KEYS for total in TOTALS] + [(GITHUB_KEY, t) for t in (7, 10)]
    script = tmp_path / "bucket_client.py"
    script.write_text(BUCKET_CLIENT)
    done = subprocess.run(
        [sys.executable, str(script)],
        input=json.dumps({"url": url, "values": values, "combos": combos}),
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    rows = json.loads(done.stdout)

    assert [row[0] for row in rows] == list(range(len(values)))
    wrong = [
        (key, total, values[i], got)
        for i, *buckets in rows
        for (key, total), got in zip(combos, buckets, strict=True)
        if got != reference(key, values[i], total)
    ]
    assert wrong == []
    by_vector = {
        (values[i], total): got
        for i, *buckets in rows
        for (key, total), got in zip(combos, buckets, strict=True)
        if key == GITHUB_KEY
    }
    assert [(d, t, by_vector[d, t]) for d, t, _ in SPEC_VECTORS] == SPEC_VECTORS


# A Spark Connect client process: a session with the user's settings, logging to stderr; prints what the
# server session holds for them.
CONF_CLIENT = """
import json, logging, sys

from partbuild.orchestrator.spark import spark_session

logging.basicConfig(level=logging.INFO, stream=sys.stderr)
spark = spark_session(sys.argv[1], conf={"spark.sql.shuffle.partitions": "7", "spark.executor.memory": "3g"})
json.dump({key: spark.conf.get(key, None) for key in ["spark.sql.shuffle.partitions", "spark.ui.enabled"]}, sys.stdout)
"""


def test_spark_conf_reaches_a_spark_connect_session_and_what_it_ignores_is_named(
    connect_server: tuple[str, Path],
) -> None:
    url, _ = connect_server
    done = subprocess.run([sys.executable, "-c", CONF_CLIENT, url], capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]
    # The runtime setting is the session's; the server's own settings (its shuffle partitions 2, UI off)
    # are not overridden by partbuild's defaults.
    assert json.loads(done.stdout) == {"spark.sql.shuffle.partitions": "7", "spark.ui.enabled": "false"}
    warnings = [line for line in done.stderr.splitlines() if "did not apply" in line]
    assert len(warnings) == 1 and "spark.executor.memory" in warnings[0], done.stderr[-3000:]
    assert "spark.sql.shuffle.partitions" not in warnings[0]
