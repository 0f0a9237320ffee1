"""Pure scheduling decisions: `decide`, `stale_runs`, `plan_run`, over one test graph (graph declarations
themselves: tests/orchestrator/test_graph.py).

Every decision test builds a strict BuildState with `foldkit.Story`, calls the
decision function, applies the returned events to the state and asserts on the
resulting state (instances, wants, job runs), not only on the event list.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any

import pytest

from partbuild.examples.clicks.isoweek import IsoWeek  # registers the isoweek field type
from partbuild.orchestrator.context import JobContext
from partbuild.orchestrator.decide import (
    Decision,
    decide,
    instance_location,
    plan_run,
    retry_due_ms,
    stale_runs,
)
from partbuild.orchestrator.graph import (
    Graph,
    GraphError,
    Job,
    Partition,
    RetryPolicy,
    SourceDataset,
)
from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.fold.build_state import BuildState
from partbuild.state.fold.records import InstanceState as I
from partbuild.state.fold.records import JobRunState as R
from partbuild.state.fold.records import WantState as W

from foldkit import Story

WEEK = IsoWeek(2026, 2)  # Monday 2026-01-05 .. Sunday 2026-01-11
DAYS = WEEK.days()
WEEKLY = f"weekly/week={WEEK}"
WAREHOUSE = "/wh"


def daily(day: dt.date) -> str:
    return f"daily/date={day.isoformat()}"


def raw(day: dt.date) -> str:
    return f"raw/date={day.isoformat()}"


def noop(_: JobContext) -> None:
    """A job body: decisions never run it."""


def make_graph(
    *,
    daily_batch: int = 3,
    daily_concurrency: int = 2,
    retry: RetryPolicy | None = None,
) -> Graph:
    """raw (source) -> daily (batched) -> weekly, plus `pair` (two dailies) and `extra` (no inputs)."""
    return Graph(
        [
            Job(
                "daily",
                ["daily/date={date:date}"],
                noop,
                inputs=lambda p: [raw(p["date"])],
                batch_size=daily_batch,
                max_concurrency=daily_concurrency,
                retry=retry or RetryPolicy(),
            ),
            Job(
                "weekly",
                ["weekly/week={week:isoweek}"],
                noop,
                inputs=lambda p: [daily(day) for day in p["week"].days()],
            ),
            Job(
                "pair",
                ["pair/date={date:date}"],
                noop,
                inputs=lambda p: [daily(p["date"]), daily(p["date"] + dt.timedelta(days=1))],
            ),
            Job("extra", ["extra/{name}"], noop, max_concurrency=4),
        ],
        [SourceDataset("raw", "raw/date={date:date}", locate=lambda p: f"/data/{p.ref}")],
    )


# ----------------------------------------------------------------- helpers


def step(story: Story, graph: Graph, advance_ms: int = 1_000) -> Decision:
    """Decide at the story's clock + `advance_ms`, then apply every returned event (all must be accepted)."""
    now = story.clock_ms + advance_ms
    decision = decide(story.state, graph, now)
    for event in decision.events:
        story.events.append(event)
        reason = story.state.apply(len(story.events), event)
        assert reason is None, f"decision event {event.WhichOneof('payload')} rejected: {reason}"
    story.clock_ms = now
    return decision


def payloads(decision: Decision | Sequence[pb.Event], kind: str) -> list[Any]:
    """The payloads of one type among a decision's events."""
    events = decision.events if isinstance(decision, Decision) else decision
    return [getattr(event, kind) for event in events if event.WhichOneof("payload") == kind]


def succeed(story: Story, run_id: str, warehouse: str = WAREHOUSE) -> None:
    """Record a JobRunSuccess for `run_id` with instance-specific locations (as the executor does)."""
    run = story.state.job_runs[run_id]
    outputs = []
    for uuid in run.instance_uuids:
        ref = story.state.instances[uuid].ref
        outputs.append(pb.OutputResult(instance_uuid=uuid, location=instance_location(warehouse, ref, uuid)))
    story.ok(pb.JobRunSuccess(job_run_id=run_id, outputs=outputs))


def observe_raw(story: Story, days: Sequence[dt.date]) -> None:
    for day in days:
        story.observe(raw(day))


def refs_of(story: Story, run_id: str) -> list[str]:
    return [story.state.instances[uuid].ref for uuid in story.state.job_runs[run_id].instance_uuids]


# ----------------------------------------------------------------- batching and concurrency


