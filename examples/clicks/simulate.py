"""A synthetic but valid event history shaped like workload W1, for the demo, benchmarks and tests.

Each simulated week follows the path the orchestrator takes for a weekly want:
the raw source partitions are observed, a user wants the weekly partition, its
job run reports the daily partitions missing, a derivative want asks for them,
one batched run builds the seven dailies from the raw data, and the weekly run
is retried and succeeds. Every `fail_every`-th week the daily run first fails
with a retryable error; every `taint_every`-th week a daily partition is
tainted afterwards and rebuilt through a new want, so the history holds
superseded instances too.

The generator knows the seq each event will get (it writes to a log starting at
`start_seq + 1`), so it derives instance UUIDs with the fold's own rule instead
of folding as it goes. The events are valid only if appended in order at
exactly those seqs; callers append with `expected_head` to make sure.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Generator, Iterator
from dataclasses import dataclass

from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.log.events import envelope, from_job_run, manual, system
from partbuild.state.rules.ids import instance_uuid

DAY_MS = 86_400_000
START_DATE = dt.date(2026, 1, 5)  # a Monday, so simulated weeks are whole ISO weeks


@dataclass(frozen=True)
class SimulationPlan:
    """How much history to generate."""

    weeks: int
    sites: int = 1  # independent copies of the pipeline (distinct refs), to scale up
    fail_every: int = 10
    taint_every: int = 25
    heartbeats_per_run: int = 1  # long-running jobs send many; each is one event
    start_ms: int = 1_767_571_200_000  # 2026-01-05T00:00:00Z


class _Writer:
    """Numbers events as the log will, and builds their envelopes."""

    def __init__(self, start_seq: int, start_ms: int) -> None:
        self.seq = start_seq
        self.clock_ms = start_ms

    def emit(self, payload: object, source: pb.EventSource | None = None) -> pb.Event:
        self.seq += 1
        self.clock_ms += 1_000
        return envelope(
            payload,  # type: ignore[arg-type]
            source=source,
            timestamp_ms=self.clock_ms,
            event_id=f"sim-{self.seq}",
        )


def simulate(plan: SimulationPlan, start_seq: int = 0) -> Iterator[pb.Event]:
    """Yield the events of `plan` for a log whose next seq is `start_seq + 1`."""
    w = _Writer(start_seq, plan.start_ms)
    for site in range(plan.sites):
        for week in range(plan.weeks):
            yield from _simulate_week(w, plan, site, week)


_ORCHESTRATOR = system("orchestrator")
_CONNECTOR = system("connector")


def _failed_run(w: _Writer, run_id: str, uuids: list[str], beats: int) -> Iterator[pb.Event]:
    """A daily run that fails with a retryable error (its retry is the caller's)."""
    yield w.emit(pb.JobRunBuffer(job_run_id=run_id, job_label="daily", instance_uuids=uuids))
    yield from _heartbeats(w, run_id, beats)
    failure = pb.JobRunFailure(
        job_run_id=run_id, error_class=pb.ERROR_CLASS_RETRYABLE, message="executor lost", retry_after_ms=30_000
    )
    yield w.emit(failure)


def _simulate_week(w: _Writer, plan: SimulationPlan, site: int, week: int) -> Iterator[pb.Event]:
    """One weekly want of one site, from the raw data arriving to the weekly partition built."""
    beats = max(1, plan.heartbeats_per_run)
    monday = START_DATE + dt.timedelta(weeks=week)
    days = [monday + dt.timedelta(days=i) for i in range(7)]
    iso_year, iso_week, _ = monday.isocalendar()
    prefix = f"site={site}/"
    weekly_ref = f"agg/weekly_clicks/{prefix}week={iso_year}-W{iso_week:02d}"
    daily_refs = [f"agg/daily_clicks/{prefix}date={d.isoformat()}" for d in days]
    tag = f"s{site}w{week}"

    raw_uuids = yield from _observe_raw(w, prefix, days)
    want_id = f"want-{tag}"
    yield w.emit(
        pb.WantCreate(
            want_id=want_id,
            partition_refs=[weekly_ref],
            data_timestamp_ms=plan.start_ms + week * 7 * DAY_MS,
            ttl_seconds=30 * 86_400,
            comment="weekly report",
        ),
        manual("analyst"),
    )
    weekly_uuid = instance_uuid(w.seq, weekly_ref)

    first_run = f"run-{tag}-weekly-1"
    yield w.emit(pb.JobRunBuffer(job_run_id=first_run, job_label="weekly", instance_uuids=[weekly_uuid]))
    yield from _heartbeats(w, first_run, beats)
    yield w.emit(pb.JobRunMissingDeps(job_run_id=first_run, missing_refs=daily_refs), _ORCHESTRATOR)
    yield w.emit(
        pb.WantCreate(want_id=f"want-{tag}-daily", partition_refs=daily_refs, parent_want_id=want_id),
        from_job_run(first_run),
    )
    daily_uuids = [instance_uuid(w.seq, ref) for ref in daily_refs]

    attempt = 1
    if plan.fail_every and week % plan.fail_every == plan.fail_every - 1:
        yield from _failed_run(w, f"run-{tag}-daily-{attempt}", daily_uuids, beats)
        attempt += 1
    yield from _build_dailies(w, f"run-{tag}-daily-{attempt}", daily_refs, daily_uuids, raw_uuids, beats)

    second_run = f"run-{tag}-weekly-2"
    yield w.emit(pb.JobRunBuffer(job_run_id=second_run, job_label="weekly", instance_uuids=[weekly_uuid]))
    yield from _heartbeats(w, second_run, beats)
    yield w.emit(
        pb.JobRunSuccess(
            job_run_id=second_run,
            input_instance_uuids=daily_uuids,
            outputs=[pb.OutputResult(instance_uuid=weekly_uuid, location=f"/data/{weekly_ref}/{weekly_uuid}")],
        )
    )
    if plan.taint_every and week % plan.taint_every == plan.taint_every - 1:
        yield from _taint_and_rebuild(w, tag, daily_refs, daily_uuids, raw_uuids[0], weekly_ref)


def _observe_raw(w: _Writer, prefix: str, days: list[dt.date]) -> Generator[pb.Event, None, list[str]]:
    """The connector observes the week's raw partitions; returns their instance UUIDs."""
    uuids = []
    for day in days:
        raw_ref = f"raw/clicks/{prefix}date={day.isoformat()}"
        observed = pb.PartitionObserved(
            partition_ref=raw_ref, location=f"/data/{raw_ref}", row_count=20_000, bytes=310_000
        )
        yield w.emit(observed, _CONNECTOR)
        uuids.append(instance_uuid(w.seq, raw_ref))
    return uuids


def _heartbeats(w: _Writer, run_id: str, count: int) -> Iterator[pb.Event]:
    for _ in range(count):
        yield w.emit(pb.JobRunHeartbeat(job_run_id=run_id))


def _build_dailies(
    w: _Writer, run_id: str, refs: list[str], uuids: list[str], raw_uuids: list[str], beats: int = 1
) -> Iterator[pb.Event]:
    yield w.emit(pb.JobRunBuffer(job_run_id=run_id, job_label="daily", instance_uuids=uuids))
    yield from _heartbeats(w, run_id, beats)
    yield w.emit(
        pb.JobRunSuccess(
            job_run_id=run_id,
            outputs=[
                pb.OutputResult(
                    instance_uuid=uuid,
                    location=f"/data/{ref}/{uuid}",
                    row_count=50,
                    bytes=1_200,
                    input_instance_uuids=[raw],
                )
                for ref, uuid, raw in zip(refs, uuids, raw_uuids, strict=True)
            ],
        )
    )


def _taint_and_rebuild(
    w: _Writer, tag: str, daily_refs: list[str], daily_uuids: list[str], raw_uuid: str, weekly_ref: str
) -> Iterator[pb.Event]:
    """Taint the first daily (and through it the weekly), then rebuild both from a new weekly want."""
    daily_ref = daily_refs[0]
    yield w.emit(pb.PartitionTaint(partition_ref=daily_ref, reason="late clicks arrived"), manual("analyst"))
    daily_uuid = instance_uuid(w.seq, daily_ref)
    weekly_uuid = instance_uuid(w.seq, weekly_ref)
    yield w.emit(pb.WantCreate(want_id=f"want-{tag}-rebuild", partition_refs=[weekly_ref]), manual("analyst"))
    yield w.emit(
        pb.WantCreate(
            want_id=f"want-{tag}-rebuild-daily", partition_refs=[daily_ref], parent_want_id=f"want-{tag}-rebuild"
        )
    )
    yield from _build_dailies(w, f"run-{tag}-rebuild-daily", [daily_ref], [daily_uuid], [raw_uuid])
    rebuild = f"run-{tag}-rebuild-weekly"
    yield w.emit(pb.JobRunBuffer(job_run_id=rebuild, job_label="weekly", instance_uuids=[weekly_uuid]))
    yield w.emit(pb.JobRunSuccess(job_run_id=rebuild, input_instance_uuids=[daily_uuid, *daily_uuids[1:]]))
