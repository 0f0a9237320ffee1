"""A working-set fold (state/fold/cold.py) decides as a fold holding everything: every golden log and random
histories folded both ways, the working set evicting every record it may after every projection (a few events
apart) and faulting back from the store's rows whatever the next events touch. Same rejections at every step;
once every cold record is read back, the same digest and the same tables."""

from __future__ import annotations

import tempfile
from itertools import islice
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings

from partbuild.examples.clicks.simulate import SimulationPlan, simulate
from partbuild.state.database import Database
from partbuild.state.fold.cold import INSTANCE, REF, RUN, WANT, ColdKeys, canonical_instances, peek
from partbuild.state.log.digest import state_digest
from partbuild.state.log.replay import load_state
from partbuild.state.store.cold_digest import working_set_digest
from partbuild.state.store.cold_replay import replay_in_working_set
from partbuild.state.store.cold_rows import RowAhead, StoreRows
from partbuild.state.store.records import INSTANCE as INSTANCE_ROW

from golden_log import GOLDEN_LOGS, read_events
from stepkit import Step, appendable_histories, materialize
from workingsetkit import assert_same, fold_both_ways


@pytest.mark.parametrize("name", [log.name for log in GOLDEN_LOGS])
def test_a_working_set_folds_every_golden_log_as_a_state_holding_everything(database: Database, name: str) -> None:
    events = read_events(name)
    plain, working = fold_both_ways(database, events, step=4)
    assert (sum(working.faults.evicted.values()) > 0) == bool(plain.instances or plain.wants or plain.job_runs)
    assert_same(database, plain, working)


def test_a_working_set_holds_only_what_it_touched_since_its_last_projection(database: Database) -> None:
    events = read_events("v1")
    plain, working = fold_both_ways(database, events, step=4)
    state = working.state
    held = len(dict.keys(state.instances)) + len(dict.keys(state.job_runs))
    assert held < (len(plain.instances) + len(plain.job_runs)) // 4
    assert working.faults.read_back[INSTANCE] + working.faults.read_back[RUN] > 0  # read back to decide
    assert_same(database, plain, working)


@settings(max_examples=12, derandomize=True, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(steps=appendable_histories)
def test_random_histories_fold_the_same_in_a_working_set(steps: list[Step]) -> None:
    """Histories from the fold's property tests (clock skew, retention with any cutoff, cascades, rejected
    events), evicting after every 2 events."""
    events = [entry.event for entry in materialize(steps) if entry.event is not None]
    if not events:
        return
    with tempfile.TemporaryDirectory() as folder, Database.open(f"sqlite:///{folder}/w.db", auto_upgrade=True) as db:
        plain, working = fold_both_ways(db, events, step=2)
        assert_same(db, plain, working)


def test_a_row_written_after_the_fold_s_head_is_not_read_back(database: Database) -> None:
    events = read_events("v1")
    _, working = fold_both_ways(database, events[:40], step=4)
    cold = next(iter(working.keys))
    assert cold
    behind = StoreRows(database.changes.records, lambda: 3)  # a fold far behind the rows
    uuid = next(key for kind, key, *_ in database.changes.records.all_rows() if kind == INSTANCE_ROW)
    with pytest.raises(RowAhead, match="after this fold's head 3"):
        behind.instance(uuid)


def test_a_walk_over_many_refs_peeks_at_cold_records_without_holding_them(database: Database) -> None:
    events = list(islice(simulate(SimulationPlan(weeks=2, sites=30)), 1_200))
    plain, working = fold_both_ways(database, events, step=100)
    state = working.state
    refs = [*sorted(plain.canonical), "raw/clicks/never", *sorted(plain.first_created)]
    held = (len(dict.keys(state.canonical)), len(dict.keys(state.instances)), dict(working.faults.read_back))
    expected = [(ref, plain.instances[plain.canonical[ref]]) for ref in refs if ref in plain.canonical]
    found = list(canonical_instances(state, refs, chunk=64))
    assert [(ref, one.__getstate__()) for ref, one in found] == [(ref, one.__getstate__()) for ref, one in expected]
    assert len(expected) > 200 and held[0] < len(plain.canonical) // 4  # most of them cold, read by the chunk
    assert (len(dict.keys(state.canonical)), len(dict.keys(state.instances)), working.faults.read_back) == held
    assert peek(state.wants, ["no such want"]) == {} and peek(plain.wants, list(plain.wants)) == plain.wants


def test_cold_keys_say_maybe_for_every_key_added_and_no_for_those_held_again() -> None:
    keys = ColdKeys()
    added = [f"agg/daily/date={day}" for day in range(200_000)]  # past a merge of the fresh hashes into levels
    for key in added:
        keys.add(key)
    assert all(keys.maybe(key) for key in added)
    assert sum(keys.maybe(f"other/{day}") for day in range(10_000)) == 0
    for key in added[::2]:
        keys.returned(key)
    assert not any(keys.maybe(key) for key in added[::2])
    assert all(keys.maybe(key) for key in added[1::2])
    keys.add(added[0])  # cold again
    assert keys.maybe(added[0])
    assert len(keys) == 100_001


@pytest.mark.parametrize("kind", [INSTANCE, WANT, RUN, REF])
def test_every_kind_goes_cold(database: Database, kind: str) -> None:
    _, working = fold_both_ways(database, read_events("v1"), step=4)
    assert working.faults.evicted[kind] > 0


@pytest.mark.parametrize("name", [log.name for log in GOLDEN_LOGS])
def test_a_replay_in_a_working_set_digests_as_a_full_replay(database: Database, tmp_path: Path, name: str) -> None:
    events = read_events(name)
    database.log.append(events)
    with Database.open(f"sqlite:///{tmp_path}/scratch.db", auto_upgrade=True) as scratch:
        working = replay_in_working_set(database.log, scratch.changes.records, every=3)
        assert working.state.head_seq == len(events)
        assert working_set_digest(working, scratch.changes.records) == state_digest(load_state(database.log)[0])


def test_a_replay_in_a_working_set_holds_what_the_last_events_touched(database: Database, tmp_path: Path) -> None:
    events = list(islice(simulate(SimulationPlan(weeks=4, sites=40)), 3_000))
    database.log.append(events)
    seen: list[int] = []
    with Database.open(f"sqlite:///{tmp_path}/scratch.db", auto_upgrade=True) as scratch:
        working = replay_in_working_set(database.log, scratch.changes.records, every=500, progress=seen.append)
        full = load_state(database.log)[0]
        state = working.state
        # What the last two spans touched: the last span's records stay until its rows are known to be in.
        assert len(dict.keys(state.instances)) < len(full.instances) // 5
        assert seen == list(range(500, len(events), 500))  # and the last rows written after
        assert working_set_digest(working, scratch.changes.records) == state_digest(full)
    with Database.open(f"sqlite:///{tmp_path}/again.db", auto_upgrade=True) as again:
        upto = replay_in_working_set(database.log, again.changes.records, upto_seq=1_234)
        assert upto.state.head_seq == 1_234
        assert working_set_digest(upto, again.changes.records) == state_digest(
            load_state(database.log, upto_seq=1_234)[0]
        )