def test_runs_are_batched_per_job_within_max_concurrency() -> None:
    """10 ready dailies, batch 3, concurrency 2: two runs now, the rest as runs finish."""
    graph = make_graph(daily_batch=3, daily_concurrency=2)
    days = [DAYS[0] + dt.timedelta(days=n) for n in range(10)]
    s = Story()
    observe_raw(s, days)
    s.want("w", *[daily(day) for day in days])

    head = s.state.head_seq
    first = step(s, graph)
    assert first.new_runs == [f"daily-{head}-0", f"daily-{head}-1"]
    buffers = payloads(first, "job_run_buffer")
    assert [len(b.instance_uuids) for b in buffers] == [3, 3]
    assert {b.job_label for b in buffers} == {"daily"}
    assert refs_of(s, first.new_runs[0]) == [daily(day) for day in days[:3]]
    assert refs_of(s, first.new_runs[1]) == [daily(day) for day in days[3:6]]
    assert [s.istate(daily(day)) for day in days] == [I.BUILDING] * 6 + [I.MISSING] * 4
    assert s.wstate("w") == W.BUILDING
    assert list(s.state.active_run_ids) == first.new_runs

    # No room: nothing more until a run finishes.
    assert step(s, graph).events == []
    assert [s.istate(daily(day)) for day in days[6:]] == [I.MISSING] * 4

    succeed(s, first.new_runs[0])
    second = step(s, graph)
    assert len(second.new_runs) == 1
    assert refs_of(s, second.new_runs[0]) == [daily(day) for day in days[6:9]]
    assert s.istate(daily(days[9])) == I.MISSING

    succeed(s, first.new_runs[1])
    succeed(s, second.new_runs[0])
    third = step(s, graph)
    assert [refs_of(s, run_id) for run_id in third.new_runs] == [[daily(days[9])]]
    succeed(s, third.new_runs[0])
    assert s.wstate("w") == W.SUCCESSFUL
    assert step(s, graph).events == []


def test_concurrency_counts_only_the_same_jobs_active_runs() -> None:
    """An active run of another job leaves this job's room untouched; its own active runs reduce it."""
    graph = make_graph(daily_batch=1, daily_concurrency=2)
    s = Story()
    observe_raw(s, DAYS[:4])
    s.want("x", "extra/a")
    (extra_run,) = step(s, graph).new_runs
    assert extra_run.startswith("extra-")
    s.want("w", *[daily(day) for day in DAYS[:4]])
    runs = step(s, graph).new_runs
    assert [refs_of(s, run_id) for run_id in runs] == [[daily(DAYS[0])], [daily(DAYS[1])]]
    s.ok(pb.JobRunHeartbeat(job_run_id=runs[0]))  # running counts as active too
    assert s.state.job_runs[runs[0]].state == R.RUNNING
    assert step(s, graph).events == []


def test_many_wants_for_one_ref_share_one_instance_and_one_run() -> None:
    graph = make_graph()
    s = Story()
    observe_raw(s, DAYS[:2])
    ref = daily(DAYS[0])
    s.want("w1", ref)
    s.want("w2", ref)
    s.want("w3", ref, daily(DAYS[1]))
    uuid = s.uuid(ref)

    decision = step(s, graph)
    (buffer,) = payloads(decision, "job_run_buffer")
    assert list(buffer.instance_uuids) == [uuid, s.uuid(daily(DAYS[1]))]
    assert s.uuid(ref) == uuid  # no new instance
    assert s.instance(ref).attempts == (buffer.job_run_id,)
    assert {s.wstate(w) for w in ("w1", "w2", "w3")} == {W.BUILDING}
    assert step(s, graph).events == []  # nothing buffered twice

    succeed(s, buffer.job_run_id)
    assert {s.wstate(w) for w in ("w1", "w2", "w3")} == {W.SUCCESSFUL}
    assert s.state.wants["w1"].satisfied_by == (uuid,)


# ----------------------------------------------------------------- missing inputs


