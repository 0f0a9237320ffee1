"""Reactions (orchestrator/reactions.py), evaluated on a real BuildState folded from events: which changes fire,
down a chain one level at a time, debounced, bounded, owned, and never twice for one cause."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from partbuild.orchestrator.context import JobContext
from partbuild.orchestrator.graph import Graph, GraphError, Job, Partition, SourceDataset, load_graph
from partbuild.orchestrator.loop import Orchestrator
from partbuild.orchestrator.reactions import (
    Change,
    ReactionError,
    changes_in,
    on_source_arrival,
    on_upstream_change,
)
from partbuild.orchestrator.reactor import Reactor, everything
from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.database import Database
from partbuild.state.fold.build_state import BuildState
from partbuild.state.fold.reactions import reaction_want_id
from partbuild.state.fold.records import InstanceState
from partbuild.state.log.events import envelope, from_job_run, manual, system
from partbuild.state.queries.staleness import built_version
from partbuild.state.rules.ids import instance_uuid

SOURCE = system("orchestrator")
T0 = 1_800_000_000_000
SECOND = 1000


def noop(ctx: JobContext) -> None:
    """Never run: the tests fold what a run would record."""


def _everything(key: str) -> bool:
    return True


def daily_inputs(p: Partition) -> list[str]:
    return [f"raw/day={p['day']}"]


def weekly_inputs(p: Partition) -> list[str]:
    return [f"daily/day={p['week']}{n}" for n in range(2)]


def graph(daily: tuple = (), weekly: tuple = ()) -> Graph:
    return Graph(
        [
            Job("daily", ["daily/day={day}"], noop, inputs=daily_inputs, reactions=daily),
            Job("weekly", ["weekly/week={week}"], noop, inputs=weekly_inputs, reactions=weekly),
        ],
        [SourceDataset("raw", "raw/day={day}", locate=lambda p: None)],
    )


class Log:
    """A BuildState and the events folded into it (each checked: applied or rejected as the test says)."""

    def __init__(self) -> None:
        self.state = BuildState(strict=True)
        self.events: list[tuple[int, pb.Event]] = []
        self.runs = 0
        self.now = T0  # the writers' clock: a change's debounce window starts at its event's time

    def add(self, payload: object, source: pb.EventSource | None = None) -> int:
        seq = self.state.head_seq + 1
        event = envelope(payload, source=source or SOURCE, timestamp_ms=self.now)  # type: ignore[arg-type]
        assert self.state.apply(seq, event) is None
        self.events.append((seq, event))
        return seq

    def since(self, seq: int) -> list[tuple[int, pb.Event]]:
        return [(s, e) for s, e in self.events if s > seq]

    def observe(self, ref: str, version: str) -> str:
        seen = pb.PartitionObserved(partition_ref=ref, location=f"/data/{ref}/{version}", version=version)
        return instance_uuid(self.add(seen, system("connector")), ref)

    def build(self, ref: str, job: str, *inputs: str) -> str:
        uuid = self.state.canonical.get(ref)
        if uuid is None:
            uuid = instance_uuid(self.add(pb.WantCreate(want_id=f"want-{ref}", partition_refs=[ref]), manual("a")), ref)
        self.runs += 1
        run = f"run-{self.runs}"
        self.add(pb.JobRunBuffer(job_run_id=run, job_label=job, instance_uuids=[uuid]))
        self.add(pb.JobRunSuccess(job_run_id=run, input_instance_uuids=list(inputs)), from_job_run(run))
        return uuid

    def fold(self, events: list[pb.Event]) -> list[str | None]:
        verdicts = []
        for event in events:
            seq = self.state.head_seq + 1
            verdicts.append(self.state.apply(seq, event))
            self.events.append((seq, event))
        return verdicts


def chain() -> tuple[Log, dict[str, str]]:
    """raw/day=a1 -> daily/day=a1 -> weekly/week=a (which also reads daily/day=a0, built from raw/day=a0)."""
    log = Log()
    uuids = {"raw0": log.observe("raw/day=a0", "v1"), "raw1": log.observe("raw/day=a1", "v1")}
    uuids["daily0"] = log.build("daily/day=a0", "daily", uuids["raw0"])
    uuids["daily1"] = log.build("daily/day=a1", "daily", uuids["raw1"])
    uuids["weekly"] = log.build("weekly/week=a", "weekly", uuids["daily0"], uuids["daily1"])
    return log, uuids


def test_a_new_source_version_wants_the_daily_then_its_new_instance_wants_the_weekly() -> None:
    log, uuids = chain()
    reactor = Reactor(graph(daily=(on_upstream_change(),), weekly=(on_upstream_change(),)))
    mark = log.state.head_seq
    raw2 = log.observe("raw/day=a1", "v2")  # taints daily/day=a1 and weekly/week=a
    assert changes_in(log.state, log.since(mark)) == [Change("raw/day=a1", raw2, uuids["raw1"], mark + 1, T0)]
    reactor._fresh = log.since(mark)
    events = reactor.due(log.state, T0, _everything, SOURCE)
    (fired,) = [event.reaction_fired for event in events]  # the weekly waits for its daily's new instance
    assert (fired.job, fired.kind, fired.cause_ref) == ("daily", pb.REACTION_KIND_UPSTREAM_CHANGE, "raw/day=a1")
    assert (fired.cause_instance_uuid, fired.previous_instance_uuid) == (raw2, uuids["raw1"])
    assert list(fired.want.partition_refs) == ["daily/day=a1"]
    assert log.fold(events) == [None]
    want_id = fired.want.want_id
    assert log.state.want_causes[want_id] == (
        f"reaction on_upstream_change of job daily: raw/day=a1 got instance {raw2} (was {uuids['raw1']})"
    )
    # A copy (a second orchestrator, a restart) is rejected; the reactor forgets what landed.
    assert log.fold(events) == [f"want '{want_id}' already exists"]
    assert reactor.due(log.state, T0 + 1, _everything, SOURCE) == [] and not reactor.unrecorded
    mark = log.state.head_seq
    daily2 = log.build("daily/day=a1", "daily", raw2)
    reactor._fresh = log.since(mark)
    (weekly,) = [event.reaction_fired for event in reactor.due(log.state, T0 + 2, _everything, SOURCE)]
    assert (weekly.job, weekly.cause_ref, weekly.cause_instance_uuid) == ("weekly", "daily/day=a1", daily2)
    assert (weekly.previous_instance_uuid, list(weekly.want.partition_refs)) == (uuids["daily1"], ["weekly/week=a"])


def test_fixed_input_data_wants_a_partition_that_failed_again_with_no_person_asking() -> None:
    """Issue 34: a daily that failed (its input was corrupt) was never built from anything, so no consumer list
    names it; a new version of its input wants it again all the same."""
    log = Log()
    log.observe("raw/day=b1", "v1")
    want = log.add(pb.WantCreate(want_id="want-b1", partition_refs=["daily/day=b1"]), manual("a"))
    log.add(
        pb.JobRunBuffer(job_run_id="run-b1", job_label="daily", instance_uuids=[instance_uuid(want, "daily/day=b1")])
    )
    failure = pb.JobRunFailure(job_run_id="run-b1", error_class=pb.ERROR_CLASS_PERMANENT, message="bad footer")
    log.add(failure, from_job_run("run-b1"))
    reactor = Reactor(graph(daily=(on_upstream_change(),)))
    mark = log.state.head_seq
    fixed = log.observe("raw/day=b1", "v2")
    reactor._fresh = log.since(mark)
    (fired,) = [event.reaction_fired for event in reactor.due(log.state, T0, _everything, SOURCE)]
    assert (fired.job, fired.cause_instance_uuid, list(fired.want.partition_refs)) == ("daily", fixed, ["daily/day=b1"])
    assert log.fold([envelope(fired, source=SOURCE, timestamp_ms=T0)]) == [None]
    assert log.state.canonical_instance("daily/day=b1").state == InstanceState.MISSING  # a fresh instance, wanted


def test_a_partition_that_failed_upstream_is_wanted_again_once_the_failed_upstream_is_live() -> None:
    log = Log()
    raw = log.observe("raw/day=c0", "v1")
    want = log.add(pb.WantCreate(want_id="want-c", partition_refs=["weekly/week=c"]), manual("a"))
    weekly = instance_uuid(want, "weekly/week=c")
    wait = pb.InstanceWait(instance_uuid=weekly, upstream_refs=["daily/day=c0", "daily/day=c1"])
    log.add(pb.InstancesWaitUpstream(waits=[wait]))
    daily = instance_uuid(log.add(pb.WantCreate(want_id="want-c0", partition_refs=["daily/day=c0"])), "daily/day=c0")
    log.add(pb.JobRunBuffer(job_run_id="run-c0", job_label="daily", instance_uuids=[daily]))
    log.add(pb.JobRunFailure(job_run_id="run-c0", error_class=pb.ERROR_CLASS_PERMANENT), from_job_run("run-c0"))
    assert log.state.instances[weekly].state == InstanceState.UPSTREAM_FAILED
    reactor = Reactor(graph(weekly=(on_upstream_change(),)))
    mark = log.state.head_seq
    log.add(pb.WantCreate(want_id="want-c0-again", partition_refs=["daily/day=c0"]), manual("a"))  # a fresh instance
    rebuilt = log.build("daily/day=c0", "daily", raw)
    reactor._fresh = log.since(mark)
    (fired,) = [event.reaction_fired for event in reactor.due(log.state, T0, _everything, SOURCE)]
    assert (fired.job, fired.cause_ref, fired.cause_instance_uuid) == ("weekly", "daily/day=c0", rebuilt)
    assert list(fired.want.partition_refs) == ["weekly/week=c"]


def test_only_jobs_that_declare_the_reaction_react_and_only_their_partitions_not_live() -> None:
    log, _ = chain()
    reactor = Reactor(graph(weekly=(on_upstream_change(),)))  # the daily declares nothing
    mark = log.state.head_seq
    log.observe("raw/day=a1", "v2")
    reactor._fresh = log.since(mark)
    assert reactor.due(log.state, T0, _everything, SOURCE) == []
    # The same version again is rejected by the fold: no change at all.
    mark = log.state.head_seq
    seen = pb.PartitionObserved(partition_ref="raw/day=a0", location="/data/raw/day=a0/v1", version="v1")
    assert log.fold([envelope(seen, source=SOURCE, timestamp_ms=T0)]) != [None]
    assert changes_in(log.state, log.since(mark)) == []


def test_a_source_arrival_wants_the_partitions_that_read_it_by_the_inverted_pattern_or_a_function() -> None:
    log = Log()
    reactor = Reactor(graph(daily=(on_source_arrival(),)))
    raw = log.observe("raw/day=b1", "v1")
    reactor._fresh = log.since(0)
    (fired,) = [event.reaction_fired for event in reactor.due(log.state, T0, _everything, SOURCE)]
    assert (fired.job, fired.kind, fired.cause_instance_uuid) == ("daily", pb.REACTION_KIND_SOURCE_ARRIVAL, raw)
    assert (fired.previous_instance_uuid, list(fired.want.partition_refs)) == ("", ["daily/day=b1"])
    assert log.fold([envelope(fired, source=SOURCE, timestamp_ms=T0)]) == [None]
    assert log.state.want_causes[fired.want.want_id].endswith(f"raw/day=b1 first observed as instance {raw}")
    # Observed again with a new version: no longer an arrival.
    mark = log.state.head_seq
    log.observe("raw/day=b1", "v2")
    reactor._fresh = log.since(mark)
    assert reactor.due(log.state, T0 + 1, _everything, SOURCE) == []
    # A weekly cannot be inverted from a day by its fields: the declaration gives the function.
    with pytest.raises(GraphError, match="on_source_arrival needs affected="):
        Graph(
            [Job("weekly", ["weekly/week={week}"], noop, reactions=[on_source_arrival()])],
            [SourceDataset("raw", "raw/day={day}", locate=lambda p: None)],
        )
    by_hand = Reactor(graph(weekly=(on_source_arrival(affected=lambda ref: ["weekly/week=c", "nobody/x"]),)))
    log.observe("raw/day=c1", "v1")
    by_hand._fresh = log.since(log.state.head_seq - 1)
    (weekly,) = [event.reaction_fired for event in by_hand.due(log.state, T0, _everything, SOURCE)]
    assert list(weekly.want.partition_refs) == ["weekly/week=c"]  # a ref of another producer is left out


def test_changes_are_debounced_per_wanted_partition_and_the_newest_cause_is_named() -> None:
    log, _ = chain()
    reactor = Reactor(graph(daily=(on_upstream_change(debounce=dt.timedelta(seconds=30)),)))
    mark = log.state.head_seq
    log.observe("raw/day=a1", "v2")
    reactor._fresh = log.since(mark)
    assert reactor.due(log.state, T0, _everything, SOURCE) == []
    assert reactor.next_due_ms == T0 + 30 * SECOND
    mark = log.state.head_seq
    log.now = T0 + 20 * SECOND
    raw3 = log.observe("raw/day=a1", "v3")  # within the window: the window starts again
    reactor._fresh = log.since(mark)
    assert reactor.due(log.state, T0 + 20 * SECOND, _everything, SOURCE) == []
    assert reactor.due(log.state, T0 + 49 * SECOND, _everything, SOURCE) == []
    (fired,) = [e.reaction_fired for e in reactor.due(log.state, T0 + 50 * SECOND, _everything, SOURCE)]
    assert fired.cause_instance_uuid == raw3 and list(fired.want.partition_refs) == ["daily/day=a1"]


def test_a_step_fires_a_bounded_batch_and_defers_the_rest_until_all_fired() -> None:
    log = Log()
    reactor = Reactor(graph(daily=(on_source_arrival(),)), max_per_step=3)
    for n in range(7):
        log.observe(f"raw/day=d{n}", "v1")
    reactor._fresh = log.since(0)
    wanted: list[str] = []
    for step in range(4):
        events = reactor.due(log.state, T0 + step, _everything, SOURCE)
        assert len(events) == min(3, 7 - len(wanted))
        assert log.fold(events) == [None] * len(events)
        wanted += [ref for event in events for ref in event.reaction_fired.want.partition_refs]
    assert sorted(wanted) == [f"daily/day=d{n}" for n in range(7)] and not reactor.unrecorded


def test_a_firing_whose_append_was_lost_fires_again_and_only_owned_refs_fire() -> None:
    log = Log()
    reactor = Reactor(graph(daily=(on_source_arrival(),)))
    log.observe("raw/day=e1", "v1")
    log.observe("raw/day=e2", "v1")
    reactor._fresh = log.since(0)
    owns = {"daily/day=e1"}.__contains__
    first = reactor.due(log.state, T0, owns, SOURCE)
    assert [list(e.reaction_fired.want.partition_refs) for e in first] == [["daily/day=e1"]]
    again = reactor.due(log.state, T0 + 1, owns, SOURCE)  # the append conflicted: nothing landed
    assert [e.reaction_fired.want.want_id for e in again] == [e.reaction_fired.want.want_id for e in first]
    log.fold(again)
    assert reactor.due(log.state, T0 + 2, owns, SOURCE) == [] and not reactor.unrecorded


def test_want_ids_come_from_the_cause_so_two_reactors_make_the_same_firing(sqlite_url: str) -> None:
    with Database.open(sqlite_url) as db:  # the reactor reads what the log folded since its last step
        _two_reactors(db)


def _two_reactors(db: Database) -> None:
    log, _ = chain()
    db.log.append([event for _, event in log.events])
    one, two = (Reactor(graph(daily=(on_upstream_change(),))) for _ in range(2))
    for reactor in (one, two):
        reactor.read(db.log, log.state.head_seq, everything(), {})  # started, no cursor: the past is not reacted to
    raw2 = log.observe("raw/day=a1", "v2")
    db.log.append([log.events[-1][1]])
    fired, notes = [], []
    for reactor in (one, two):
        reactor.read(db.log, log.state.head_seq, everything(), {})
        for event in reactor.due(log.state, T0, _everything, SOURCE):
            (fired if event.HasField("reaction_fired") else notes).append(event)
    ids = {event.reaction_fired.want.want_id for event in fired}
    assert ids == {reaction_want_id("daily", pb.REACTION_KIND_UPSTREAM_CHANGE, raw2, "daily/day=a1")}
    assert len(fired) == 2 and log.fold(fired)[1] is not None  # the second copy is rejected
    # Each also noted how far it examined the log (no cursor yet), with nothing left owed.
    assert [(n.reactions_noted.upto_seq, list(n.reactions_noted.pending)) for n in notes] == [
        (log.state.head_seq - 2, [])
    ] * 2


def test_a_reaction_is_declared_once_per_kind_with_a_sensible_debounce() -> None:
    with pytest.raises(GraphError, match="declared twice"):
        Job("x", ["x/{a}"], noop, reactions=[on_upstream_change(), on_upstream_change()])
    with pytest.raises(GraphError, match="must be made by"):
        Job("x", ["x/{a}"], noop, reactions=["on_upstream_change"])  # type: ignore[list-item]
    with pytest.raises(ReactionError, match="debounce"):
        on_upstream_change(debounce=dt.timedelta(seconds=-1))


# ----------------------------------------------------------------- on_code_change, with a real orchestrator

VERSIONED = Path(__file__).resolve().parents[1] / "data" / "graphs" / "versioned.py"
WEEKLIES = [f"weekly/week={week}" for week in (1, 2, 3)]


def _run_until_idle(db: Database, graph: Graph, warehouse: Path) -> None:
    orchestrator = Orchestrator(db, graph, warehouse=str(warehouse), spark=None, poll_interval_s=0.01)
    try:
        assert orchestrator.run_until_idle(timeout_s=60)
    finally:
        orchestrator.close()


def test_on_code_change_rebuilds_every_stale_weekly_once_and_nothing_upstream(
    sqlite_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("VERSIONED_ON_CODE_CHANGE", "1")
    with Database.open(sqlite_url, auto_upgrade=True) as db:
        db.log.append([envelope(pb.WantCreate(want_id="w", partition_refs=WEEKLIES), source=manual("ann"))])
        monkeypatch.setenv("VERSIONED_CODE_VERSION", "v1")
        _run_until_idle(db, load_graph(VERSIONED), tmp_path / "wh")
        built = replayed(db)
        before = {ref: uuid for ref, uuid in built.canonical.items()}
        monkeypatch.setenv("VERSIONED_CODE_VERSION", "v2")  # the weekly's code changed; the daily's did not
        _run_until_idle(db, load_graph(VERSIONED), tmp_path / "wh")
        state = replayed(db)
        head = state.head_seq
        for ref in WEEKLIES:
            instance = state.instances[state.canonical[ref]]
            assert instance.uuid != before[ref] and instance.state == InstanceState.LIVE
            assert built_version(state, instance) == "v2"
            old = state.instances[before[ref]]
            # Out of date, not wrong: it kept serving, stale, until its rebuild went Live in its place.
            assert old.state == InstanceState.LIVE and old.superseded_seq and "on_code_change" in (old.note or "")
            assert state.served_instance(ref) is instance
            (want_id,) = [w for w in state.wants_by_ref[ref] if w.startswith("reaction:weekly:on_code_change:")]
            assert state.want_causes[want_id].endswith("was built by code version v1, the job's is v2")
        dailies = [ref for ref in before if ref.startswith("daily/")]
        assert len(dailies) == 6 and all(state.canonical[ref] == before[ref] for ref in dailies)  # nothing upstream
        assert not state.rejections
        _run_until_idle(db, load_graph(VERSIONED), tmp_path / "wh")  # again, at v2: nothing left to react to
        assert replayed(db).head_seq == head


def replayed(db: Database) -> BuildState:
    state = BuildState(strict=True)
    for seq, payload in db.log.iter_payloads():
        state.apply_payload(seq, payload)
    return state
