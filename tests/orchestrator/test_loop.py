"""The real run loop on a real database (SQLite and PostgreSQL), with job functions that need no Spark.

Jobs write small text files to their instance-specific `target.location`, raise
`MissingInputs`, `PermanentJobError` or plain exceptions, or block on a
`threading.Event` to stand in for a long run. Every orchestrator is closed by
the `orchestrators` fixture; blocked jobs are released before that.
"""

from __future__ import annotations

import datetime as dt
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import partbuild.orchestrator.loop as loop_module
from partbuild.examples.clicks.isoweek import IsoWeek
from partbuild.orchestrator.context import JobContext, MissingInputs, PermanentJobError
from partbuild.orchestrator.decide import decide, instance_location
from partbuild.orchestrator.graph import Graph, Job, Partition, RetryPolicy, SourceDataset
from partbuild.orchestrator.loop import Orchestrator
from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.database import Database
from partbuild.state.fold.build_state import BuildState
from partbuild.state.fold.records import InstanceState as I
from partbuild.state.fold.records import JobRunState as R
from partbuild.state.fold.records import WantState as W
from partbuild.state.log.digest import state_digest
from partbuild.state.log.events import envelope, manual, wall_clock_ms
from partbuild.state.log.replay import replay_into
from partbuild.state.log.store import AppendConflict, EventLog
from partbuild.state.rules.ids import instance_uuid

WEEK = IsoWeek(2026, 2)
DAYS = WEEK.days()
WEEKLY = f"weekly/week={WEEK}"


def daily(day: dt.date) -> str:
    return f"daily/date={day.isoformat()}"


def raw(day: dt.date) -> str:
    return f"raw/date={day.isoformat()}"


# ----------------------------------------------------------------- fixtures and helpers

OrchestratorFactory = Callable[..., Orchestrator]


@pytest.fixture
def gates() -> Iterator[list[threading.Event]]:
    """Events that blocked jobs wait on; all set at teardown so no orchestrator hangs on close."""
    created: list[threading.Event] = []
    yield created
    for gate in created:
        gate.set()


@pytest.fixture
def orchestrators(db_url: str, tmp_path: Path, gates: list[threading.Event]) -> Iterator[Callable[..., Orchestrator]]:
    """Make orchestrators on the test database (each with its own EventLog, like separate processes)."""
    made: list[tuple[Orchestrator, Database]] = []

    def make(graph: Graph, **options: Any) -> Orchestrator:
        db = Database.open(db_url, auto_upgrade=True)
        settings: dict[str, Any] = {
            "warehouse": str(tmp_path / "warehouse"),
            "spark": None,
            "source_check_interval_s": 0,
            "heartbeat_interval_s": 0.1,
            "poll_interval_s": 0.01,
            **options,
        }
        orchestrator = Orchestrator(db, graph, **settings)
        made.append((orchestrator, db))
        return orchestrator

    yield make
    for gate in gates:
        gate.set()
    for orchestrator, db in made:
        orchestrator.close()
        db.close()


@pytest.fixture
def log(db_url: str) -> Iterator[EventLog]:
    """The test's own handle on the log (the orchestrators open theirs)."""
    with EventLog.open(db_url, auto_upgrade=True) as handle:
        yield handle


def append(log: EventLog, *payloads: Any, timestamp_ms: int | None = None) -> int:
    """Append payloads as a user would; returns the seq of the first."""
    events = [envelope(p, source=manual("test"), timestamp_ms=timestamp_ms) for p in payloads]
    return log.append(events).first_seq


def want(log: EventLog, want_id: str, *refs: str, **fields: Any) -> int:
    return append(log, pb.WantCreate(want_id=want_id, partition_refs=list(refs), **fields))


def verified(orchestrator: Orchestrator) -> BuildState:
    """The orchestrator's state, checked against a strict full replay of the log."""
    orchestrator.catch_up()
    strict = BuildState(strict=True)
    replay_into(strict, orchestrator.log)
    assert state_digest(strict) == state_digest(orchestrator.state)
    # Harmless by design: a heartbeat racing its run's outcome, and (several orchestrators) a second
    # observation of a source partition another orchestrator has just observed.
    unexpected = [
        r
        for r in strict.rejections
        if r.event_type != "job_run_heartbeat"
        and not (r.event_type == "partition_observed" and "is already Live at" in r.reason)
    ]
    assert unexpected == [], unexpected
    return orchestrator.state


def log_events(log: EventLog) -> list[pb.Event]:
    return [stored.to_event() for stored in log.read(0, 10_000)]


