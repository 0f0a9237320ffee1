"""A working set beside other processes folding and projecting the same database (state/store/row_versions.py,
state/store/checkpoints.py): the other one writes the rows past this fold's head; this one reads its cold
records back as of its own head (from the versions those writes keep), evicts what its rows as of its head
hold, and decides as a replay of the whole log would (same rejections, digest and tables once read back)."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.database import Database
from partbuild.state.fold.build_state import BuildState
from partbuild.state.fold.cold import INSTANCE
from partbuild.state.log.events import wall_clock_ms
from partbuild.state.log.live import LiveState
from partbuild.state.schema import state_record_versions
from partbuild.state.store.checkpoints import keep_working_set
from partbuild.state.store.projector import Projector
from partbuild.state.store.verify import store_problems

from golden_log import GOLDEN_LOGS, read_events
from workingsetkit import Registered, assert_same, projected_then_appended, rejections, replayed, w1_events

NEVER = 10**9


def _versions(database: Database) -> int:
    with database.changes.records.engine.connect() as conn:
        return conn.execute(sa.select(sa.func.count()).select_from(state_record_versions)).scalar_one()


class _Ahead:
    """The process ahead: a whole state, or another working set, projecting first."""

    def __init__(self, database: Database, kind: str) -> None:
        if kind == "whole state":
            self.live, self.registered = LiveState(database.log, use_snapshots=False), None
        else:
            self.registered = Registered(database)
            self.live = self.registered.live
        writer = None if self.registered is None else self.registered.holder
        self.projector = Projector(self.live, database.changes, span=50, writer=writer)
        if self.registered is not None:
            keep_working_set(self.live, self.projector, checkpoint_every=NEVER)

    def fold_and_project(self) -> None:
        self.live.catch_up()
        assert self.projector.project() == self.live.head_seq
        if self.registered is not None:
            self.registered.beat()


@pytest.mark.usefixtures("settle_often")
@pytest.mark.parametrize("passes", ["around its head", "at each seq it folds to"])
@pytest.mark.parametrize("ahead", ["whole state", "working set"])
@pytest.mark.parametrize("name", [log.name for log in GOLDEN_LOGS] + ["w1"])
def test_a_working_set_behind_another_projecting_process_decides_as_a_replay(
    database: Database, name: str, ahead: str, passes: str
) -> None:
    """The other process's passes end around the head of the one behind (it checks what it changed against
    its rows as of its head), or at each seq it folds to (it reads back while applying the event a pass ended
    at: as of the seq before)."""
    events = w1_events(2_400) if name == "w1" else read_events(name)
    first, step = (800, 97) if name == "w1" else (max(1, len(events) // 3), 3 if passes == "around its head" else 1)
    projected_then_appended(database, events[:first], first)
    front = _Ahead(database, ahead)
    behind = Registered(database)
    projector = Projector(behind.live, database.changes, span=50, writer=behind.holder)
    keep_working_set(behind.live, projector, checkpoint_every=NEVER)
    plain, versions_seen = replayed(events[:first]), 0
    for start in range(first, len(events), step):
        middle = min(len(events), start + step // 2 if passes == "around its head" else start + step)
        if middle > start:
            database.log.append(events[start:middle])
            _folded(plain, events[start:middle])
        if passes == "at each seq it folds to":
            front.fold_and_project()
        behind.live.catch_up()  # reading back as of its head, the rows ahead of it
        assert rejections(behind.live.state) == rejections(plain), f"up to seq {plain.head_seq}"
        if middle < min(len(events), start + step):
            database.log.append(events[middle : start + step])
            _folded(plain, events[middle : start + step])
        front.fold_and_project()  # the rows written past the head of the one behind
        projector.project()  # behind them: it writes nothing, checks what it changed against its rows, evicts
        behind.beat()
        versions_seen = max(versions_seen, _versions(database))
    behind.live.catch_up()
    assert rejections(behind.live.state) == rejections(plain)
    assert projector.project() == len(events)  # at the rows' watermark now: what changed since, drained
    working = behind.working
    if name == "w1":  # it evicted, read back and used the versions kept for it all along
        assert working.faults.evicted[INSTANCE] > 1_000 and working.faults.read_back[INSTANCE] > 0
        assert versions_seen > 0 and projector.spans_lost > 0
        assert len(dict.keys(behind.live.state.instances)) < len(plain.instances) // 3
    assert_same(database, plain, working)
    assert store_problems(database.changes, plain) == []  # the rows the two wrote in turn: as a replay's


def test_without_a_registered_head_a_row_written_past_the_fold_is_refused_then_the_working_set_loads_again(
    database: Database, caplog: pytest.LogCaptureFixture
) -> None:
    """Its registration gone stale, the one behind finds a row rewritten past its head with no version kept: it
    never uses it; it loads itself again from the rows (whole at the other's head) and folds on, then projects
    and evicts as a start would, and decides as a replay."""
    events = w1_events(2_000)
    projected_then_appended(database, events[:800], 800)
    behind = Registered(database)
    database.projectors.leave(behind.holder)  # (as if its registration went stale)
    projector = Projector(behind.live, database.changes, span=50, writer=behind.holder)
    keep_working_set(behind.live, projector, checkpoint_every=NEVER)
    assert sum(behind.working.faults.evicted.values()) > 0
    front = _Ahead(database, "whole state")
    database.log.append(events[800:1_400])
    front.fold_and_project()  # rows rewritten past seq 800, no version kept: nobody asked
    assert _versions(database) == 0
    database.log.append(events[1_400:1_600])
    old_state = behind.live.state
    with caplog.at_level("WARNING", "partbuild"):
        behind.live.catch_up()  # refused on a row rewritten past its head; loaded again at the rows' seq 1,400
    said = [record.getMessage() for record in caplog.records if "loading it again" in record.getMessage()]
    stopped = old_state.head_seq  # (the old state as it was when refused: never past the event it met)
    assert len(said) == 1 and f"cannot fold past seq {stopped} " in said[0], said
    assert 800 <= stopped < 1_400 and "no version of it as of the head was kept" in said[0]
    assert behind.live.loads == 2 and behind.live.state is not old_state and behind.live.head_seq == 1_600
    assert behind.live.working is not None and behind.live.working.state is behind.live.state
    evicted_by_the_load = sum(behind.live.working.faults.evicted.values())
    plain = replayed(events[:1_600])
    assert rejections(behind.live.state) == rejections(plain)
    registered = {other.holder: other.head for other in database.projectors.others("", wall_clock_ms())}
    assert registered[behind.holder] == 1_400  # registered again before the load's first read: the rows' seq
    assert projector.project() == 1_600  # the passes start over on the state loaded again
    database.log.append(events[1_600:])
    behind.live.catch_up()
    assert projector.project() == len(events) and behind.live.loads == 2
    working = behind.live.working
    assert sum(working.faults.evicted.values()) > evicted_by_the_load  # its eviction goes on, on the new one
    assert_same(database, replayed(events), working)
    assert store_problems(database.changes, replayed(events)) == []


def _folded(plain: BuildState, events: list[pb.Event]) -> None:
    for event in events:
        plain.apply(plain.head_seq + 1, event)