def test_missing_inputs_wait_and_get_one_derivative_want_per_parent() -> None:
    """Weekly -> 7 dailies wanted -> 7 raw wanted -> source checks; links, timestamp and TTL inherited."""
    graph = make_graph(daily_batch=7, daily_concurrency=1)
    s = Story()
    s.want("w", WEEKLY, data_timestamp_ms=900_000, ttl_seconds=86_400, sla_seconds=3_600)
    weekly_uuid = s.uuid(WEEKLY)

    head = s.state.head_seq
    first = step(s, graph)
    assert [e.WhichOneof("payload") for e in first.events] == ["instances_wait_upstream", "want_create"]
    (wait,) = payloads(first, "instances_wait_upstream")
    (wait_entry,) = wait.waits
    assert wait_entry.instance_uuid == weekly_uuid
    assert list(wait_entry.upstream_refs) == [daily(day) for day in DAYS]
    assert first.events[1].source.system.component == "orchestrator"

    derived_id = f"derived-{head}-0"
    derived = s.state.wants[derived_id]
    assert derived.refs == tuple(daily(day) for day in DAYS)
    assert (derived.parent_want_id, derived.root_want_id) == ("w", "w")
    assert (derived.data_timestamp_ms, derived.ttl_seconds, derived.sla_seconds) == (900_000, 86_400, 3_600)
    assert derived.source == "system:orchestrator"
    assert derived.comment == "upstream of want w"
    assert s.state.wants["w"].children == [derived_id]
    assert s.istate(WEEKLY) == I.UPSTREAM_BUILDING
    assert list(s.instance(WEEKLY).waiting_on or ()) == [daily(day) for day in DAYS]
    assert s.wstate("w") == W.UPSTREAM_BUILDING
    assert s.wstate(derived_id) == W.IDLE

    head = s.state.head_seq
    second = step(s, graph)
    (wait,) = payloads(second, "instances_wait_upstream")
    assert [w.instance_uuid for w in wait.waits] == [s.uuid(daily(day)) for day in DAYS]
    (raw_want,) = payloads(second, "want_create")
    assert raw_want.want_id == f"derived-{head}-0"
    grand = s.state.wants[raw_want.want_id]
    assert grand.refs == tuple(raw(day) for day in DAYS)
    assert (grand.parent_want_id, grand.root_want_id) == (derived_id, "w")
    assert grand.ttl_seconds == 86_400 and grand.data_timestamp_ms == 900_000
    assert {s.istate(daily(day)) for day in DAYS} == {I.UPSTREAM_BUILDING}
    assert s.wstate(derived_id) == W.UPSTREAM_BUILDING

    # Source refs are looked for, never run; deciding again appends nothing.
    third = step(s, graph)
    assert third.events == []
    assert [check.ref for check in third.source_checks] == [raw(day) for day in DAYS]

    observe_raw(s, DAYS)
    assert {s.istate(daily(day)) for day in DAYS} == {I.MISSING}
    fourth = step(s, graph)
    (run_id,) = fourth.new_runs
    assert refs_of(s, run_id) == [daily(day) for day in DAYS]
    succeed(s, run_id)
    assert s.wstate(derived_id) == W.SUCCESSFUL
    assert s.istate(WEEKLY) == I.MISSING
    (weekly_run,) = step(s, graph).new_runs
    assert refs_of(s, weekly_run) == [WEEKLY]


def test_an_upstream_wanted_by_two_parents_is_wanted_once() -> None:
    """pair/05 needs daily 05+06, pair/06 needs 06+07: 06 goes into the first parent's want only."""
    graph = make_graph()
    s = Story()
    s.want("a", "pair/date=2026-01-05")
    s.want("b", "pair/date=2026-01-06")
    head = s.state.head_seq
    decision = step(s, graph)
    wants = payloads(decision, "want_create")
    assert [(w.want_id, w.parent_want_id, list(w.partition_refs)) for w in wants] == [
        (f"derived-{head}-0", "a", [daily(DAYS[0]), daily(DAYS[1])]),
        (f"derived-{head}-1", "b", [daily(DAYS[2])]),
    ]
    # Both pairs wait for everything they miss, whoever wants it.
    (wait,) = payloads(decision, "instances_wait_upstream")
    assert [list(w.upstream_refs) for w in wait.waits] == [
        [daily(DAYS[0]), daily(DAYS[1])],
        [daily(DAYS[1]), daily(DAYS[2])],
    ]
    assert [len(s.state.wants_by_ref[daily(day)]) for day in DAYS[:3]] == [1, 1, 1]