def write(location: str, value: int) -> None:
    Path(location).mkdir(parents=True, exist_ok=True)
    (Path(location) / "value.txt").write_text(str(value))


def read(location: str) -> int:
    return int((Path(location) / "value.txt").read_text())


class Pipeline:
    """raw (files under tmp_path, found by `locate`) -> daily (value * 10) -> weekly (sum of dailies)."""

    def __init__(self, root: Path, *, daily_batch: int = 4, daily_concurrency: int = 2) -> None:
        self.root = root
        self.lock = threading.Lock()
        self.calls: list[tuple[str, str, str]] = []  # (job label, job run id, ref), one per output built
        self.daily_hook: Callable[[JobContext], None] = lambda ctx: None
        self.graph = Graph(
            [
                Job(
                    "daily",
                    ["daily/date={date:date}"],
                    self.run_daily,
                    inputs=lambda p: [raw(p["date"])],
                    batch_size=daily_batch,
                    max_concurrency=daily_concurrency,
                    retry=RetryPolicy(max_attempts=2, backoff_ms=10),
                ),
                Job(
                    "weekly",
                    ["weekly/week={week:isoweek}"],
                    self.run_weekly,
                    inputs=lambda p: [daily(day) for day in p["week"].days()],
                    max_concurrency=2,
                ),
            ],
            [SourceDataset("raw", "raw/date={date:date}", locate=self.locate)],
        )

    def add_raw(self, day: dt.date, value: int) -> None:
        write(str(self.root / "raw" / day.isoformat()), value)

    def locate(self, partition: Partition) -> str | None:
        location = self.root / "raw" / partition["date"].isoformat()
        return str(location) if location.exists() else None

    def _called(self, ctx: JobContext) -> None:
        with self.lock:
            self.calls.extend((ctx.job_label, ctx.job_run_id, target.ref) for target in ctx.outputs)

    def run_daily(self, ctx: JobContext) -> None:
        self._called(ctx)
        self.daily_hook(ctx)
        for target in ctx.outputs:
            value = read(ctx.input(raw(target.partition["date"]))) * 10
            write(target.location, value)
            ctx.record(target.ref, row_count=value, note="daily")

    def run_weekly(self, ctx: JobContext) -> None:
        self._called(ctx)
        for target in ctx.outputs:
            total = sum(read(location) for location in ctx.inputs(daily(d) for d in target.partition["week"].days()))
            write(target.location, total)
            ctx.record(target.ref, row_count=total)


@pytest.fixture
def pipeline(tmp_path: Path) -> Pipeline:
    return Pipeline(tmp_path)


def canonical(state: BuildState, ref: str) -> Any:
    instance = state.canonical_instance(ref)
    assert instance is not None, ref
    return instance


# ----------------------------------------------------------------- the happy path and lineage


def test_weekly_want_builds_the_whole_graph_with_lineage(
    orchestrators: OrchestratorFactory, log: EventLog, pipeline: Pipeline, tmp_path: Path
) -> None:
    for n, day in enumerate(DAYS, start=1):
        pipeline.add_raw(day, n)
    want(log, "w", WEEKLY)
    o = orchestrators(pipeline.graph)
    assert o.run_until_idle(timeout_s=15)
    state = verified(o)

    assert {w.want_id: w.state for w in state.wants.values()} == dict.fromkeys(state.wants, W.SUCCESSFUL)
    assert len(state.wants) == 3  # w, the dailies (derived from w), the raws (derived from that)
    weekly = canonical(state, WEEKLY)
    assert weekly.state == I.LIVE
    assert read(weekly.location) == 10 * sum(range(1, 8))
    assert weekly.row_count == 280
    # Lineage: weekly <- dailies <- raws, by instance UUID.
    daily_instances = [canonical(state, daily(day)) for day in DAYS]
    assert weekly.inputs == tuple(i.uuid for i in daily_instances)
    for day, instance in zip(DAYS, daily_instances, strict=True):
        raw_instance = canonical(state, raw(day))
        assert raw_instance.location == str(tmp_path / "raw" / day.isoformat())
        assert instance.inputs == (raw_instance.uuid,)
        assert list(raw_instance.consumers or ()) == [instance.uuid]
        assert instance.metadata == {"note": "daily"}
    assert state.wants["w"].satisfied_by == (weekly.uuid,)

    # Every output went to an instance-specific location, recorded in the JobRunSuccess events.
    warehouse = str(tmp_path / "warehouse")
    outputs = [o for e in log_events(log) if e.HasField("job_run_success") for o in e.job_run_success.outputs]
    assert len(outputs) == 8
    for output in outputs:
        instance = state.instances[output.instance_uuid]
        assert output.location == instance_location(warehouse, instance.ref, instance.uuid)
        assert output.location.endswith(f"/{instance.ref}/_instance={instance.uuid}")
        assert instance.location == output.location and Path(output.location, "value.txt").exists()
    # Batched: 7 dailies in runs of at most 4, each partition built exactly once.
    runs = Counter(state.job_runs[run_id].job_label for run_id in state.job_runs)
    assert runs == {"daily": 2, "weekly": 1}
    assert sorted(ref for _, _, ref in pipeline.calls) == sorted([*map(daily, DAYS), WEEKLY])


