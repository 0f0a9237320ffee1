"""A working set's registration (`Registration`, state/database.py): while a load is in flight, at start or
again (`LiveState.load_again`), the registry says the seq the load reads as of, whatever the projector's beats
would say; once loaded, the beats say the head the fold had one beat before."""

from __future__ import annotations

from partbuild.state.database import Database, Registration
from partbuild.state.log.events import wall_clock_ms
from partbuild.state.log.live import LiveState

from workingsetkit import projected_then_appended, w1_events


def _registered(database: Database, registration: Registration) -> int | None:
    heads = {other.holder: other.head for other in database.projectors.others("", wall_clock_ms())}
    return heads[registration.holder]


def test_a_load_in_flight_is_registered_at_its_hold_whatever_the_projector_beats(database: Database) -> None:
    events = w1_events(1_200)
    projected_then_appended(database, events, 800)  # the rows whole at seq 800: a load holds it
    running = LiveState(database.log, use_snapshots=False)  # the state a process folds now, at seq 1,200
    registration = Registration(database, working_set=True)
    registration.beat(running)
    registration.beat(running)
    assert _registered(database, registration) == 1_200
    during: list[int | None] = []

    def progress(_seq: int) -> None:  # the projector of the state being replaced beats meanwhile
        registration.beat(running)
        during.append(_registered(database, registration))

    state, _ = registration.load(database.changes)(database.log, progress)
    assert state.head_seq == 1_200
    assert during and set(during) == {800}  # what the load reads as of, not the running state's head
    registration.beat(running)  # loaded: the head one beat before (the hold), then the fold's
    assert _registered(database, registration) == 800
    registration.beat(running)
    assert _registered(database, registration) == 1_200