def test_upstream_already_building_or_wanted_gets_no_second_want() -> None:
    graph = make_graph(daily_batch=1, daily_concurrency=1)
    s = Story()
    observe_raw(s, DAYS[:1])
    # daily 05 is Building for a want that was then canceled (the run goes on without a want).
    s.want("early", daily(DAYS[0]))
    (building_run,) = step(s, graph).new_runs
    s.ok(pb.WantCancel(want_id="early"))
    assert s.istate(daily(DAYS[0])) == I.BUILDING
    assert not list(s.state.active_wants_for_ref(daily(DAYS[0])))
    # daily 06 is wanted by an active want (Idle: its raw input is missing and wanted).
    s.want("other", daily(DAYS[1]))
    step(s, graph)
    assert s.wstate("other") == W.UPSTREAM_BUILDING

    s.want("w", WEEKLY)
    decision = step(s, graph)
    (weekly_want,) = [w for w in payloads(decision, "want_create") if w.parent_want_id == "w"]
    assert list(weekly_want.partition_refs) == [daily(day) for day in DAYS[2:]]
    # The weekly still waits for all seven, including the ones others take care of.
    assert list(s.instance(WEEKLY).waiting_on or ()) == [daily(day) for day in DAYS]
    assert [len(s.state.wants_by_ref[daily(day)]) for day in DAYS[:2]] == [1, 1]
    assert s.state.job_runs[building_run].state == R.QUEUED


def test_dep_miss_at_run_time_gets_a_derivative_want_from_the_job_run() -> None:
    graph = make_graph(daily_batch=1)
    s = Story()
    observe_raw(s, DAYS[:1])
    ref = daily(DAYS[0])
    s.want("w", ref)
    (run_id,) = step(s, graph).new_runs
    s.missing(run_id, "extra/lookup")
    assert s.istate(ref) == I.UPSTREAM_BUILDING
    assert s.state.waiting_for("extra/lookup") == [s.uuid(ref)]

    head = s.state.head_seq
    decision = step(s, graph)
    assert payloads(decision, "instances_wait_upstream") == []  # the fold already made it wait
    (event,) = [e for e in decision.events if e.WhichOneof("payload") == "want_create"]
    assert event.source.job_run.job_run_id == run_id
    derived = s.state.wants[f"derived-{head}-0"]
    assert derived.refs == ("extra/lookup",)
    assert derived.source == f"job_run:{run_id}"
    assert (derived.parent_want_id, derived.root_want_id) == ("w", "w")

    (extra_run,) = step(s, graph).new_runs
    assert refs_of(s, extra_run) == ["extra/lookup"]
    assert step(s, graph).events == []  # the lookup is Building: no second want
    succeed(s, extra_run)
    assert s.istate(ref) == I.MISSING
    (retry_run,) = step(s, graph).new_runs
    assert retry_run != run_id
    assert s.instance(ref).attempts == (run_id, retry_run)


# ----------------------------------------------------------------- refs the graph cannot place


def test_ref_nobody_produces_cancels_its_wants_with_the_graph_error() -> None:
    graph = make_graph()
    s = Story()
    s.want("a", "nope/1")
    s.want("b", "nope/1", "nope/2")
    decision = step(s, graph)
    cancels = payloads(decision, "want_cancel")
    reason = "no job or source dataset produces 'nope/1'"
    assert [(c.want_id, c.reason) for c in cancels] == [("a", reason), ("b", reason)]
    assert (s.wstate("a"), s.wstate("b")) == (W.CANCELED, W.CANCELED)
    assert s.state.wants["a"].cancel_reason == reason
    assert decision.new_runs == [] and decision.source_checks == []
    assert s.state.active_refs() == []
    assert step(s, graph).events == []


def test_ref_claimed_by_two_producers_is_reported() -> None:
    """`x/{n:int}` and the literal `x/1` have different shapes, so the graph loads; `x/1` is ambiguous."""
    graph = Graph([Job("a", ["x/{n:int}"], noop), Job("b", ["x/1"], noop)])
    assert graph.resolve("x/2").producer.label == "a"  # type: ignore[union-attr]
    with pytest.raises(GraphError, match="'x/1' is claimed by job 'a' and job 'b'"):
        graph.resolve("x/1")
    s = Story()
    s.want("w", "x/1")
    decision = step(s, graph)
    assert [c.reason for c in payloads(decision, "want_cancel")] == ["'x/1' is claimed by job 'a' and job 'b'"]
    assert s.wstate("w") == W.CANCELED
    assert s.istate("x/1") == I.MISSING
    assert decision.new_runs == []


def test_input_nobody_produces_ends_the_parent_instead_of_looping() -> None:
    graph = Graph([Job("w", ["w/{n}"], noop, inputs=lambda p: ["nothing/x"])])
    s = Story()
    s.want("p", "w/1")
    for _ in range(10):
        if not step(s, graph).events:
            break
    assert decide(s.state, graph, s.clock_ms + 1_000).events == []  # a fixed point
    assert s.wstate("p") in (W.CANCELED, W.FAILED, W.UPSTREAM_FAILED)