def test_dep_miss_discovered_at_run_time_two_hops_up_completes(
    orchestrators: OrchestratorFactory, log: EventLog, tmp_path: Path
) -> None:
    """report raises MissingInputs(lookup); lookup needs dim; dim needs raw (a source): all built, report rerun."""
    built: set[str] = set()
    attempts: list[str] = []

    def run_report(ctx: JobContext) -> None:
        attempts.append(ctx.job_run_id)
        if "lookup/v=1" not in built:  # found out at run time, e.g. by looking in a catalog
            raise MissingInputs(["lookup/v=1"])
        write(ctx.outputs[0].location, 1)

    def builder(ctx: JobContext) -> None:
        for target in ctx.outputs:
            assert all(Path(location).exists() for location in ctx.input_locations.values())
            write(target.location, 1)
            built.add(target.ref)

    write(str(tmp_path / "raw-v1"), 1)
    graph = Graph(
        [
            Job("report", ["report/{name}"], run_report),
            Job("lookup", ["lookup/v={v:int}"], builder, inputs=lambda p: [f"dim/v={p['v']}"]),
            Job("dim", ["dim/v={v:int}"], builder, inputs=lambda p: [f"raw/v={p['v']}"]),
        ],
        [SourceDataset("raw", "raw/v={v:int}", locate=lambda p: str(tmp_path / f"raw-v{p['v']}"))],
    )
    want(log, "w", "report/daily")
    o = orchestrators(graph)
    assert o.run_until_idle(timeout_s=15)
    state = verified(o)

    report = canonical(state, "report/daily")
    assert report.state == I.LIVE
    first, second = report.attempts
    assert attempts == [first, second]
    assert state.job_runs[first].state == R.DEP_MISS
    assert state.job_runs[first].missing_refs == ("lookup/v=1",)
    assert state.job_runs[second].state == R.SUCCEEDED
    assert {w.state for w in state.wants.values()} == {W.SUCCESSFUL}

    (lookup_want,) = [w for w in state.wants.values() if w.refs == ("lookup/v=1",)]
    assert (lookup_want.source, lookup_want.parent_want_id, lookup_want.root_want_id) == (f"job_run:{first}", "w", "w")
    (dim_want,) = [w for w in state.wants.values() if w.refs == ("dim/v=1",)]
    assert (dim_want.parent_want_id, dim_want.root_want_id) == (lookup_want.want_id, "w")
    assert dim_want.source == "system:orchestrator"
    assert canonical(state, "lookup/v=1").inputs == (canonical(state, "dim/v=1").uuid,)
    assert canonical(state, "dim/v=1").inputs == (canonical(state, "raw/v=1").uuid,)


# ----------------------------------------------------------------- failures and retries


def test_retryable_failure_succeeds_on_retry(orchestrators: OrchestratorFactory, log: EventLog) -> None:
    calls: list[str] = []

    def flaky(ctx: JobContext) -> None:
        calls.append(ctx.job_run_id)
        if len(calls) == 1:
            raise RuntimeError("flaky")
        write(ctx.outputs[0].location, 1)

    graph = Graph([Job("flaky", ["f/{n}"], flaky, retry=RetryPolicy(max_attempts=3, backoff_ms=50))])
    want(log, "w", "f/1")
    o = orchestrators(graph)
    assert o.run_until_idle(timeout_s=10)
    state = verified(o)

    instance = canonical(state, "f/1")
    assert instance.state == I.LIVE and state.wants["w"].state == W.SUCCESSFUL
    first, second = (state.job_runs[run_id] for run_id in instance.attempts)
    assert calls == [first.job_run_id, second.job_run_id]
    assert (first.state, first.error_class, first.error_message) == (R.FAILED, "retryable", "RuntimeError: flaky")
    assert second.state == R.SUCCEEDED and instance.built_by == second.job_run_id
    assert second.created_ms - first.updated_ms >= 50  # the backoff was respected


