"""The state store's counts (`ChangeStore.counts`) on both backends: as of every seq of every golden log they
are what a state replayed to that seq counts, projected span by span while the log grows, retentions and
all; an instance dropped inside a span still counted at the seqs it lived."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.database import Database
from partbuild.state.fold.build_state import BuildState
from partbuild.state.log.live import LiveState
from partbuild.state.queries.changes import INSTANCE_CREATED, Change
from partbuild.state.schema import state_counts
from partbuild.state.store import row_stream
from partbuild.state.store.counts import count_rows
from partbuild.state.store.projector import Projector
from partbuild.state.store.verify import store_problems

from golden_log import GOLDEN_LOGS, read_events
from storekit import projected_while_growing


def _replayed_counts(events: list[pb.Event]) -> list[dict[str, dict[str, int]]]:
    """The counts of a state replayed to each seq, from 0 (nothing) to the last."""
    state = BuildState()
    found = [state.counts()]
    for seq, event in enumerate(events, start=1):
        state.apply(seq, event)
        found.append(state.counts())
    return found


@pytest.mark.parametrize("name", [log.name for log in GOLDEN_LOGS])
def test_counts_as_of_every_seq_are_a_replay_s(database: Database, name: str) -> None:
    """Appended 7 events at a time, each time folded and projected in spans of 3 seqs (the touched passes
    after the first): every seq's counts, including those of instances a retention dropped later."""
    events = read_events(name)
    projected_while_growing(database, events)
    expected = _replayed_counts(events)
    for seq, counts in enumerate(expected):
        assert database.changes.counts(seq) == counts, seq


def test_a_log_projected_at_once_counts_as_one_projected_while_it_grew(database: Database) -> None:
    """`db upgrade`'s case: the state is at the head, retentions and all, when the first span is projected."""
    events = read_events("v1")
    database.log.append(events)
    live = LiveState(database.log)
    assert live.state.dropped_instances > 0  # the log's retention dropped some: their counts come from it
    assert database.changes.counts(1) is None  # not projected yet: the reader scans instead
    Projector(live, database.changes, span=5).project()
    expected = _replayed_counts(events)
    assert [database.changes.counts(seq) for seq in range(len(expected))] == expected


def test_rows_are_written_only_where_a_count_changed(database: Database) -> None:
    events = read_events("v1")
    database.log.append(events)
    live = LiveState(database.log)
    Projector(live, database.changes).project()
    with database.log._engine.connect() as conn:
        rows = conn.execute(sa.select(state_counts).order_by("kind", "state", "seq")).all()
    previous: dict[tuple[int, int], int] = {}
    for row in rows:
        assert previous.get((row.kind, row.state), 0) != row.total, row  # a row says the count moved
        previous[row.kind, row.state] = row.total
    assert len({row.seq for row in rows}) <= live.head_seq


def test_moves_that_cancel_out_within_a_seq_write_no_row() -> None:
    created = Change(5, INSTANCE_CREATED, "u1", "r", None, to_state=None)
    assert count_rows({}, [created], []) == []  # nothing it is counted in
    # An instance dropped at the seq it was created: +1 and -1 to Missing at seq 7.
    assert count_rows({(0, 0): 4}, [], [(7, 0, 1), (7, 0, -1), (8, 0, -1)]) == [(0, 0, 8, 3)]


def test_the_audit_finds_a_count_that_differs_from_the_replay(database: Database) -> None:
    """A store behind a retention agrees (the replay's dropped deltas are the same); a count changed or lost
    is named with its span."""
    events = read_events("v1")
    retention = next(n for n, event in enumerate(events) if event.WhichOneof("payload") == "instance_retention")
    database.log.append(events[:retention])
    Projector(LiveState(database.log), database.changes, span=100).project()
    database.log.append(events[retention:])
    replayed = LiveState(database.log).state
    assert store_problems(database.changes, replayed, span=100) == []
    kind, state, seq, count = database.changes.count_rows(100, 200)[0]
    where = (state_counts.c.kind == kind) & (state_counts.c.state == state) & (state_counts.c.seq == seq)
    with database.log._engine.begin() as conn:
        conn.execute(sa.update(state_counts).where(where).values(total=count + 1))
    problems = store_problems(database.changes, replayed, span=100)
    assert problems == [
        "the state store's counts differ from the replay's in seqs (100, 200]: "
        f"stored (kind, state, seq, count) {(kind, state, seq, count + 1)}, replayed {(kind, state, seq, count)}"
    ]
    with database.log._engine.begin() as conn:
        conn.execute(sa.delete(state_counts).where(where))
    problems = store_problems(database.changes, replayed, span=100)
    assert len(problems) == 1 and "(100, 200]" in problems[0] and "count" in problems[0]


@pytest.mark.parametrize("chunk", [1, 3])
def test_the_audit_takes_the_count_rows_span_by_span_from_one_walk(
    database: Database, monkeypatch: pytest.MonkeyPatch, chunk: int
) -> None:
    """The count rows are read in one walk by seq, a chunk at a time, and taken a span at a time: in spans of
    one seq, each row is its span's last, and a chunk ends anywhere in a span; a count changed is named with
    its span."""
    events = read_events("v1")
    live = projected_while_growing(database, events)
    monkeypatch.setattr(row_stream, "CHUNK", chunk)
    assert store_problems(database.changes, live.state, span=1) == []
    kind, state, seq, count = database.changes.count_rows(100, 200)[-1]
    where = (state_counts.c.kind == kind) & (state_counts.c.state == state) & (state_counts.c.seq == seq)
    with database.log._engine.begin() as conn:
        conn.execute(sa.update(state_counts).where(where).values(total=count + 1))
    assert store_problems(database.changes, live.state, span=1) == [
        f"the state store's counts differ from the replay's in seqs ({seq - 1}, {seq}]: "
        f"stored (kind, state, seq, count) {(kind, state, seq, count + 1)}, replayed {(kind, state, seq, count)}"
    ]