# ----------------------------------------------------------------- source data


def test_wanted_source_ref_is_a_source_check_not_a_run() -> None:
    graph = make_graph()
    s = Story()
    s.want("w", raw(DAYS[0]), "extra/a")
    decision = step(s, graph)
    (check,) = decision.source_checks
    assert check.ref == raw(DAYS[0])
    assert check.source is graph.sources["raw"]
    assert check.partition == Partition(raw(DAYS[0]), {"date": DAYS[0]})
    assert [refs_of(s, run_id) for run_id in decision.new_runs] == [["extra/a"]]
    assert s.istate(raw(DAYS[0])) == I.MISSING

    s.observe(raw(DAYS[0]))
    assert step(s, graph).source_checks == []


# ----------------------------------------------------------------- retries


def test_retry_waits_for_the_policy_backoff() -> None:
    graph = make_graph(daily_batch=1, retry=RetryPolicy(max_attempts=5, backoff_ms=10_000, multiplier=3))
    s = Story()
    observe_raw(s, DAYS[:1])
    ref = daily(DAYS[0])
    s.want("w", ref)
    (first,) = step(s, graph).new_runs
    s.fail(first, permanent=False)
    failed_at = s.clock_ms
    assert s.istate(ref) == I.UP_FOR_RETRY
    job = graph.jobs["daily"]
    assert retry_due_ms(s.state, s.instance(ref), job) == failed_at + 10_000

    early = step(s, graph, advance_ms=9_999)
    assert early.events == [] and early.new_runs == []
    assert early.next_retry_ms == failed_at + 10_000
    assert s.istate(ref) == I.UP_FOR_RETRY

    (second,) = step(s, graph, advance_ms=1).new_runs  # exactly at the due time
    assert s.istate(ref) == I.BUILDING
    s.fail(second, permanent=False)
    assert decide(s.state, graph, s.clock_ms).next_retry_ms == s.clock_ms + 30_000  # 10 s * 3
    assert step(s, graph, advance_ms=29_999).new_runs == []
    assert len(step(s, graph, advance_ms=1).new_runs) == 1
    assert len(s.instance(ref).attempts) == 3


def test_retry_after_from_the_failure_overrides_a_shorter_backoff() -> None:
    graph = make_graph(daily_batch=1, retry=RetryPolicy(backoff_ms=1_000))
    s = Story()
    observe_raw(s, DAYS[:1])
    ref = daily(DAYS[0])
    s.want("w", ref)
    (run_id,) = step(s, graph).new_runs
    s.ok(pb.JobRunFailure(job_run_id=run_id, error_class=pb.ERROR_CLASS_RETRYABLE, retry_after_ms=60_000))
    failed_at = s.clock_ms
    decision = step(s, graph, advance_ms=30_000)
    assert decision.new_runs == [] and decision.next_retry_ms == failed_at + 60_000
    assert len(step(s, graph, advance_ms=30_000).new_runs) == 1


def test_next_retry_is_the_earliest_of_several() -> None:
    graph = make_graph(daily_batch=1, daily_concurrency=2, retry=RetryPolicy(backoff_ms=50_000))
    s = Story()
    observe_raw(s, DAYS[:2])
    s.want("w", daily(DAYS[0]), daily(DAYS[1]))
    first, second = step(s, graph).new_runs
    s.fail(first, permanent=False)
    due_first = s.clock_ms + 50_000
    s.fail(second, permanent=False)
    assert step(s, graph).next_retry_ms == due_first


# ----------------------------------------------------------------- determinism


def _without_ids(events: Sequence[pb.Event]) -> list[bytes]:
    """Events as bytes with the random event_id cleared."""
    stripped = []
    for event in events:
        copy = pb.Event()
        copy.CopyFrom(event)
        copy.event_id = ""
        stripped.append(copy.SerializeToString(deterministic=True))
    return stripped


def _mixed_story() -> Story:
    """Wants that need runs, waits, derivative wants and a cancel, all in one decision."""
    s = Story()
    observe_raw(s, DAYS[:4])
    s.want("runs", *[daily(day) for day in DAYS[:4]])
    s.want("weekly", WEEKLY)
    s.want("nobody", "nope/1")
    return s


