"""Checkpoints of a working set (state/store/checkpoints.py, state/store/row_versions.py): a start after a crash
loads the newest one and reads each record it left in the rows back as of it, however far the rows moved since,
and decides as a replay of the whole log would (same rejections, digest and tables once read back)."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.database import Database
from partbuild.state.log.live import LiveState
from partbuild.state.log.snapshot import working_set_format
from partbuild.state.schema import state_record_versions
from partbuild.state.store.checkpoints import checkpoint, keep_working_set
from partbuild.state.store.cold_start import rows_whole_at
from partbuild.state.store.projector import Projector
from partbuild.state.store.row_versions import floor

from golden_log import GOLDEN_LOGS, read_events
from workingsetkit import assert_same, projected_then_appended, rejections, replayed, w1_events, working_live

NEVER = 10**9


def _running(database: Database, events: list[pb.Event], every: int = NEVER) -> tuple[LiveState, Projector]:
    """A working set's live state loaded from `events` (a third of them projected first), its projector passed."""
    projected_then_appended(database, events, max(1, len(events) // 3))
    live, _ = working_live(database)
    projector = Projector(live, database.changes, span=50)
    keep_working_set(live, projector, checkpoint_every=every)
    assert projector.project() == live.head_seq
    return live, projector


def _grow(database: Database, live: LiveState, projector: Projector, events: list[pb.Event], step: int) -> None:
    """Append `events` a `step` at a time, each folded and projected (evicting after each pass)."""
    for start in range(0, len(events), step):
        database.log.append(events[start : start + step])
        live.catch_up()
        assert projector.project() == live.head_seq


def _copies(database: Database) -> list[tuple[int, str, int]]:
    """(kind, id, seq) of the rows' versions kept (with no working set live: the floor's alone)."""
    versions = state_record_versions.c
    with database.changes.records.engine.connect() as conn:
        return [tuple(row) for row in conn.execute(sa.select(versions.kind, versions.id, versions.seq))]


@pytest.mark.usefixtures("settle_often")
@pytest.mark.parametrize("name", [log.name for log in GOLDEN_LOGS] + ["w1"])
def test_a_start_after_a_crash_reads_the_checkpoint_s_records_as_of_it(
    database: Database, name: str, caplog: pytest.LogCaptureFixture
) -> None:
    events = w1_events(2_400) if name == "w1" else read_events(name)
    middle = len(events) * 2 // 3
    live, projector = _running(database, events[:middle])
    saved = checkpoint(live, projector, live.head_seq)
    assert saved == middle
    _grow(database, live, projector, events[middle:], step=7)  # then the process dies: no clean stop
    copies = _copies(database)
    assert rows_whole_at(database.changes) == len(events) and all(seq <= middle for *_, seq in copies)
    assert copies or name != "w1"  # (the rows of records the checkpoint left cold moved on since)
    with caplog.at_level("INFO", "partbuild.state.store"):
        again, restored = working_live(database)
    assert f"from its checkpoint at seq {middle}, the rows' at {len(events)}" in caplog.text
    plain = replayed(events)
    assert again.head_seq == len(events) and rejections(again.state) == rejections(plain)
    assert Projector(again, database.changes).project() == len(events)
    assert_same(database, plain, restored)


@pytest.mark.usefixtures("settle_often")
def test_a_running_working_set_saves_a_checkpoint_every_so_many_events_and_keeps_the_rows_for_the_newest(
    database: Database,
) -> None:
    events = w1_events(3_000)  # (2,880: the whole history)
    live, projector = _running(database, events[:1_200], every=400)
    _grow(database, live, projector, events[1_200:2_700], step=100)
    snapshots = database.log.snapshots
    newest = snapshots.latest_seq(working_set_format())
    assert newest == 2_400  # loaded at 1,200; then every 400 events (at the first pass past them)
    with database.changes.records.engine.connect() as conn:
        assert floor(conn) == newest
    assert all(seq <= newest for *_, seq in _copies(database))
    assert rows_whole_at(database.changes) == 2_700
    database.log.append(events[2_700:])  # folded by the next start only
    again, restored = working_live(database)
    plain = replayed(events)
    assert rejections(again.state) == rejections(plain)
    Projector(again, database.changes).project()
    assert_same(database, plain, restored)


def test_a_checkpoint_the_rows_never_reached_is_passed_over_for_a_replay(
    database: Database, caplog: pytest.LogCaptureFixture
) -> None:
    events = w1_events(1_500)
    live, projector = _running(database, events[:1_000])
    database.log.append(events[1_000:])
    live.catch_up()  # folded, not projected: the checkpoint is ahead of the rows
    assert checkpoint(live, projector, database.changes.records.watermark()) == len(events)
    with caplog.at_level("INFO", "partbuild.state.store"):
        again, restored = working_live(database)  # the process died before its projector's next pass
    assert f"not starting from the working set saved at seq {len(events)}" in caplog.text
    Projector(again, database.changes).project()
    assert_same(database, replayed(events), restored)
