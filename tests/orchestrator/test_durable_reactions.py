"""Durable reactions (issue 35): what a reactor owes is in the log, so a new reactor (a restart, a crash, the
bucket's next owner) fires every owed firing once, and one that cannot fire is settled with its reason.

Each reactor here is a fresh `Reactor` on a real SQLite log, as a new process would be; the state is replayed
from the log before each step, as a new process's would be.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator

import pytest

from partbuild.orchestrator.context import JobContext
from partbuild.orchestrator.graph import Graph, Job, Partition, SourceDataset
from partbuild.orchestrator.reactions import MAX_TRIES, on_source_arrival, on_upstream_change
from partbuild.orchestrator.reactor import CURSOR_LAG_CHANGES, ReactionScope, Reactor, everything
from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.database import Database
from partbuild.state.fold.build_state import BuildState
from partbuild.state.fold.reaction_notes import reaction_key
from partbuild.state.log.events import envelope, from_job_run, manual, system
from partbuild.state.rules.ids import instance_uuid

T0 = 1_800_000_000_000
SECOND = 1000
SOURCE = system("orchestrator")
CONNECTOR = system("connector")
UPSTREAM = pb.REACTION_KIND_UPSTREAM_CHANGE
DEBOUNCE = dt.timedelta(seconds=2)


def noop(ctx: JobContext) -> None:
    """Never run: the tests fold what a run would record."""


def graph(daily: tuple = ()) -> Graph:
    def inputs(p: Partition) -> list[str]:
        return [f"raw/day={p['day']}"]

    job = Job("daily", ["daily/day={day}"], noop, inputs=inputs, reactions=daily)
    return Graph([job], [SourceDataset("raw", "raw/day={day}", locate=lambda p: None)])


@pytest.fixture
def db(sqlite_url: str) -> Iterator[Database]:
    with Database.open(sqlite_url, auto_upgrade=True) as database:
        yield database


def state_of(db: Database) -> BuildState:
    state = BuildState(strict=True)
    for seq, payload in db.log.iter_payloads():
        state.apply_payload(seq, payload)
    return state


def observe(db: Database, ref: str, version: str, at_ms: int = T0) -> str:
    seen = pb.PartitionObserved(partition_ref=ref, location=f"/data/{ref}/{version}", version=version)
    first = db.log.append([envelope(seen, source=CONNECTOR, timestamp_ms=at_ms)]).first_seq
    return instance_uuid(first, ref)


def built_daily(db: Database, day: str) -> None:
    """raw/day=<day> observed, daily/day=<day> built from it: Live."""
    raw = observe(db, f"raw/day={day}", "v1")
    ref = f"daily/day={day}"
    first = db.log.append([envelope(pb.WantCreate(want_id=f"w-{day}", partition_refs=[ref]), source=manual("a"))])
    daily = instance_uuid(first.first_seq, ref)
    run = f"run-{day}"
    db.log.append([envelope(pb.JobRunBuffer(job_run_id=run, job_label="daily", instance_uuids=[daily]), source=SOURCE)])
    success = pb.JobRunSuccess(job_run_id=run, input_instance_uuids=[raw])
    db.log.append([envelope(success, source=from_job_run(run))])


def step(db: Database, reactor: Reactor, now_ms: int, scope: ReactionScope | None = None) -> list[pb.Event]:
    """One step as the loop takes it: read what was folded, then append what is due (no conflict here)."""
    scope = scope or everything()
    state = state_of(db)
    reactor.read(db.log, state.head_seq, scope, state.reaction_cursors)
    events = reactor.due(state, now_ms, scope.owns, SOURCE, scope)
    if events:
        db.log.append(events)
        reactor.appended()
    return events


def fired(events: list[pb.Event]) -> list[pb.ReactionFired]:
    return [event.reaction_fired for event in events if event.HasField("reaction_fired")]


def debounced() -> Graph:
    return graph(daily=(on_upstream_change(debounce=DEBOUNCE),))


def test_a_restart_inside_the_debounce_window_fires_once_when_due(db: Database) -> None:
    built_daily(db, "a1")
    assert [e.reactions_noted.upto_seq for e in step(db, Reactor(debounced()), T0)] == [4]  # the first cursor
    raw2 = observe(db, "raw/day=a1", "v2", at_ms=T0 + SECOND)
    first = Reactor(debounced())
    (noted,) = step(db, first, T0 + SECOND)  # noted, due 2 s after the change: nothing fired yet
    (pending,) = noted.reactions_noted.pending
    assert (pending.partition_ref, pending.cause_instance_uuid, pending.due_ms) == (
        "daily/day=a1",
        raw2,
        T0 + 3 * SECOND,
    )
    del first  # killed inside the window
    second = Reactor(debounced())
    assert step(db, second, T0 + 2 * SECOND) == []  # it finds the firing owed, not due yet
    assert second.owes(state_of(db), lambda ref: True)
    (firing,) = fired(step(db, second, T0 + 3 * SECOND))
    assert (firing.cause_instance_uuid, list(firing.want.partition_refs)) == (raw2, ["daily/day=a1"])
    state = state_of(db)
    assert not state.reaction_pending and not state.rejections
    assert state.reactions[reaction_key("daily", UPSTREAM)].fired == 1
    third = Reactor(debounced())  # another restart: nothing owed, nothing appended
    assert step(db, third, T0 + 9 * SECOND) == [] and not third.owes(state_of(db), lambda ref: True)


def test_a_change_folded_before_a_crash_is_read_again_from_the_cursor(db: Database) -> None:
    built_daily(db, "b1")
    step(db, Reactor(debounced()), T0)  # a cursor at the head
    raw2 = observe(db, "raw/day=b1", "v2", at_ms=T0)  # folded; the reactor crashed before its next step
    (noted,) = step(db, Reactor(debounced()), T0 + SECOND)
    assert noted.reactions_noted.pending[0].cause_instance_uuid == raw2
    (firing,) = fired(step(db, Reactor(debounced()), T0 + 2 * SECOND))  # yet another process fires it
    assert firing.cause_instance_uuid == raw2


def test_a_bucket_handed_on_is_read_by_its_new_owner_from_its_cursor(db: Database) -> None:
    for day in ("c1", "c2"):
        built_daily(db, day)
    buckets = {"daily/day=c1": "b1", "daily/day=c2": "b2"}

    def scope(*keys: str) -> ReactionScope:
        return ReactionScope(keys, lambda ref: buckets.get(ref, "b0"), lambda ref: buckets.get(ref) in keys)

    old_owner, new_owner = Reactor(debounced()), Reactor(debounced())
    step(db, old_owner, T0, scope("b1", "b2"))
    step(db, new_owner, T0, scope())  # a member owning nothing yet
    raw_c2 = observe(db, "raw/day=c2", "v2", at_ms=T0)
    assert step(db, new_owner, T0 + SECOND, scope()) == []  # read past the change: not its bucket (yet)
    # The old owner is paused before it reads the change; its bucket b2 is handed on. The new owner reads b2's
    # changes again from b2's cursor, from before the change.
    (firing,) = fired(step(db, new_owner, T0 + 3 * SECOND, scope("b2")))
    assert (firing.cause_instance_uuid, list(firing.want.partition_refs)) == (raw_c2, ["daily/day=c2"])
    assert state_of(db).reaction_cursors["b2"] > state_of(db).reaction_cursors["b1"]
    # The old owner wakes up owning b1 only: nothing of b2 fires twice.
    assert fired(step(db, old_owner, T0 + 4 * SECOND, scope("b1"))) == []
    assert len([w for w in state_of(db).wants if w.startswith("reaction:")]) == 1


def test_a_firing_whose_job_left_the_graph_is_settled_as_failed_and_shown(db: Database) -> None:
    built_daily(db, "d1")
    step(db, Reactor(debounced()), T0)
    observe(db, "raw/day=d1", "v2", at_ms=T0)
    step(db, Reactor(debounced()), T0)  # noted, then the graph changes: the daily declares no reaction now
    (noted,) = step(db, Reactor(graph(daily=(on_source_arrival(),))), T0 + 5 * SECOND)
    (settled,) = noted.reactions_noted.settled
    assert settled.failed and "no longer declares on_upstream_change" in settled.reason
    state = state_of(db)
    row = state.reactions[reaction_key("daily", UPSTREAM)]
    assert not state.reaction_pending and (row.failed, row.fired) == (1, 0) and "no longer declares" in row.last_error


def test_a_firing_whose_partition_went_live_meanwhile_is_settled_without_an_error(db: Database) -> None:
    built_daily(db, "e1")
    step(db, Reactor(debounced()), T0)
    raw2 = observe(db, "raw/day=e1", "v2", at_ms=T0)
    step(db, Reactor(debounced()), T0)
    state = state_of(db)
    daily = state.canonical["daily/day=e1"]  # its Missing successor: a person builds it
    db.log.append([envelope(pb.JobRunBuffer(job_run_id="by-hand", job_label="daily", instance_uuids=[daily]))])
    done = pb.JobRunSuccess(job_run_id="by-hand", input_instance_uuids=[raw2])
    db.log.append([envelope(done, source=from_job_run("by-hand"))])
    (noted,) = step(db, Reactor(debounced()), T0 + 5 * SECOND)
    assert [(s.reason, s.failed) for s in noted.reactions_noted.settled] == [
        ("its partition went Live meanwhile", False)
    ]
    assert not state_of(db).reaction_pending and state_of(db).reactions[reaction_key("daily", UPSTREAM)].failed == 0


def test_an_idle_log_gets_no_note_and_a_busy_one_a_cursor_every_so_many_changes(db: Database) -> None:
    built_daily(db, "f1")
    reactor = Reactor(debounced())
    step(db, reactor, T0)
    head = db.log.head()
    assert step(db, reactor, T0 + SECOND) == [] and db.log.head() == head
    for n in range(CURSOR_LAG_CHANGES):  # sources nobody reads: changes that owe nothing
        observe(db, f"other/n={n}", "v1")
    (noted,) = step(db, reactor, T0 + 2 * SECOND)
    assert noted.reactions_noted.upto_seq == head + CURSOR_LAG_CHANGES and not noted.reactions_noted.pending


def test_an_affected_function_that_raises_is_recorded_and_read_again_while_the_other_changes_fire(
    db: Database,
) -> None:
    broken = {"raw/day=g2"}

    def affected(source_ref: str) -> list[str]:
        if source_ref in broken:
            raise LookupError(f"no calendar for {source_ref}")
        return [source_ref.replace("raw/", "daily/")]

    arrivals = graph(daily=(on_source_arrival(affected=affected),))
    reactor = Reactor(arrivals)
    step(db, reactor, T0)  # the first cursor
    g1, g2 = observe(db, "raw/day=g1", "v1"), observe(db, "raw/day=g2", "v1")
    events = step(db, reactor, T0 + SECOND)
    assert [f.cause_instance_uuid for f in fired(events)] == [g1]  # the other change fired
    (noted,) = [e.reactions_noted for e in events if e.HasField("reactions_noted")]
    assert noted.upto_seq == db.log.head() - 3  # before g2's change: still owed, should this process die
    row = state_of(db).reactions[reaction_key("daily", pb.REACTION_KIND_SOURCE_ARRIVAL)]
    assert row.failed == 1 and "no calendar for raw/day=g2" in row.last_error and "read again in 1 s" in row.last_error
    assert reactor.owes(state_of(db), lambda ref: True)
    assert fired(step(db, reactor, T0 + 1500)) == []  # backing off
    broken.clear()  # the declaration's function is fixed
    (firing,) = fired(step(db, reactor, T0 + 2 * SECOND))
    assert firing.cause_instance_uuid == g2 and list(firing.want.partition_refs) == ["daily/day=g2"]
    assert not reactor.owes(state_of(db), lambda ref: True)


def test_appends_that_conflicted_are_no_tries_and_a_firing_the_fold_rejects_is_given_up_after_max_tries(
    db: Database,
) -> None:
    """A group's members append at once: a step whose append conflicted wrote nothing, so its firings were not
    tried (seen: a new owner gave up three firings a killed member owed after three conflicts in a row)."""
    built_daily(db, "h1")
    step(db, Reactor(debounced()), T0)
    raw2 = observe(db, "raw/day=h1", "v2", at_ms=T0)
    reactor = Reactor(debounced())
    step(db, reactor, T0 + SECOND)  # noted, due at T0 + 2 s
    state = state_of(db)
    for attempt in range(MAX_TRIES * 2):  # each step's append conflicts: the loop steps again, appending nothing
        (conflicted,) = fired(reactor.due(state, T0 + 3 * SECOND + attempt, lambda ref: True, SOURCE))
        assert conflicted.cause_instance_uuid == raw2
    (firing,) = fired(step(db, reactor, T0 + 4 * SECOND))  # this one lands
    assert firing.cause_instance_uuid == raw2
    state = state_of(db)
    assert not state.reaction_pending and state.reactions[reaction_key("daily", UPSTREAM)].fired == 1

    raw3 = observe(db, "raw/day=h1", "v3", at_ms=T0 + 5 * SECOND)
    step(db, reactor, T0 + 5 * SECOND)  # noted
    for attempt in range(MAX_TRIES):  # appended, and the fold rejects each (its want made invalid on the way)
        events = reactor.due(state_of(db), T0 + 8 * SECOND + attempt, lambda ref: True, SOURCE)
        (firing,) = fired(events)
        assert firing.cause_instance_uuid == raw3
        firing.want.ttl_seconds = -1
        db.log.append(events)
        reactor.appended()
    (noted,) = step(db, reactor, T0 + 9 * SECOND)
    (settled,) = noted.reactions_noted.settled
    assert settled.failed and settled.reason == f"the log rejected its want of daily/day=h1 {MAX_TRIES} times"
    assert not state_of(db).reaction_pending