def test_same_state_gives_the_same_decision() -> None:
    graph = make_graph()
    one, two = _mixed_story(), _mixed_story()
    head = one.state.head_seq
    now = one.clock_ms + 1_000
    first = decide(one.state, graph, now)
    assert _without_ids(first.events) == _without_ids(decide(one.state, graph, now).events)
    assert _without_ids(first.events) == _without_ids(decide(two.state, graph, now).events)
    assert first.new_runs == [f"daily-{head}-0", f"daily-{head}-1"]
    assert [w.want_id for w in payloads(first, "want_create")] == [f"derived-{head}-0"]
    assert {e.WhichOneof("payload") for e in first.events} == {
        "want_cancel",
        "instances_wait_upstream",
        "want_create",
        "job_run_buffer",
    }


def test_applying_a_decision_twice_rejects_the_second_copy() -> None:
    """Two orchestrators deciding on the same head: the fold accepts the first copy only."""
    graph = make_graph()
    s = _mixed_story()
    decision = decide(s.state, graph, s.clock_ms + 1_000)
    for event in decision.events:
        s.events.append(event)
        assert s.state.apply(len(s.events), event) is None
    entities, counts = _entities(s.state), s.state.counts()
    rejected_before = len(s.state.rejections)

    reasons = []
    for event in decision.events:
        s.events.append(event)
        reasons.append(s.state.apply(len(s.events), event))
    assert all(reasons), reasons
    joined = "\n".join(r or "" for r in reasons)
    assert "already exists" in joined  # job runs and derivative wants
    assert "only a schedulable one can wait" in joined
    assert "already canceled" in joined
    assert len(s.state.rejections) == rejected_before + len(decision.events)
    assert _entities(s.state) == entities and s.state.counts() == counts


def _entities(state: BuildState) -> str:
    """Every instance, want, job run and canonical pointer, as text (rejections and head left out)."""
    tables = (state.instances, state.wants, state.job_runs)
    return repr(
        [sorted((k, repr(v)) for k, v in table.items()) for table in tables] + [sorted(state.canonical.items())]
    )


# ----------------------------------------------------------------- stale runs


def test_stale_run_gets_a_retryable_failure_then_a_permanent_one() -> None:
    graph = make_graph(daily_batch=1, retry=RetryPolicy(max_attempts=2, backoff_ms=0))
    s = Story()
    observe_raw(s, DAYS[:1])
    ref = daily(DAYS[0])
    s.want("w", ref)
    (run_id,) = step(s, graph).new_runs
    created = s.clock_ms
    s.ok(pb.JobRunHeartbeat(job_run_id=run_id), advance_ms=5_000)
    beat = s.clock_ms
    assert beat == created + 5_000

    assert stale_runs(s.state, graph, beat + 30_000, 30_000, alive=[]) == []  # not older than the timeout
    assert stale_runs(s.state, graph, beat + 60_000, 30_000, alive=[run_id]) == []  # ours and alive
    (event,) = stale_runs(s.state, graph, beat + 30_001, 30_000, alive=["someone-else"])
    failure = event.job_run_failure
    assert failure.job_run_id == run_id
    assert failure.error_class == pb.ERROR_CLASS_RETRYABLE
    assert failure.message == "no heartbeat for 30.0 s: the process running it is gone"
    assert event.source.system.component == "orchestrator"
    assert event.timestamp_ms == beat + 30_001

    s.events.append(event)
    assert s.state.apply(len(s.events), event) is None
    s.clock_ms = event.timestamp_ms
    assert s.istate(ref) == I.UP_FOR_RETRY
    assert s.state.job_runs[run_id].error_class == "retryable"
    assert s.wstate("w") == W.IDLE

    (retry_run,) = step(s, graph).new_runs
    (event,) = stale_runs(s.state, graph, s.clock_ms + 30_001, 30_000, alive=[])  # never heartbeated
    assert event.job_run_failure.job_run_id == retry_run
    assert event.job_run_failure.error_class == pb.ERROR_CLASS_PERMANENT  # 2 of 2 attempts
    s.events.append(event)
    assert s.state.apply(len(s.events), event) is None
    assert s.istate(ref) == I.FAILED
    assert s.wstate("w") == W.FAILED
    assert stale_runs(s.state, graph, s.clock_ms + 10**9, 30_000, alive=[]) == []


