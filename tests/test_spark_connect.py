"""W1 on a real Spark Connect server: `partbuild run --master sc://...` builds through the gRPC client.

The server is PySpark's own Spark Connect server (spark-submit of
SparkConnectServer, local[2]) in a separate JVM on a free port; the orchestrator
process talks to it only over gRPC and starts no JVM of its own.
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from w1kit import WEEKS, finished, read_counts, replay, start_orchestrator, want_weeklies

from examples.clicks.pipeline import weekly_ref
from partbuild.state.model import InstanceState, WantState

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
