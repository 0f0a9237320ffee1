"""W1 on a real Spark standalone cluster: `partbuild run --master spark://...` runs its jobs on a worker.

A standalone master and one worker (1 core, 1 GiB) are started from the PySpark package's own Spark
distribution (`bin/spark-class`), on free ports of 127.0.0.1; the orchestrator process is only the
driver, its tasks run in an executor the worker launches. Driver and executor share this machine, so
the warehouse is a plain local directory both can read and write.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from examples.clicks.pipeline import raw_ref, week_days_in_range, weekly_ref
from partbuild.state.fold.records import InstanceState, WantState

from sparkkit import CLICKS_DAYS, CLICKS_START
from w1kit import WEEKS, finished, read_counts, replay, start_orchestrator, want_weeklies

pytestmark = pytest.mark.process

MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"
STARTUP_TIMEOUT_S = 120


@dataclass(frozen=True)
class Cluster:
    """A running standalone cluster: its spark:// URL, the master's web UI and the worker's work directory."""

    url: str
    webui: str
    work_dir: Path

    def state(self) -> dict[str, Any]:
        """The master's JSON status: workers, active and completed applications."""
        with urllib.request.urlopen(f"{self.webui}/json/", timeout=5) as response:
            return dict(json.load(response))


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _start(command: list[str], env: dict[str, str], log_file: Path) -> subprocess.Popen[bytes]:
    with log_file.open("wb") as output:
        # Its own process group: teardown stops the JVM and whatever it launched (the worker's executors).
        return subprocess.Popen(
            command, env=env, stdout=output, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True
        )