def test_stale_run_of_an_unknown_job_fails_permanently() -> None:
    s = Story()
    s.want("w", "gone/1")
    s.buffer("gone-1", "gone/1", label="removed_job")
    (event,) = stale_runs(s.state, make_graph(), s.clock_ms + 2, 1, alive=[])
    assert event.job_run_failure.error_class == pb.ERROR_CLASS_PERMANENT


def test_a_worker_with_a_bucket_fails_only_stale_runs_of_its_own_bucket() -> None:
    """Another bucket's owner may just be slow: only it (or its successor) fails its runs."""
    from partbuild.orchestrator.buckets import StaticBucket
    from partbuild.state.rules.bucketing import bucket

    s = Story()
    s.want("w", "gone/1")
    s.buffer("gone-1", "gone/1", label="removed_job")
    own = bucket("partbuild", "gone/1", 4)
    other = own % 4 + 1
    assert stale_runs(s.state, make_graph(), s.clock_ms + 2, 1, alive=[], ownership=StaticBucket(other, 4)) == []
    (event,) = stale_runs(s.state, make_graph(), s.clock_ms + 2, 1, alive=[], ownership=StaticBucket(own, 4))
    assert event.job_run_failure.job_run_id == "gone-1"


# ----------------------------------------------------------------- plan_run


def test_plan_run_resolves_targets_inputs_and_prior_failures() -> None:
    graph = make_graph(daily_batch=7, daily_concurrency=1)
    s = Story()
    observe_raw(s, DAYS)
    s.want("w", *[daily(day) for day in DAYS])
    (run_id,) = step(s, graph).new_runs

    plan = plan_run(s.state, graph, run_id, "/wh/")
    assert plan.job is graph.jobs["daily"] and plan.job_run_id == run_id
    assert [t.ref for t in plan.targets] == [daily(day) for day in DAYS]
    for target, day in zip(plan.targets, DAYS, strict=True):
        uuid = s.uuid(daily(day))
        assert target.instance_uuid == uuid
        assert target.partition["date"] == day
        assert target.location == instance_location("/wh", daily(day), uuid) == f"/wh/{daily(day)}/_instance={uuid}"
        assert plan.input_uuids[uuid] == (s.uuid(raw(day)),)
    assert plan.input_locations == {raw(day): f"/data/{raw(day)}" for day in DAYS}
    assert plan.prior_failures == 0

    # A retry: prior failures counted, and the new instance of a rebuilt ref gets a new location.
    s.fail(run_id, permanent=False)
    (retry_run,) = step(s, graph, advance_ms=10_000).new_runs
    retry_plan = plan_run(s.state, graph, retry_run, "/wh")
    assert retry_plan.prior_failures == 1
    assert [t.location for t in retry_plan.targets] == [t.location for t in plan.targets]  # same instances
    succeed(s, retry_run, "/wh")

    s.want("weekly", WEEKLY)
    (weekly_run,) = step(s, graph).new_runs
    weekly_plan = plan_run(s.state, graph, weekly_run, "/wh")
    (target,) = weekly_plan.targets
    assert weekly_plan.input_uuids[target.instance_uuid] == tuple(s.uuid(daily(day)) for day in DAYS)
    assert weekly_plan.input_locations == {
        daily(day): instance_location("/wh", daily(day), s.uuid(daily(day))) for day in DAYS
    }

    old_daily = s.uuid(daily(DAYS[0]))
    s.ok(pb.PartitionTaint(partition_ref=daily(DAYS[0]), only_this_ref=True))
    new_daily = s.uuid(daily(DAYS[0]))
    assert new_daily != old_daily
    s.want("again", daily(DAYS[0]))
    (rebuild,) = step(s, graph).new_runs
    (rebuild_target,) = plan_run(s.state, graph, rebuild, "/wh").targets
    assert rebuild_target.instance_uuid == new_daily
    assert rebuild_target.location == f"/wh/{daily(DAYS[0])}/_instance={new_daily}"
    # Checks may compare a rebuild with the ref's earlier Live instance (tainted now); a first build has none.
    assert plan_run(s.state, graph, rebuild, "/wh").previous_locations == {
        new_daily: instance_location("/wh", daily(DAYS[0]), old_daily)
    }
    assert plan.previous_locations == {}


def test_plan_run_leaves_out_inputs_that_are_not_live() -> None:
    graph = make_graph()
    s = Story()
    observe_raw(s, DAYS[:1])
    s.want("w", "pair/date=2026-01-05")
    s.buffer("pair-run", "pair/date=2026-01-05", label="pair")  # by hand, before its inputs are Live
    plan = plan_run(s.state, graph, "pair-run", WAREHOUSE)
    assert plan.input_locations == {}
    assert plan.input_uuids == {s.uuid("pair/date=2026-01-05"): ()}


