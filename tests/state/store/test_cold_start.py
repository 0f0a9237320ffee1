"""A live state that holds its working set (state/store/cold_start.py): loaded from the log and the store's
rows with records evicted as the replay passes their rows, then kept bounded after each projector pass, it
decides as a state holding everything (same rejections, same digest, same tables once read back), keeps what
decisions act on, and walks what was created after a seq in creation order (`created_since`)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from partbuild.state.database import Database
from partbuild.state.fold.build_state import BuildState
from partbuild.state.fold.cold import INSTANCE, ColdKeys, ReadBackFailed, created_since, key_code
from partbuild.state.fold.records import ACTIVE_RUN_STATES, InstanceState
from partbuild.state.log.digest import state_digest
from partbuild.state.log.live import LiveState
from partbuild.state.log.snapshot import encode_state, working_set_format
from partbuild.state.store import cold_start
from partbuild.state.store.checkpoints import keep_working_set, save_working_set
from partbuild.state.store.cold_digest import working_set_digest
from partbuild.state.store.cold_start import load_working_set, rows_whole_at
from partbuild.state.store.projector import Projector
from partbuild.state.store.records import body_of
from partbuild.state.store.row_versions import clear_floor

from golden_log import GOLDEN_LOGS, read_events
from workingsetkit import assert_same, projected_then_appended, rejections, replayed, w1_events, working_live


@pytest.mark.usefixtures("settle_often")
@pytest.mark.parametrize("name", [log.name for log in GOLDEN_LOGS])
def test_a_working_set_loads_from_the_rows_as_a_full_replay(database: Database, name: str) -> None:
    events = read_events(name)
    projected_then_appended(database, events, len(events) * 2 // 3)
    live, working = working_live(database)
    assert live.head_seq == len(events)
    plain = replayed(events)
    assert rejections(live.state) == rejections(plain)
    assert Projector(live, database.changes).project() == len(events)  # the tail's rows: what the digest reads
    assert working_set_digest(working, database.changes.records) == state_digest(plain)  # nothing read back
    assert_same(database, plain, working)


@pytest.mark.usefixtures("settle_often")
def test_a_working_set_loads_bounded_then_stays_bounded_keeping_what_decisions_need(
    database: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    events = w1_events(3_000)
    projected_then_appended(database, events[:2_000], 1_800)  # rows all written at seq 1,800 (a first projection)
    held_while_loading: list[int] = []
    settle = cold_start._Settler.settle

    def counted(self: Any) -> None:
        settle(self)
        held_while_loading.append(len(dict.keys(self.working.state.instances)))

    monkeypatch.setattr(cold_start._Settler, "settle", counted)
    live, working = working_live(database)
    assert max(held_while_loading) < len(replayed(events[:1_800]).instances) // 3  # not the whole, then evicted
    full = replayed(events[:2_000])
    loaded = len(dict.keys(live.state.instances))
    assert sum(working.faults.evicted.values()) > 0 and loaded < len(full.instances) // 3
    projector = Projector(live, database.changes, span=50)
    keep_working_set(live, projector)
    plain = replayed(events[:2_000])
    for start in range(2_000, len(events), 250):
        chunk = events[start : start + 250]
        database.log.append(chunk)
        for event in chunk:
            plain.apply(plain.head_seq + 1, event)
        live.catch_up()
        assert rejections(live.state) == rejections(plain)
        assert projector.project() == live.head_seq
        _assert_decisions_hold(live.state, plain)
    assert len(dict.keys(live.state.instances)) < len(plain.instances) // 3
    assert_same(database, plain, working)


def _assert_decisions_hold(state: BuildState, plain: BuildState) -> None:
    """What decisions act on is held: instances not yet Live nor ended, queued and running runs, the refs wanted."""
    waiting = [uuid for uuid, one in plain.instances.items() if one.state < InstanceState.LIVE]
    assert all(dict.__contains__(state.instances, uuid) for uuid in waiting)
    active = [run_id for run_id, run in plain.job_runs.items() if run.state in ACTIVE_RUN_STATES]
    assert all(dict.__contains__(state.job_runs, run_id) for run_id in active)
    assert all(dict.__contains__(state.canonical, ref) for ref in plain.active_wants_by_ref if ref in plain.canonical)


def test_a_store_whose_rows_are_not_whole_loads_everything(database: Database) -> None:
    events = read_events("v1")
    database.log.append(events)
    assert rows_whole_at(database.changes) == 0
    state, working = load_working_set(database.log, database.changes)
    assert sum(working.faults.evicted.values()) == 0 and state.touched is None
    assert state_digest(state) == state_digest(replayed(events))


@pytest.mark.usefixtures("settle_often")
def test_created_since_walks_records_created_after_a_seq_read_back_ones_aside(database: Database) -> None:
    events = w1_events(2_000)
    projected_then_appended(database, events[:1_500], 1_500)
    live, working = working_live(database)
    state = live.state
    plain = replayed(events[:1_500])
    cold = [uuid for uuid in plain.instances if not dict.__contains__(state.instances, uuid)]
    assert len(cold) > 100
    for uuid in cold[::7]:  # read back: each at the end of the dict's order
        assert state.instances[uuid].__getstate__() == plain.instances[uuid].__getstate__()
    assert working.faults.read_back[INSTANCE] >= len(cold[::7])
    database.log.append(events[1_500:])  # created after those read back
    live.catch_up()
    plain = replayed(events)
    for seen in (0, 200, 700, 1_200, 1_499, 1_700):
        expected = [one for one in plain.instances.values() if one.created_seq > seen]
        held = [one for one in expected if dict.__contains__(state.instances, one.uuid)]
        assert [one.uuid for one in created_since(state.instances, seen)] == [one.uuid for one in held]
        assert [one.uuid for one in created_since(plain.instances, seen)] == [one.uuid for one in expected]


def test_a_pin_keeps_what_was_created_after_its_seq(database: Database) -> None:
    events = w1_events(1_200)
    projected_then_appended(database, events, 1_200)
    live, working = working_live(database)
    database.log.append(w1_events(1_600)[1_200:])
    live.catch_up()
    working.pins["reader"] = lambda: 1_300
    Projector(live, database.changes).project()
    with live.hold() as state:
        working.evict(working.evictable(for_decisions=True))
        created_after = [one for one in replayed(w1_events(1_600)).instances.values() if one.created_seq > 1_300]
        assert created_after and all(dict.__contains__(state.instances, one.uuid) for one in created_after)


def test_a_pass_that_fails_to_write_owes_its_records_to_the_next(
    database: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    events = w1_events(1_000)
    database.log.append(events[:600])
    live = LiveState(database.log, use_snapshots=False)
    projector = Projector(live, database.changes)
    projector.project()
    database.log.append(events[600:])
    live.catch_up()
    real_write = database.changes.write

    def broken(*args: object, **kwargs: object) -> bool:
        raise OSError("the disk is full")

    monkeypatch.setattr(database.changes, "write", broken)
    with pytest.raises(OSError, match="disk is full"):
        projector.project()
    monkeypatch.setattr(database.changes, "write", real_write)
    assert projector.project() == live.head_seq == database.changes.records.watermark()
    stale = [key for kind, key, _seq, body in _rows(database) if body != body_of(live.state, kind, key)]
    assert stale == []


def _rows(database: Database) -> Iterator[tuple[int, str, int, bytes]]:
    for kind, key, seq, body, *_ in database.changes.records.all_rows():
        yield kind, key, seq, body


def test_a_cold_key_hashes_the_same_in_every_process() -> None:
    """Pinned: a snapshot's cold keys are found by the process that loads it (a str's `hash` is salted per process:
    a working set saved by one found none of its cold records in the next)."""
    assert key_code("raw/clicks/date=2026-01-01") == 2017024805821216238
    assert key_code("0b9c2c5e-9a55-5d1e-8f63-3f7c1f0e6b1a") == 3026052399214224825


def test_cold_keys_read_back_twice_at_once_stay_held_then_go_cold_again() -> None:
    keys = ColdKeys()
    added = [f"raw/clicks/date={day}" for day in range(70_000)]  # past a merge into a level
    for key in added:
        keys.add(key)
    for key in (added[5], added[-1]):  # in a level, and among the fresh
        keys.returned(key)
        keys.returned(key)  # two threads read it back
        assert not keys.maybe(key)
        keys.add(key)
        assert keys.maybe(key)
    assert len(keys) == len(added)


def test_a_working_set_is_the_live_state_s_own(tmp_path: Path) -> None:
    with Database.open(f"sqlite:///{tmp_path / 'w.db'}", auto_upgrade=True) as database:
        projected_then_appended(database, read_events("v1"), 30)
        live, working = working_live(database)
        assert live.working is working and working.state is live.state
        assert live.snapshots is None and live.loaded.replayed == live.head_seq


def test_a_record_not_read_back_stops_the_fold_before_the_event_and_rejects_nothing(
    database: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    events = w1_events(1_400)
    projected_then_appended(database, events[:1_000], 1_000)
    live, working = working_live(database)
    database.log.append(events[1_000:])
    source = working.source
    real_read = source.instance

    def unreadable(uuid: str) -> object:
        raise OSError("the database went away")

    monkeypatch.setattr(source, "instance", unreadable)
    with pytest.raises(ReadBackFailed, match="went away"):
        live.catch_up()
    stopped_at = live.head_seq
    assert 1_000 <= stopped_at < len(events)
    plain = replayed(events[:stopped_at])
    assert rejections(live.state) == rejections(plain)  # the event it could not check is not rejected
    monkeypatch.setattr(source, "instance", real_read)
    live.catch_up()
    assert live.head_seq == len(events)
    assert rejections(live.state) == rejections(replayed(events))


@pytest.mark.usefixtures("settle_often")
def test_a_clean_stop_saves_the_working_set_and_the_next_start_folds_only_the_tail(database: Database) -> None:
    events = w1_events(2_400)
    projected_then_appended(database, events[:1_600], 1_200)
    live, working = working_live(database)
    projector = Projector(live, database.changes)
    keep_working_set(live, projector)
    first = replayed(events[:1_600])
    for uuid in [uuid for uuid in first.instances if not dict.__contains__(live.state.instances, uuid)][::5]:
        assert live.state.instances[uuid].uuid == uuid  # read back: at the end of the dict's order
    working.pins["reader"] = lambda: 0  # keeps those held through the stop's eviction
    saved = save_working_set(live, projector)
    assert saved == 1_600
    cold = {kind: len(keys) for kind, keys in working.keys.items()}
    database.log.append(events[1_600:])
    again, restored = working_live(database)
    assert again.head_seq == len(events)
    faults = restored.faults
    assert sum(faults.evicted.values()) == 0  # nothing replayed before 1,600 (a replay evicts as it goes)
    assert {kind: len(keys) + faults.read_back.get(kind, 0) for kind, keys in restored.keys.items()} == cold
    assert Projector(again, database.changes).project() == len(events)
    plain = replayed(events)
    assert rejections(again.state) == rejections(plain)
    assert working_set_digest(restored, database.changes.records) == state_digest(plain)
    for seen in (0, 900, 1_599, 2_000):  # the records read back before the stop are still stepped over
        expected = [one.uuid for one in plain.instances.values() if one.created_seq > seen]
        walked = [one.uuid for one in created_since(again.state.instances, seen)]
        assert walked == [uuid for uuid in expected if dict.__contains__(again.state.instances, uuid)]
    assert_same(database, plain, restored)
    whole = LiveState(database.log)  # a whole state never loads a working set's snapshot
    assert whole.loaded.snapshot_seq == 0 and state_digest(whole.state) == state_digest(plain)


def test_a_saved_working_set_is_not_used_once_the_store_moved_past_it_keeping_no_rows_for_it(
    database: Database, caplog: pytest.LogCaptureFixture
) -> None:
    events = w1_events(1_500)
    projected_then_appended(database, events[:1_000], 1_000)
    live, _ = working_live(database)
    assert save_working_set(live, Projector(live, database.changes)) == 1_000
    with database.changes.records.engine.begin() as conn:
        clear_floor(conn)  # (as a newer format taking the rows does: the rows it left are not kept as of it)
    database.log.append(events[1_000:])
    assert Projector(LiveState(database.log, use_snapshots=False), database.changes).project() == len(events)
    with caplog.at_level("INFO", "partbuild.state.store"):
        again, restored = working_live(database)
    assert "not starting from the working set saved at seq 1000" in caplog.text
    assert again.head_seq == len(events)
    Projector(again, database.changes).project()
    assert working_set_digest(restored, database.changes.records) == state_digest(replayed(events))


def test_a_saved_working_set_that_cannot_be_read_is_replayed_over(
    database: Database, caplog: pytest.LogCaptureFixture
) -> None:
    events = w1_events(600)
    projected_then_appended(database, events, 600)
    database.log.snapshots.save(600, working_set_format(), encode_state(replayed(events), {"keys": {}}))
    with caplog.at_level("WARNING", "partbuild.state.store"):
        live, working = working_live(database)
    assert "the working set saved at seq 600 cannot be read: replaying the log" in caplog.text
    assert live.head_seq == 600 and sum(working.faults.evicted.values()) > 0  # replayed, evicting as it went
