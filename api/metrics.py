"""Prometheus metrics of a serving process: latencies measured by the service, counts read from the state."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from partbuild.state.live import LiveState
from partbuild.state.model import InstanceState, JobRunState, WantState


class Metrics:
    """One registry per service: append and catch-up latencies, state gauges read at scrape time."""

    def __init__(self, live: LiveState) -> None:
        self.registry = CollectorRegistry()
        self.append_seconds = Histogram(
            "partbuild_append_seconds", "Time to append a batch of events to the log", registry=self.registry
        )
        self.catch_up_seconds = Histogram(
            "partbuild_catch_up_seconds", "Time to fold newly appended events (replay latency)", registry=self.registry
        )
        self.registry.register(_StateCollector(live))


class _StateCollector(Collector):
    """Gauges of wants, job runs and instances by state, and the folded head."""

    def __init__(self, live: LiveState) -> None:
        self.live = live

    def collect(self) -> Iterator[GaugeMetricFamily]:
        state = self.live.state
        for metric, enum, counts, label in (
            ("partbuild_wants", WantState, state.want_counts, "Wants by state"),
            ("partbuild_job_runs", JobRunState, state.run_counts, "Job runs by state"),
            ("partbuild_instances", InstanceState, state.instance_counts, "Partition instances by state"),
        ):
            family = GaugeMetricFamily(metric, label, labels=["state"])
            for member in enum:
                family.add_metric([member.name.lower()], counts[member])
            yield family
        head = GaugeMetricFamily("partbuild_log_head_seq", "Seq of the newest event folded into the served state")
        head.add_metric([], state.head_seq)
        yield head