def test_job_that_always_fails_ends_failed_after_max_attempts(
    orchestrators: OrchestratorFactory, log: EventLog
) -> None:
    calls: list[str] = []

    def broken(ctx: JobContext) -> None:
        calls.append(ctx.job_run_id)
        raise ValueError(f"bad input {len(calls)}")

    graph = Graph([Job("broken", ["b/{n}"], broken, retry=RetryPolicy(max_attempts=3, backoff_ms=10))])
    want(log, "w", "b/1")
    o = orchestrators(graph)
    assert o.run_until_idle(timeout_s=10)
    state = verified(o)

    instance = canonical(state, "b/1")
    runs = [state.job_runs[run_id] for run_id in instance.attempts]
    assert [run.job_run_id for run in runs] == calls and len(runs) == 3
    assert [run.state for run in runs] == [R.FAILED] * 3
    assert [run.error_class for run in runs] == ["retryable", "retryable", "permanent"]
    assert runs[-1].error_message == "ValueError: bad input 3"
    assert instance.state == I.FAILED and instance.note == "ValueError: bad input 3"
    assert state.wants["w"].state == W.FAILED


def test_permanent_failure_of_a_daily_fails_the_weekly_upstream(
    orchestrators: OrchestratorFactory, log: EventLog, tmp_path: Path
) -> None:
    pipeline = Pipeline(tmp_path, daily_batch=1, daily_concurrency=7)
    for day in DAYS:
        pipeline.add_raw(day, 1)
    bad = daily(DAYS[2])

    def corrupt(ctx: JobContext) -> None:
        if ctx.outputs[0].ref == bad:
            raise PermanentJobError("corrupt input")

    pipeline.daily_hook = corrupt
    want(log, "w", WEEKLY)
    o = orchestrators(pipeline.graph)
    assert o.run_until_idle(timeout_s=15)
    state = verified(o)

    failed = canonical(state, bad)
    assert failed.state == I.FAILED and failed.note == "PermanentJobError: corrupt input"
    (run_id,) = failed.attempts  # no retry of a permanent error
    assert state.job_runs[run_id].error_class == "permanent"
    (daily_want,) = [w for w in state.wants.values() if bad in w.refs]
    assert daily_want.state == W.FAILED and daily_want.parent_want_id == "w"
    weekly = canonical(state, WEEKLY)
    assert weekly.state == I.UPSTREAM_FAILED
    assert weekly.note == f"upstream {bad} failed"
    assert weekly.attempts == ()  # never ran
    assert state.wants["w"].state == W.UPSTREAM_FAILED
    assert WEEKLY not in {ref for _, _, ref in pipeline.calls}


# ----------------------------------------------------------------- taint and rebuild


def test_taint_then_new_want_rebuilds_daily_and_weekly_as_new_instances(
    orchestrators: OrchestratorFactory, log: EventLog, pipeline: Pipeline
) -> None:
    for day in DAYS:
        pipeline.add_raw(day, 1)
    want(log, "w1", WEEKLY)
    o = orchestrators(pipeline.graph)
    assert o.run_until_idle(timeout_s=15)
    before = {ref: canonical(o.state, ref).uuid for ref in [WEEKLY, *map(daily, DAYS), *map(raw, DAYS)]}

    bad = daily(DAYS[3])
    pipeline.add_raw(DAYS[3], 5)  # the raw file is corrected in place (the same Live raw instance)
    append(log, pb.PartitionTaint(partition_ref=bad, reason="wrong currency"))
    want(log, "w2", WEEKLY)
    assert o.run_until_idle(timeout_s=15)
    state = verified(o)

    new_weekly, new_daily = canonical(state, WEEKLY), canonical(state, bad)
    assert new_weekly.uuid != before[WEEKLY] and new_daily.uuid != before[bad]
    assert (new_weekly.state, new_daily.state) == (I.LIVE, I.LIVE)
    assert (new_weekly.previous_uuid, new_daily.previous_uuid) == (before[WEEKLY], before[bad])
    old_weekly, old_daily = state.instances[before[WEEKLY]], state.instances[before[bad]]
    assert (old_weekly.state, old_daily.state) == (I.TAINTED, I.TAINTED)
    assert old_daily.note == "wrong currency"
    assert old_weekly.note == f"upstream {bad} tainted: wrong currency"
    assert old_weekly.location != new_weekly.location and read(old_weekly.location) == 70  # old data kept
    assert read(new_weekly.location) == 110
    expected_inputs = tuple(new_daily.uuid if day == DAYS[3] else before[daily(day)] for day in DAYS)
    assert new_weekly.inputs == expected_inputs
    # Nothing else was rebuilt.
    for ref in [*map(raw, DAYS), *(daily(day) for day in DAYS if day != DAYS[3])]:
        assert canonical(state, ref).uuid == before[ref]
    assert Counter(ref for _, _, ref in pipeline.calls) == Counter(
        {**dict.fromkeys(map(daily, DAYS), 1), bad: 2, WEEKLY: 2}
    )
    assert state.wants["w1"].state == W.SUCCESSFUL and state.wants["w1"].satisfied_by == (before[WEEKLY],)
    assert state.wants["w2"].satisfied_by == (new_weekly.uuid,)


