"""The whole state read from the state store alone (`stored_state`): as of every seq of every golden log and of
random histories, every read a `StateView` declares answers what the live state's past answers, and where
retention dropped nothing, what a state replayed to that seq holds. No live state is asked: the rows, the
counts and (for the clock) the log are all it reads."""

from __future__ import annotations

import pickle
import tempfile
from collections.abc import Mapping, Sequence
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings

from partbuild.state.database import Database
from partbuild.state.fold.build_state import BuildState
from partbuild.state.fold.past import HistoryDropped, PastState
from partbuild.state.fold.records import JobRun, Want, _Record
from partbuild.state.fold.view import StateView
from partbuild.state.log.live import LiveState
from partbuild.state.store.projector import Projector
from partbuild.state.store.stored import open_stored, stored_state

from golden_log import GOLDEN_LOGS, read_events
from stepkit import Step, appendable_histories, materialize
from storekit import projected_while_growing

# Members read as a whole (mappings and lists); the methods are read per ref below.
WHOLE = (
    "head_seq",
    "clock_ms",
    "instances",
    "wants",
    "job_runs",
    "canonical",
    "wants_by_ref",
    "rejections",
    "check_results",
    "check_requests",
    "pending_check_requests",
    "groups",
    "sources",
    "subscriptions",
    "schedules",
    "reactions",
    "reaction_pending",
    "want_causes",
    "bucket_layouts",
    "bucket_runs",
    "active_run_ids",
    "active_wants_by_ref",
    "wanted_instance_counts",
    "serving",
)
SAMPLE_EVERY = 5  # on logs longer than this, every 5th seq and the last five
_SKIPPED = {
    Want: (Want.__slots__.index("tally"), Want.__slots__.index("history")),
    JobRun: (JobRun.__slots__.index("history"),),
}
# Walked in the order the live state keeps: records made one per event (an instance is made with others).
ORDERED = ("wants", "job_runs", "rejections", "check_requests", "active_run_ids", "pending_check_requests")


def _plain(value: Any) -> Any:
    """A read's value in a comparable form: records as their fields, small records pickled."""
    if isinstance(value, Mapping):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, list | tuple) or (isinstance(value, Sequence) and not isinstance(value, str | bytes)):
        return [_plain(item) for item in value]
    if isinstance(value, _Record):
        # Not compared: a want's tally (the fold's bookkeeping of an active want: the rows leave it out) and
        # the packed history of a want or run (derived; a record rebuilt as of a seq has none, the live one has).
        skipped = _SKIPPED.get(type(value), ())
        fields = tuple(None if index in skipped else field for index, field in enumerate(value.__getstate__()))
        return (type(value).__name__, _plain(fields))
    if hasattr(value, "digest_values"):  # a small record (a group, a subscription): as the digest sees it
        return (type(value).__name__, _plain(value.digest_values()))
    if type(value).__module__.startswith("partbuild") and not isinstance(value, int):
        return pickle.dumps(value)  # a small record with no digest form (a schedule's row: plain values)
    return value


def _read(state: StateView, name: str) -> Any:
    try:
        return _plain(getattr(state, name))
    except HistoryDropped:
        return "dropped"


def view(state: StateView) -> dict[str, Any]:
    """Every read the protocol declares, materialized."""
    found = {name: _read(state, name) for name in WHOLE}
    # Causes are kept with their wants and read for a want that exists: a past state has its future wants' too.
    found["want_causes"] = {key: cause for key, cause in found["want_causes"].items() if key in found["wants"]}
    for name in ORDERED:
        found[f"{name} order"] = list(getattr(state, name).keys() if name != "rejections" else found[name])
    refs = sorted(set(found["canonical"]) | set(found["wants_by_ref"]))
    for method in ("canonical_instance", "served_instance"):
        found[method] = {ref: _read_call(state, method, ref) for ref in refs}
    found["active_wants_for_ref"] = {ref: _plain(list(state.active_wants_for_ref(ref))) for ref in refs}
    found["counts"] = state.counts()
    return found


