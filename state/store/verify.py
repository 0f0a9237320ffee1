"""The audit of the state store: its changes, counts and records against a state replayed from the log.

`replay --verify` (and `POST /audit` with `verify`) replays the log to its head; this compares the store's
rows up to its watermark with that state's changes, one span of seqs at a time (`changes_by_span`: each
record is read once, however many spans there are). A retention after the watermark has dropped instances from the
replayed state that the store still holds until the projector reaches it: those rows are left out then.
The records (state/store/records.py) are compared when they are whole at the replay's head: each row with
the replayed record, every replayed record has its row, and the heartbeat rows, the wants by ref and the grid
cells are the replayed records'.
"""

from __future__ import annotations

import itertools
from typing import Any

from partbuild.state.fold.build_state import BuildState
from partbuild.state.fold.history import dropped_deltas_between
from partbuild.state.queries.changes import (
    CANONICAL_MOVED,
    INSTANCE_CREATED,
    INSTANCE_STATE,
    KINDS,
    Change,
    changes_by_span,
)
from partbuild.state.store.cells import all_cells, cell_row
from partbuild.state.store.changes import ChangeStore, change_row, row_change
from partbuild.state.store.counts import CountRow, Counts, count_rows
from partbuild.state.store.projector import DEFAULT_SPAN
from partbuild.state.store.records import (
    KIND_NAMES,
    REF,
    Key,
    RecordStore,
    all_keys,
    beats_of,
    closed_of,
    created_of,
    decoded,
    kind_counts,
    ref_keys,
    row_value,
    want_refs_of,
)