# ----------------------------------------------------------------- source data and TTL


def test_want_waits_for_a_source_that_appears_later(
    orchestrators: OrchestratorFactory, log: EventLog, pipeline: Pipeline
) -> None:
    want(log, "w", daily(DAYS[0]))
    o = orchestrators(pipeline.graph)
    for _ in range(5):
        o.step()
    assert o.state.wants["w"].state == W.UPSTREAM_BUILDING
    assert canonical(o.state, daily(DAYS[0])).state == I.UPSTREAM_BUILDING
    assert canonical(o.state, raw(DAYS[0])).state == I.MISSING
    assert not o.run_until_idle(timeout_s=0.2)

    pipeline.add_raw(DAYS[0], 4)
    assert o.run_until_idle(timeout_s=10)
    state = verified(o)
    assert state.wants["w"].state == W.SUCCESSFUL
    assert read(canonical(state, daily(DAYS[0])).location) == 40
    observed = [e for e in log_events(log) if e.HasField("partition_observed")]
    assert [e.partition_observed.partition_ref for e in observed] == [raw(DAYS[0])]


def test_want_for_a_source_that_never_appears_expires(
    orchestrators: OrchestratorFactory, log: EventLog, pipeline: Pipeline
) -> None:
    started, now = time.monotonic(), wall_clock_ms()
    # Expires 0.5 s from now: data timestamp 10.5 s ago, TTL 11 s.
    want(log, "w", daily(DAYS[0]), data_timestamp_ms=now - 10_500, ttl_seconds=11)
    o = orchestrators(pipeline.graph)
    assert o.run_until_idle(timeout_s=10)
    assert time.monotonic() - started >= 0.45  # not before its time (a little slack between the two clocks)
    state = verified(o)
    assert {w.want_id: w.state for w in state.wants.values()} == dict.fromkeys(state.wants, W.EXPIRED)
    assert len(state.wants) == 2  # w and the derivative want of raw, which inherited its TTL
    assert canonical(state, raw(DAYS[0])).state == I.MISSING
    types = [e.WhichOneof("payload") for e in log_events(log)]
    assert types[-1] == "clock_tick"  # nothing else happened: the loop moved the log's clock itself
    assert state.clock_ms >= now - 10_500 + 11_000