# ----------------------------------------------------------------- liveness across wants


def test_second_want_survives_expiry_of_the_first_wants_upstream_chain() -> None:
    graph = make_graph(daily_batch=7, daily_concurrency=1)
    s = Story(start_ms=1_000_000)
    s.want("short", WEEKLY, data_timestamp_ms=1_000_000, ttl_seconds=60)
    for _ in range(3):
        step(s, graph)
    s.want("patient", WEEKLY)
    s.ok(pb.ClockTick(), advance_ms=120_000)
    assert s.wstate("short") == W.EXPIRED
    assert s.wstate("patient") == W.UPSTREAM_BUILDING
    decision = step(s, graph)
    # The raw refs two hops up must be looked for (or wanted) again on behalf of "patient".
    wanted = {ref for want in payloads(decision, "want_create") for ref in want.partition_refs}
    checked = {check.ref for check in decision.source_checks}
    upstream = {raw(day) for day in DAYS} | {daily(day) for day in DAYS}
    assert (wanted | checked) & upstream


# ----------------------------------------------------------------- the graph the decisions read


def test_graph_inputs_of() -> None:
    graph = make_graph()
    assert graph.inputs_of(WEEKLY) == [daily(day) for day in DAYS]
    assert graph.inputs_of(raw(DAYS[0])) == []
    with pytest.raises(GraphError, match="no job or source dataset produces"):
        graph.inputs_of("nope/1")


# ----------------------------------------------------------------- per-partition outcomes (issue 34)


def test_a_split_batch_runs_each_output_alone_even_after_a_batch_mates_failure_ended_the_want() -> None:
    """A batch of three fails as a whole and is split; the first output, run alone, fails for good and so ends
    the want naming all three. The other two are still owed their retry: each runs alone, no retry spent."""
    story = Story()
    graph = make_graph(daily_batch=3, daily_concurrency=3, retry=RetryPolicy(max_attempts=1, backoff_ms=0))
    observe_raw(story, DAYS[:3])
    story.want("w", *(daily(day) for day in DAYS[:3]))
    (batch,) = payloads(step(story, graph), "job_run_buffer")
    story.ok(pb.JobRunFailure(job_run_id=batch.job_run_id, message="one bad file", split=True))
    alone = payloads(step(story, graph), "job_run_buffer")
    assert [len(run.instance_uuids) for run in alone] == [1, 1, 1]  # each alone, none exhausted
    assert [refs_of(story, run.job_run_id) for run in alone] == [[daily(day)] for day in DAYS[:3]]
    story.ok(pb.JobRunFailure(job_run_id=alone[0].job_run_id, error_class=pb.ERROR_CLASS_PERMANENT, message="bad"))
    assert story.state.wants["w"].state == W.FAILED and not story.state.active_refs()
    for run in alone[1:]:  # still queued: they finish whatever became of the want
        succeed(story, run.job_run_id)
    assert [story.istate(daily(day)) for day in DAYS[:3]] == [I.FAILED, I.LIVE, I.LIVE]
    assert payloads(step(story, graph), "job_run_buffer") == [] and not story.state.owed_retries


def test_an_owed_retry_is_made_when_the_want_ended_before_it_was_buffered() -> None:
    story = Story()
    graph = make_graph(daily_batch=2, daily_concurrency=1, retry=RetryPolicy(max_attempts=1, backoff_ms=0))
    observe_raw(story, DAYS[:2])
    story.want("w", daily(DAYS[0]), daily(DAYS[1]))
    (batch,) = payloads(step(story, graph), "job_run_buffer")
    story.ok(pb.JobRunFailure(job_run_id=batch.job_run_id, message="boom", split=True))
    (first,) = payloads(step(story, graph), "job_run_buffer")  # concurrency 1: one at a time
    story.ok(pb.JobRunFailure(job_run_id=first.job_run_id, error_class=pb.ERROR_CLASS_PERMANENT, message="bad"))
    assert not story.state.active_refs()  # the want failed with the first day
    (owed,) = payloads(step(story, graph), "job_run_buffer")
    assert refs_of(story, owed.job_run_id) == [daily(DAYS[1])]
    succeed(story, owed.job_run_id)
    assert story.istate(daily(DAYS[1])) == I.LIVE and not story.state.owed_retries
