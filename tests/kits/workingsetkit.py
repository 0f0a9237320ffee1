"""Folding a log both ways, a plain state and a working set (state/fold/cold.py), and comparing them: the digest
from the working set's rows with nothing read back, then every table once everything is read back."""

from __future__ import annotations

from itertools import islice
from typing import Any

from partbuild.examples.clicks.simulate import SimulationPlan, simulate
from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.database import Database, Registration
from partbuild.state.fold.build_state import BuildState
from partbuild.state.fold.cold import WorkingSet
from partbuild.state.log.digest import state_digest
from partbuild.state.log.live import LiveState
from partbuild.state.store.cold_digest import working_set_digest
from partbuild.state.store.cold_rows import StoreRows
from partbuild.state.store.cold_start import load_working_set
from partbuild.state.store.projector import Projector
from partbuild.state.store.records import INSTANCE as INSTANCE_ROW
from partbuild.state.store.records import REF as REF_ROW
from partbuild.state.store.records import RUN as RUN_ROW
from partbuild.state.store.records import WANT as WANT_ROW

# The tables a cold record's parts live in, compared whole once every record is read back.
TABLES = (
    "instances",
    "wants",
    "job_runs",
    "canonical",
    "instance_histories",
    "check_results",
    "fields",
    "want_causes",
    "wants_by_ref",
    "run_heartbeats",
    "first_created",
    "serving",
)
_TABLE_OF = {INSTANCE_ROW: "instances", WANT_ROW: "wants", RUN_ROW: "job_runs", REF_ROW: "canonical"}


def fold_both_ways(database: Database, events: list[pb.Event], step: int) -> tuple[BuildState, WorkingSet]:
    """`events` folded by a plain state and by a working set that evicts all it may every `step` events."""
    plain = BuildState(strict=True)
    live = LiveState(database.log, use_snapshots=False, strict=True)
    projector = Projector(live, database.changes, span=5)
    working = WorkingSet(live.state, StoreRows(database.changes.records, lambda: live.state.head_seq))
    for start in range(0, len(events), step):
        chunk = events[start : start + step]
        database.log.append(chunk)
        for event in chunk:
            plain.apply(plain.head_seq + 1, event)
        live.catch_up()
        assert rejections(live.state) == rejections(plain), f"up to seq {plain.head_seq}"
        assert projector.project() == live.head_seq == database.changes.records.watermark()
        working.evict(working.evictable())
    return plain, working


def rejections(state: BuildState) -> list[tuple[object, ...]]:
    return [rejection.__getstate__() for rejection in state.rejections]


def read_back_everything(database: Database, working: WorkingSet) -> None:
    """Fault every record the store holds back into the working set's state."""
    state = working.state
    for kind, key, *_ in database.changes.records.all_rows():
        if kind in _TABLE_OF:
            getattr(state, _TABLE_OF[kind]).get(key)
    for ref, _, _ in database.changes.records.all_want_refs():
        state.wants_by_ref.get(ref)


def assert_same(database: Database, plain: BuildState, working: WorkingSet) -> None:
    assert working_set_digest(working, database.changes.records) == state_digest(plain)  # its cold records unread
    read_back_everything(database, working)
    state = working.state
    assert state_digest(state) == state_digest(plain)
    for name in TABLES:
        assert _plain(getattr(state, name)) == _plain(getattr(plain, name)), name


def _plain(table: dict[str, Any]) -> dict[str, Any]:
    return {key: _comparable(value) for key, value in dict.items(table)}


def _comparable(value: Any) -> Any:
    getstate = getattr(value, "__getstate__", None)
    return getstate() if getstate is not None and hasattr(value, "__slots__") else value


def w1_events(count: int) -> list[pb.Event]:
    """The first `count` events of a small W1 history (4 weeks, 40 sites)."""
    return list(islice(simulate(SimulationPlan(weeks=4, sites=40)), count))


def projected_then_appended(database: Database, events: list[pb.Event], projected: int) -> None:
    """The first `projected` events folded by a whole state and projected (the rows whole there), the rest
    appended after."""
    database.log.append(events[:projected])
    whole = LiveState(database.log, use_snapshots=False)
    assert Projector(whole, database.changes).project() == projected
    if events[projected:]:
        database.log.append(events[projected:])


def working_live(database: Database) -> tuple[LiveState, WorkingSet]:
    """A live state of `database` holding its working set, and the working set."""
    live = LiveState(database.log, load=lambda log, progress: load_working_set(log, database.changes))
    assert live.working is not None
    return live, live.working


def replayed(events: list[pb.Event]) -> BuildState:
    """`events` folded by a plain state from seq 1."""
    state = BuildState()
    for seq, event in enumerate(events, start=1):
        state.apply(seq, event)
    return state


class Registered:
    """A working set's live state registered as one process projecting `database` (state/ops/projectors.py):
    its head held before its first read, then beaten one beat behind, as `up` does (`Registration`)."""

    def __init__(self, database: Database) -> None:
        self.registration = registration = Registration(database, working_set=True)
        _REGISTERED.append(registration)
        self.holder = registration.holder
        self.live = LiveState(database.log, load=registration.load(database.changes))
        assert self.live.working is not None
        self.working: WorkingSet = self.live.working

    def beat(self) -> None:
        """Register the head the fold had at the beat before."""
        self.registration.beat(self.live)


# Left at the end of each test that opened a database (tests/conftest.py `database`): a registration whose
# projector never beats keeps beating for its load in a thread, which must not outlive its test.
_REGISTERED: list[Registration] = []


def leave_all() -> None:
    """Every registration made since the last call leaves (its loading beats stop)."""
    while _REGISTERED:
        _REGISTERED.pop().leave()