def _read_call(state: StateView, method: str, ref: str) -> Any:
    try:
        return _plain(getattr(state, method)(ref))
    except HistoryDropped:
        return "dropped"


def differences(stored: dict[str, Any], expected: dict[str, Any]) -> list[str]:
    return [
        f"{name}: stored {stored[name]!r}, expected {expected[name]!r}"
        for name in expected
        if stored[name] != expected[name]
    ]


def _check_every_seq(database: Database, live: LiveState, events: list[Any]) -> None:
    """As of every seq the store holds, the stored state reads as the live state's past does, and, while
    retention has dropped nothing, as a state replayed to that seq."""
    head = live.head_seq
    replayed = BuildState()
    with open_stored(database.changes.records) as stored:
        assert stored is not None and stored.head_seq == head
        for seq in range(head + 1):
            if seq:
                replayed.apply(seq, events[seq - 1])
            if seq % SAMPLE_EVERY and head - seq > SAMPLE_EVERY:  # a sample of a long log, and its end
                continue
            from_rows = view(stored_state(stored, seq, database.log, database.changes.counts))
            with live.read_as_of(seq) as past:
                assert differences(from_rows, view(past)) == [], seq
            if not live.state.dropped_instances:
                assert differences(from_rows, view(replayed)) == [], seq


@pytest.mark.parametrize("name", [log.name for log in GOLDEN_LOGS])
def test_every_read_as_of_every_seq_of_a_golden_log_from_the_store_is_the_live_state_s(
    database: Database, name: str
) -> None:
    events = read_events(name)
    _check_every_seq(database, projected_while_growing(database, events), events)


@settings(max_examples=8, derandomize=True, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(steps=appendable_histories)
def test_random_histories_read_from_the_store_as_from_the_live_state(steps: list[Step]) -> None:
    """Histories from the fold's property tests (tests/kits/stepkit.py: clock skew, retention with any cutoff,
    cascades, rejected events), projected every 3 events."""
    events = [entry.event for entry in materialize(steps) if entry.event is not None]
    if not events:
        return
    with tempfile.TemporaryDirectory() as folder, Database.open(f"sqlite:///{folder}/s.db", auto_upgrade=True) as db:
        _check_every_seq(db, projected_while_growing(db, events, step=3), events)


def test_a_stored_state_reads_nothing_of_a_live_state(database: Database) -> None:
    """The rows alone: a process that never folded the log answers as one that did."""
    events = read_events("v1")
    live = projected_while_growing(database, events)
    head = live.head_seq
    with open_stored(database.changes.records) as stored:
        assert stored is not None
        state = stored_state(stored, head, database.log, database.changes.counts)
        assert isinstance(state, PastState) and state.live is stored
        assert differences(view(state), view(live.state)) == []


@pytest.mark.parametrize("name", ["v1", "outcomes"])
def test_while_the_changes_run_ahead_of_the_rows_reads_are_as_of_the_rows_watermark(
    database: Database, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A projecting server that began tracking past the changes' watermark writes the spans before, scanned,
    without rows, then dumps its records: in between, the store answers as of the rows' watermark, as a replay
    to that seq would (before, it answered nothing: a read replica said 503 "not whole yet")."""
    events = read_events(name)
    middle = len(events) // 2
    projected_while_growing(database, events[:middle])
    database.log.append(events[middle:])
    late = LiveState(database.log)  # folded to the head before its projector's first pass
    projector = Projector(late, database.changes)
    monkeypatch.setattr(projector, "_dump", lambda _loads: None)  # stopped before its records are written
    projector.project()
    assert database.changes.watermark() == len(events) and database.changes.records.watermark() == middle
    replayed = BuildState()
    for seq, event in enumerate(events[:middle], 1):
        replayed.apply(seq, event)
    with open_stored(database.changes.records) as stored:
        assert stored is not None and stored.head_seq == middle
        from_rows = view(stored_state(stored, middle, database.log, database.changes.counts))
        assert differences(from_rows, view(replayed)) == []
    monkeypatch.undo()
    projector.project()  # the records dumped: whole at the head again
    with open_stored(database.changes.records) as stored:
        assert stored is not None and stored.head_seq == len(events)