def _stop(process: subprocess.Popen[bytes]) -> None:
    for sig, wait_s in ((signal.SIGTERM, 30), (signal.SIGKILL, 10)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(timeout=wait_s)
            return
        except subprocess.TimeoutExpired:
            continue


def _wait_until(ready: Callable[[], bool], process: subprocess.Popen[bytes], log_file: Path, what: str) -> None:
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while not ready():
        assert process.poll() is None, f"{what} exited:\n{log_file.read_text(errors='replace')[-3000:]}"
        assert time.monotonic() < deadline, f"{what} not ready in {STARTUP_TIMEOUT_S} s"
        time.sleep(0.2)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """A standalone master and one registered worker, for this module; both JVMs stopped at the end."""
    import pyspark

    spark_home = Path(pyspark.__file__).parent  # a pip-installed PySpark is a Spark distribution too
    spark_class = spark_home / "bin" / "spark-class"
    assert spark_class.is_file(), f"no {spark_class}"
    root = tmp_path_factory.mktemp("spark-standalone")
    port, master_ui, worker_ui = _free_port(), _free_port(), _free_port()
    env = os.environ | {
        "SPARK_HOME": str(spark_home),
        "SPARK_LOCAL_IP": "127.0.0.1",
        # No REST submission server: it would take the fixed port 6066.
        "SPARK_MASTER_OPTS": "-Dspark.master.rest.enabled=false",
    }
    url, webui = f"spark://127.0.0.1:{port}", f"http://127.0.0.1:{master_ui}"
    cluster = Cluster(url, webui, root / "work")
    host = ["--host", "127.0.0.1"]
    master_cmd = [str(spark_class), MASTER_CLASS, *host, "--port", str(port), "--webui-port", str(master_ui)]
    worker_cmd = [
        str(spark_class), WORKER_CLASS, url, *host, "--cores", "1", "--memory", "1g",
        "--webui-port", str(worker_ui), "--work-dir", str(cluster.work_dir),
    ]  # fmt: skip
    master = _start(master_cmd, env, root / "master.log")
    worker: subprocess.Popen[bytes] | None = None
    try:
        # The worker starts once the master leads: one that registers earlier is ignored and retries only
        # after 5-15 s.
        _wait_until(lambda: _answers(cluster, "status") == "ALIVE", master, root / "master.log", "the master")
        worker = _start(worker_cmd, env, root / "worker.log")
        _wait_until(lambda: _answers(cluster, "aliveworkers") == 1, worker, root / "worker.log", "the worker")
        yield cluster
    finally:
        for process in (worker, master):
            if process is not None:
                _stop(process)


def _answers(cluster: Cluster, key: str) -> Any:
    try:
        return cluster.state().get(key)
    except OSError:  # not listening yet
        return None


def test_w1_builds_on_a_standalone_cluster(cluster: Cluster, spark: Any, clicks_root: Path, tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'standalone.db'}"
    want_weeklies(db)
    events = tmp_path / "events"
    events.mkdir()
    settings = {
        "spark.sql.shuffle.partitions": "7",
        "spark.driver.host": "127.0.0.1",  # where the executor calls the driver back
        "spark.eventLog.enabled": "true",
        "spark.eventLog.dir": events.as_uri(),
        "spark.eventLog.compress": "false",  # one plain JSON-lines file (Spark 4 compresses and rolls)
        "spark.eventLog.rolling.enabled": "false",
    }
    extra = [arg for key, value in settings.items() for arg in ("--spark-conf", f"{key}={value}")]
    # start_orchestrator sets PARTBUILD_SPARK_MASTER=local[2]: --master on the command line wins.
    process = start_orchestrator(
        db, clicks_root, tmp_path, "standalone", "--master", cluster.url, *extra, "--until-idle", "--timeout", "240"
    )
    run_log = tmp_path / "standalone.log"
    assert finished(process, 300, run_log) == 0, run_log.read_text()[-3000:]

    state = replay(db)
    assert not state.rejections
    assert {w.state for w in state.wants.values()} == {WantState.SUCCESSFUL}
    for week in WEEKS:
        weekly = state.canonical_instance(weekly_ref(week))
        assert weekly is not None and weekly.state == InstanceState.LIVE and weekly.location
        raw = [str(clicks_root / raw_ref(day)) for day in week_days_in_range(week, CLICKS_DAYS, CLICKS_START)]
        expected = {row["url"]: row["count"] for row in spark.read.parquet(*raw).groupBy("url").count().collect()}
        assert read_counts(spark, weekly.location) == expected, week

    app = _the_finished_app(cluster)
    environment, executors, task_executors = _event_log(events / app["id"])
    assert environment["spark.master"] == cluster.url
    assert environment["spark.sql.shuffle.partitions"] == "7"  # --spark-conf reached the session
    assert "spark.ui.enabled" not in environment  # no small-data default on a cluster master
    assert environment["spark.sql.session.timeZone"] == "UTC"
    assert executors and all(info["Host"] == "127.0.0.1" for info in executors.values())
    # Every task ran in an executor the worker launched, none in the driver.
    assert task_executors and task_executors <= set(executors), (task_executors, set(executors))
    assert any((cluster.work_dir / app["id"]).glob("*/stderr")), "the worker kept no executor log for the app"


def _the_finished_app(cluster: Cluster) -> dict[str, Any]:
    """The master's record of the orchestrator's application, once the driver has gone."""
    deadline = time.monotonic() + 30
    while True:
        state = cluster.state()
        apps = [app for app in state["completedapps"] if app["name"] == "partbuild"]
        if apps or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert len(apps) == 1, state
    assert apps[0]["state"] == "FINISHED", apps[0]
    return dict(apps[0])


def _event_log(path: Path) -> tuple[dict[str, str], dict[str, dict[str, Any]], set[str]]:
    """(Spark properties, executors added by id, ids of the executors tasks ran in) of an event log."""
    if not path.exists():  # a driver that did not stop its context leaves the log in progress
        path = path.with_name(path.name + ".inprogress")
    properties: dict[str, str] = {}
    executors: dict[str, dict[str, Any]] = {}
    task_executors: set[str] = set()
    for line in path.read_text().splitlines():
        try:
            event = json.loads(line)
        except json.JSONDecodeError:  # a last line cut off when the driver exited
            continue
        if event["Event"] == "SparkListenerEnvironmentUpdate":
            properties = dict(event["Spark Properties"])
        elif event["Event"] == "SparkListenerExecutorAdded":
            executors[event["Executor ID"]] = event["Executor Info"]
        elif event["Event"] == "SparkListenerTaskEnd":
            task_executors.add(event["Task Info"]["Executor ID"])
    return properties, executors, task_executors