def store_problems(store: ChangeStore, state: BuildState, span: int = DEFAULT_SPAN) -> list[str]:
    """Where the store differs from `state` (replayed to the log's head); [] when it agrees."""
    mark = store.watermark()
    if mark > state.head_seq:
        return [f"the state store is projected up to seq {mark}, after the log's head {state.head_seq}"]
    pending_drops = store.retention_between(mark, state.head_seq)
    counts: Counts = {}
    dropped = _dropped_by_span(state, mark, span)
    for first, last, expected in changes_by_span(state, mark, span):
        stored = store.rows(first, last)
        if pending_drops:
            stored = [row for row in stored if _held(state, row)]
        if stored != list(map(change_row, expected)):  # rows, not changes: nothing is built where they agree
            difference = _first_difference(list(map(row_change, stored)), expected)
            return [f"the state store differs from the replay in seqs ({first}, {last}]: {difference}"]
        # The dropped instances' deltas are the replay's own, whether or not the store has reached their drop.
        expected_counts = count_rows(counts, expected, dropped.pop(first // span, []))
        stored_counts = store.count_rows(first, last)
        if stored_counts != expected_counts:
            difference = _first_count_difference(stored_counts, expected_counts)
            return [f"the state store's counts differ from the replay's in seqs ({first}, {last}]: {difference}"]
        counts.update(((kind, state_code), count) for kind, state_code, _, count in expected_counts)
    return record_problems(store.records, state)


def _dropped_by_span(state: BuildState, last: int, span: int) -> dict[int, list[tuple[int, int, int]]]:
    """What dropped instances added to the counts in (0, `last`], by span (`first // span`), in one pass."""
    found: dict[int, list[tuple[int, int, int]]] = {}
    for delta in dropped_deltas_between(state, 0, last):
        found.setdefault((delta[0] - 1) // span, []).append(delta)
    return found


def record_problems(records: RecordStore, state: BuildState) -> list[str]:
    """Where the record rows differ from `state`'s records, when they are whole at its head; [] otherwise."""
    if records.watermark() != state.head_seq:
        return []
    rows = [0] * len(KIND_NAMES)  # rows of each kind: every one is a held record's (keys are unique)
    for kind, key, _, body, created, closed in records.all_rows():
        held = row_value(state, kind, key)
        if held is None:
            return [f"the state store holds a row of {_named((kind, key))}, which the replay does not hold"]
        if decoded(body) != held:  # the values as rows hold them: no record is built to compare
            return [f"the state store's row of {_named((kind, key))} differs from the replay's record"]
        if created != created_of(state, kind, key):
            return [f"the state store's row of {_named((kind, key))} says it was created at seq {created}"]
        if closed != closed_of(state, kind, key):
            return [f"the state store's row of {_named((kind, key))} says it ended at seq {closed}"]
        rows[kind] += 1
    if rows != kind_counts(state):
        stored = {(row[0], row[1]) for row in records.all_rows()}  # which one: a second pass, only then
        missing = min(key for key in all_keys(state) if key not in stored)
        return [f"the state store has no row of {_named(missing)}, which the replay holds"]
    return _heartbeat_problems(records, state) or _want_ref_problems(records, state) or _cell_problems(records, state)


def _heartbeat_problems(records: RecordStore, state: BuildState) -> list[str]:
    """Where the heartbeat rows differ from the replayed runs' heartbeats after their first."""
    replayed = (beat for run_id in sorted(state.run_heartbeats) for beat in beats_of(state, run_id, 0))
    for stored, expected in itertools.zip_longest(records.all_beats(), replayed):
        if stored != expected:
            said = "none" if stored is None else f"run {stored[0]!r} at seq {stored[1]} ({stored[2]} ms)"
            return [f"the state store's heartbeats differ from the replay's: stored {said}, replayed {expected}"]
    return []


def _want_ref_problems(records: RecordStore, state: BuildState) -> list[str]:
    """Where the rows of the wants by ref differ from the replayed wants' refs."""
    replayed = sorted(row for want in state.wants.values() for row in want_refs_of(want))
    for stored, expected in itertools.zip_longest(records.all_want_refs(), replayed):
        if stored != expected:
            said = "none" if stored is None else f"want {stored[2]!r} naming {stored[0]!r}"
            return [f"the state store's wants by ref differ from the replay's: stored {said}, replayed {expected}"]
    return []


def _cell_problems(records: RecordStore, state: BuildState) -> list[str]:
    """Where the grid cells' rows differ from the replayed refs' cells (their `seq`, when written, aside)."""
    replayed = (
        row for ref in sorted(ref_keys(state)) if (row := cell_row(state, ref, created_of(state, REF, ref) or 0))
    )
    with records.engine.connect() as conn:
        for stored, expected in itertools.zip_longest(all_cells(conn), replayed):
            if stored is None or expected is None or stored[0] != expected[0] or stored[2:] != expected[2:]:
                said = "none" if stored is None else f"ref {stored[0]!r}: cell {stored[2]} since {stored[3]}"
                replay = "none" if expected is None else f"ref {expected[0]!r}: cell {expected[2]} since {expected[3]}"
                return [f"the state store's grid cells differ from the replay's: stored {said}, replayed {replay}"]
    return []


def _named(key: Key) -> str:
    return f"{KIND_NAMES[key[0]]} {key[1]!r}"


def _first_count_difference(stored: list[CountRow], expected: list[CountRow]) -> str:
    for got, want in zip(stored, expected, strict=False):
        if got != want:
            return f"stored (kind, state, seq, count) {got}, replayed {want}"
    if len(stored) > len(expected):
        return f"a count row the replay does not have: {stored[len(expected)]}"
    return f"a count row missing from the store: {expected[len(stored)]}"


def _held(state: BuildState, row: tuple[Any, ...]) -> bool:
    """Whether the state still holds the instance a change's row is about."""
    kind = KINDS[row[1]]
    if kind == CANONICAL_MOVED:
        return row[7] in state.instances
    return kind not in (INSTANCE_CREATED, INSTANCE_STATE) or row[2] in state.instances


def _first_difference(stored: list[Change], expected: list[Change]) -> str:
    """The first change the two lists (both in key order) disagree on, said as what is wrong with the store."""
    for got, want in zip(stored, expected, strict=False):
        if got.key < want.key:
            return f"a change the replay does not have: {got}"
        if want.key < got.key:
            return f"a change missing from the store: {want}"
        if got != want:
            return f"stored {got}, replayed {want}"
    if len(stored) > len(expected):
        return f"a change the replay does not have: {stored[len(expected)]}"
    return f"a change missing from the store: {expected[len(stored)]}"
