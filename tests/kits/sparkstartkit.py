"""Job runs through a `JobExecutor` with a lazily started SparkSession: a session factory that counts its
calls (and fails the first few), and `run_jobs`, which runs one job per run id and returns what each
appended."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from partbuild.orchestrator.context import JobContext, OutputTarget
from partbuild.orchestrator.decide import RunPlan, instance_location
from partbuild.orchestrator.executor import JobExecutor
from partbuild.orchestrator.graph import Graph, Job
from partbuild.proto.v1 import events_pb2 as pb


class CountingStart:
    """A session factory that counts its calls; fails the first `failures` of them."""

    def __init__(self, session: Any, failures: int = 0) -> None:
        self.session = session
        self.failures = failures
        self.calls = 0
        self.lock = threading.Lock()

    def __call__(self) -> Any:
        with self.lock:
            self.calls += 1
            if self.calls <= self.failures:
                raise ValueError("Could not parse Master URL: 'bogus'\nat org.apache.spark...")
        return self.session


def run_jobs(executor_spark: Any, job: Callable[[JobContext], None], run_ids: list[str], tmp_path: Path) -> list[str]:
    """Run `job` once per run id through a JobExecutor; the payload kinds each run appended."""
    appended: list[pb.Event] = []
    lock = threading.Lock()

    def append_events(events: list[pb.Event]) -> None:
        with lock:
            appended.extend(events)

    graph = Graph([Job("j", ["j/n={n:int}"], job)])
    executor = JobExecutor(executor_spark, append_events, max_workers=2, heartbeat_interval_s=60)
    try:
        for n, run_id in enumerate(run_ids):
            ref = f"j/n={n}"
            target = OutputTarget(graph.resolve(ref).partition, f"uuid-{n}", instance_location(str(tmp_path), ref, "u"))
            executor.submit(RunPlan(graph.jobs["j"], run_id, [target], {}, {f"uuid-{n}": ()}, 0))
    finally:
        executor.shutdown(wait=True)
    return [e.WhichOneof("payload") for e in appended if e.WhichOneof("payload") != "job_run_heartbeat"]