def test_idle_steps_do_not_decide_again_or_look_for_sources_before_due(
    orchestrators: OrchestratorFactory, log: EventLog, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With nothing folded since the last decision, a step reuses it; sources are looked at per interval."""
    looked: list[dt.date] = []

    def locate(partition: Partition) -> str | None:
        looked.append(partition["date"])
        return None  # the raw data never arrives in this test

    graph = Graph(
        [Job("daily", ["daily/date={date:date}"], lambda ctx: None, inputs=lambda p: [raw(p["date"])])],
        [SourceDataset("raw", "raw/date={date:date}", locate=locate)],
    )
    decisions: list[int] = []

    def counting_decide(state: BuildState, graph: Graph, now_ms: int, ownership: Any = None) -> Any:
        decisions.append(state.head_seq)
        return decide(state, graph, now_ms, ownership)

    monkeypatch.setattr(loop_module, "decide", counting_decide)
    clock = [wall_clock_ms()]
    want(log, "w", daily(DAYS[0]))
    o = orchestrators(graph, clock=lambda: clock[0], source_check_interval_s=60)
    for _ in range(6):
        o.step()
    # Decided on the want, then on the derivative want and wait that decision appended; no more.
    assert len(decisions) == 2 and decisions[1] > decisions[0]
    assert looked == [DAYS[0]]  # the next look is due in 60 s
    assert canonical(o.state, daily(DAYS[0])).state == I.UPSTREAM_BUILDING

    clock[0] += 60_000
    o.step()
    assert looked == [DAYS[0], DAYS[0]] and len(decisions) == 2

    want(log, "w2", daily(DAYS[1]))  # a new event: the next step decides again
    o.step()
    o.step()
    assert len(decisions) == 4
    assert looked == [DAYS[0], DAYS[0], DAYS[1]]  # the new source partition at once, the old one not yet
    states = {w.want_id: w.state for w in o.state.wants.values()}
    # The wants wait for their raw inputs; the derivative wants of those inputs wait to be observed.
    derived = sorted(states.keys() - {"w", "w2"})
    assert len(derived) == 2
    assert states == {"w": W.UPSTREAM_BUILDING, "w2": W.UPSTREAM_BUILDING, **dict.fromkeys(derived, W.IDLE)}


# ----------------------------------------------------------------- dead orchestrators


def test_stale_run_of_a_dead_orchestrator_is_failed_and_rebuilt(
    orchestrators: OrchestratorFactory, log: EventLog, gates: list[threading.Event]
) -> None:
    """A starts a run and stops heartbeating (stuck or dead); B fails it as stale and rebuilds the partition."""
    gate, started = threading.Event(), threading.Event()
    gates.append(gate)
    runs: list[str] = []

    def slow(ctx: JobContext) -> None:
        runs.append(ctx.job_run_id)
        if len(runs) == 1:  # A's run hangs until the end of the test
            started.set()
            gate.wait(timeout=30)
        write(ctx.outputs[0].location, len(runs))

    graph = Graph([Job("slow", ["s/{n}"], slow, retry=RetryPolicy(backoff_ms=0))])
    want(log, "w", "s/1")
    a = orchestrators(graph, heartbeat_interval_s=60)  # its one heartbeat is the queued -> running one
    while not started.is_set():
        a.step()
        started.wait(0.01)
    (a_run,) = runs
    b = orchestrators(graph, heartbeat_timeout_s=0.3)
    assert b.run_until_idle(timeout_s=10)
    state = verified(b)

    instance = canonical(state, "s/1")
    assert instance.state == I.LIVE and state.wants["w"].state == W.SUCCESSFUL
    assert instance.attempts == (a_run, runs[1])
    assert instance.built_by == runs[1] and read(instance.location) == 2
    stale = state.job_runs[a_run]
    assert (stale.state, stale.error_class) == (R.FAILED, "retryable")
    assert stale.error_message is not None and "no heartbeat for" in stale.error_message

    # A's run finally returns: its late outcome is rejected, the rebuilt instance stands.
    gate.set()
    a.close()
    b.catch_up()
    assert [r.reason for r in b.state.rejections if r.event_type == "job_run_success"] == [
        f"job run {a_run!r} is already failed"
    ]
    assert canonical(b.state, "s/1").built_by == runs[1]


def test_run_buffered_by_nobody_is_failed_as_stale_and_rebuilt(
    orchestrators: OrchestratorFactory, log: EventLog
) -> None:
    """A JobRunBuffer left in the log by a process that died before running it."""
    seq = want(log, "w", "s/1")
    long_ago = wall_clock_ms() - 60_000
    orphan = pb.JobRunBuffer(job_run_id="dead-1", job_label="slow", instance_uuids=[instance_uuid(seq, "s/1")])
    append(log, orphan, timestamp_ms=long_ago)

    graph = Graph(
        [Job("slow", ["s/{n}"], lambda ctx: write(ctx.outputs[0].location, 1), retry=RetryPolicy(backoff_ms=0))]
    )
    o = orchestrators(graph, heartbeat_timeout_s=5)
    assert o.run_until_idle(timeout_s=10)
    state = verified(o)
    instance = canonical(state, "s/1")
    assert instance.state == I.LIVE
    assert instance.attempts[0] == "dead-1" and len(instance.attempts) == 2
    assert state.job_runs["dead-1"].state == R.FAILED
    assert state.job_runs["dead-1"].error_message.startswith("no heartbeat for 6")  # type: ignore[union-attr]


# ----------------------------------------------------------------- several orchestrators, concurrency


def _two_week_pipeline(pipeline: Pipeline, log: EventLog) -> list[str]:
    weeks = [WEEK, IsoWeek(2026, 3)]
    for week in weeks:
        for day in week.days():
            pipeline.add_raw(day, 1)
    want(log, "w", *(f"weekly/week={week}" for week in weeks))
    return [f"weekly/week={week}" for week in weeks]


def _assert_built_once(state: BuildState, pipeline: Pipeline) -> None:
    """Every instance ran in exactly one attempt, which succeeded; no job function ran twice for a ref."""
    built = [i for i in state.instances.values() if i.attempts]
    assert len(built) == 16
    for instance in built:
        (run_id,) = instance.attempts
        assert state.job_runs[run_id].state == R.SUCCEEDED
    calls = Counter(ref for _, _, ref in pipeline.calls)
    assert set(calls.values()) == {1} and len(calls) == 16
    assert {w.state for w in state.wants.values()} == {W.SUCCESSFUL}


def test_two_orchestrators_stepping_alternately_run_each_instance_once(
    orchestrators: OrchestratorFactory, log: EventLog, pipeline: Pipeline
) -> None:
    _two_week_pipeline(pipeline, log)
    a, b = orchestrators(pipeline.graph), orchestrators(pipeline.graph)
    deadline = time.monotonic() + 20
    while not (a.is_idle() and b.is_idle()):
        assert time.monotonic() < deadline, "not idle in time"
        busy = a.step()
        busy = b.step() or busy
        if not busy:
            time.sleep(0.01)
    _assert_built_once(verified(a), pipeline)
    assert state_digest(verified(b)) == state_digest(a.state)


def test_decision_on_a_stale_head_conflicts_and_is_not_appended(
    orchestrators: OrchestratorFactory, log: EventLog, pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch
) -> None:
    """B decides on the head A has just moved past: same ids, but the append conflicts and B runs nothing."""
    _two_week_pipeline(pipeline, log)
    a, b = orchestrators(pipeline.graph), orchestrators(pipeline.graph)
    assert a.state.head_seq == b.state.head_seq
    assert a.step()  # appends the first decision
    head = log.head()
    assert head > b.state.head_seq
    conflicts: list[AppendConflict] = []
    real_append = b.log.append

    def watched_append(events: list[pb.Event], **kwargs: Any) -> object:
        try:
            return real_append(events, **kwargs)
        except AppendConflict as exc:
            conflicts.append(exc)
            raise

    monkeypatch.setattr(b.log, "append", watched_append)
    monkeypatch.setattr(b, "catch_up", lambda: 0)  # B does not see A's events before deciding
    assert b.step()  # busy: the append conflicted, so it will decide again
    assert [(c.expected_head, c.actual_head >= head) for c in conflicts] == [(b.state.head_seq, True)]
    assert b.executor.running_ids() == []
    monkeypatch.undo()
    deadline = time.monotonic() + 20
    while not (a.is_idle() and b.is_idle()):
        assert time.monotonic() < deadline, "not idle in time"
        if not (a.step() | b.step()):
            time.sleep(0.01)
    _assert_built_once(verified(a), pipeline)


def test_two_orchestrators_in_threads_run_each_instance_once(
    orchestrators: OrchestratorFactory, log: EventLog, pipeline: Pipeline
) -> None:
    _two_week_pipeline(pipeline, log)
    a, b = orchestrators(pipeline.graph), orchestrators(pipeline.graph)
    results: dict[str, bool] = {}
    threads = [
        threading.Thread(target=lambda o=o, name=name: results.__setitem__(name, o.run_until_idle(timeout_s=20)))
        for name, o in (("a", a), ("b", b))
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results == {"a": True, "b": True}
    _assert_built_once(verified(a), pipeline)


@pytest.mark.parametrize("limit", [1, 2])
def test_max_concurrency_bounds_active_runs(orchestrators: OrchestratorFactory, log: EventLog, limit: int) -> None:
    lock = threading.Lock()
    executing = [0, 0]  # now, most at once

    def slow(ctx: JobContext) -> None:
        with lock:
            executing[0] += 1
            executing[1] = max(executing)
        time.sleep(0.05)
        with lock:
            executing[0] -= 1

    graph = Graph([Job("slow", ["s/{n}"], slow, max_concurrency=limit)])
    want(log, "w", *(f"s/{n}" for n in range(5)))
    o = orchestrators(graph, max_workers=8)
    samples: list[int] = []
    deadline = time.monotonic() + 15
    while not o.is_idle():
        assert time.monotonic() < deadline
        if not o.step():
            time.sleep(0.005)
        samples.append(len(o.state.active_run_ids))
    state = verified(o)
    assert {w.state for w in state.wants.values()} == {W.SUCCESSFUL}
    assert max(samples) == limit and executing[1] == limit
    # At no point of the log were more than `limit` runs queued or running.
    replayed, most = BuildState(strict=True), 0
    for seq, payload in log.iter_payloads():
        replayed.apply_payload(seq, payload)
        most = max(most, len(replayed.active_run_ids))
    assert most == limit
    assert len(state.job_runs) == 5


# ----------------------------------------------------------------- known bugs (minimal reproductions)


def test_missing_inputs_naming_live_refs_does_not_loop(sqlite_url: str, tmp_path: Path) -> None:
    def report(ctx: JobContext) -> None:
        ctx.input("dim/1")  # Live, but not a declared input: MissingInputs(["dim/1"])

    graph = Graph([Job("report", ["report/{n}"], report), Job("dim", ["dim/{n}"], lambda ctx: None)])
    with Database.open(sqlite_url) as handle_db:
        handle = handle_db.log
        want(handle, "d", "dim/1")
        want(handle, "w", "report/1")
        o = Orchestrator(handle_db, graph, warehouse=str(tmp_path), source_check_interval_s=0, poll_interval_s=0.01)
        try:
            assert o.run_until_idle(timeout_s=20)
        finally:
            o.close()
        runs = [r for r in o.state.job_runs.values() if r.job_label == "report"]
        # At most: a dep miss while dim/1 was being built, then the run that read it.
        assert len(runs) <= 2, f"{len(runs)} runs of report/1"
        assert o.state.wants["w"].state == W.SUCCESSFUL


def test_input_becoming_live_between_lookup_and_raise_is_a_dep_miss(sqlite_url: str, tmp_path: Path) -> None:
    """A ref the job found absent is a real dep miss even if it turned Live before the executor looked."""
    looked_up = threading.Event()

    def report(ctx: JobContext) -> None:
        try:
            ctx.input("dim/1")
        except MissingInputs:
            looked_up.set()  # now let dim/1 be built, and raise only once it is Live
            deadline = time.monotonic() + 10
            while ctx.resolve is not None and ctx.resolve("dim/1") is None:
                assert time.monotonic() < deadline, "dim/1 never became Live"
                time.sleep(0.01)
            raise

    def dim(ctx: JobContext) -> None:
        assert looked_up.wait(10), "report/1 never looked dim/1 up"

    graph = Graph([Job("report", ["report/{n}"], report), Job("dim", ["dim/{n}"], dim)])
    with Database.open(sqlite_url) as handle_db:
        handle = handle_db.log
        want(handle, "d", "dim/1")
        want(handle, "w", "report/1")
        o = Orchestrator(handle_db, graph, warehouse=str(tmp_path), source_check_interval_s=0, poll_interval_s=0.01)
        try:
            assert o.run_until_idle(timeout_s=20)
        finally:
            o.close()
        runs = sorted((r for r in o.state.job_runs.values() if r.job_label == "report"), key=lambda r: r.created_seq)
        assert [r.state for r in runs] == [R.DEP_MISS, R.SUCCEEDED]
        assert runs[0].missing_refs == ("dim/1",)
        assert o.state.wants["w"].state == W.SUCCESSFUL


def test_fresh_instance_batched_with_a_retried_one_keeps_its_retries(sqlite_url: str, tmp_path: Path) -> None:
    def job(ctx: JobContext) -> None:
        if any(target.ref == "b/A" for target in ctx.outputs):
            raise RuntimeError("A is broken")

    graph = Graph([Job("b", ["b/{n}"], job, batch_size=2, retry=RetryPolicy(max_attempts=3, backoff_ms=0))])
    with Database.open(sqlite_url) as handle_db:
        handle = handle_db.log
        a = instance_uuid(want(handle, "wa", "b/A"), "b/A")
        for run_id in ("r1", "r2"):  # b/A has failed twice already
            append(handle, pb.JobRunBuffer(job_run_id=run_id, job_label="b", instance_uuids=[a]))
            append(handle, pb.JobRunFailure(job_run_id=run_id, error_class=pb.ERROR_CLASS_RETRYABLE))
        want(handle, "wb", "b/B")
        o = Orchestrator(handle_db, graph, warehouse=str(tmp_path), source_check_interval_s=0, poll_interval_s=0.01)
        try:
            assert o.run_until_idle(timeout_s=5)
        finally:
            o.close()
        assert o.state.wants["wa"].state == W.FAILED
        b = canonical(o.state, "b/B")
        assert b.state == I.LIVE, f"b/B is {b.state.name} after attempts {b.attempts}"
