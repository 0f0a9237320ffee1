"""The audit of the state store: its changes, counts and records against a state replayed from the log.

`replay --verify` (and `POST /audit` with `verify`) replays the log to its head; this compares the store's
rows up to its watermark with that state's changes, one span of seqs at a time (`changes_by_span`: each
record is read once, however many spans there are). A retention after the watermark has dropped instances from the
replayed state that the store still holds until the projector reaches it: those rows are left out then.
The records (state/store/records.py) are compared when they are whole at the replay's head: each row with
the replayed record (its bytes with the record pickled; only where they differ, its values decoded), every
replayed record has its row, and the heartbeat rows, the wants by ref and the grid cells are the replayed
records'. The rows are read a chunk at a time on the driver's cursor (state/store/row_stream.py), and those of
a chunk compared at once with as many of the replay's.
"""

from __future__ import annotations

import itertools
from bisect import bisect_right
from collections.abc import Callable, Iterable, Iterator
from contextlib import closing
from typing import Any, Final

import sqlalchemy as sa
from sqlalchemy.engine import Connection

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
from partbuild.state.schema import (
    state_cells,
    state_changes,
    state_counts,
    state_heartbeats,
    state_records,
    state_want_refs,
)
from partbuild.state.store.cells import cell_row
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
    body_of,
    closed_of,
    comparable,
    created_of,
    decoded,
    kind_counts,
    ref_keys,
    row_value,
    want_refs_of,
)
from partbuild.state.store.row_stream import Row, row_chunks


def store_problems(store: ChangeStore, state: BuildState, span: int = DEFAULT_SPAN) -> list[str]:
    """Where the store differs from `state` (replayed to the log's head); [] when it agrees."""
    mark = store.watermark()
    if mark > state.head_seq:
        return [f"the state store is projected up to seq {mark}, after the log's head {state.head_seq}"]
    pending_drops = store.retention_between(mark, state.head_seq)
    counts: Counts = {}
    dropped = _dropped_by_span(state, mark, span)
    # The count rows in one walk, taken a span at a time: their key leads with (kind, state), so a read of one
    # span's would scan the whole table. On the connection the changes are read on: one snapshot.
    counts_query = _in_order(state_counts, _COUNT_ORDER, state_counts.c.seq <= mark)
    with store.records.engine.connect() as conn, closing(row_chunks(conn, counts_query)) as count_chunks:
        stored_counts = _Upto(count_chunks)
        for first, last, expected in changes_by_span(state, mark, span):
            stored = _all(conn, _in_order(state_changes, _CHANGE_ORDER, _in_span(state_changes, first, last)))
            if pending_drops:
                stored = [row for row in stored if _held(state, row)]
            if stored != list(map(change_row, expected)):  # rows, not changes: nothing is built where they agree
                difference = _first_difference(list(map(row_change, stored)), expected)
                return [f"the state store differs from the replay in seqs ({first}, {last}]: {difference}"]
            # The dropped instances' deltas are the replay's own, whether or not the store has reached their drop.
            expected_counts = count_rows(counts, expected, dropped.pop(first // span, []))
            span_counts = stored_counts.upto(last)
            if span_counts != expected_counts:
                difference = _first_count_difference(span_counts, expected_counts)
                return [f"the state store's counts differ from the replay's in seqs ({first}, {last}]: {difference}"]
            counts.update(((kind, state_code), count) for kind, state_code, _, count in expected_counts)
    return record_problems(store.records, state)


# The orders the store's rows are compared in: a span's changes by key, the count rows by seq, kind, state.
_CHANGE_ORDER: Final = state_changes.primary_key.columns
_COUNT_ORDER: Final = (state_counts.c.seq, state_counts.c.kind, state_counts.c.state)


def _in_order(table: sa.Table, order: Iterable[Any], where: Any = None) -> sa.Select[Any]:
    query = sa.select(table).order_by(*order)
    return query if where is None else query.where(where)


def _in_span(table: sa.Table, first: int, last: int) -> Any:
    return sa.and_(table.c.seq > first, table.c.seq <= last)


def _all(conn: Connection, query: sa.Select[Any]) -> list[Row]:
    with closing(row_chunks(conn, query)) as chunks:
        return list(itertools.chain.from_iterable(chunks))


class _Upto:
    """Chunks of rows in seq order (seq their third column, as a count row's), taken a span of seqs at a time."""

    def __init__(self, chunks: Iterator[list[Row]]) -> None:
        self._chunks = chunks
        self._chunk: list[Row] = []  # the rows of the chunk at hand not taken yet

    def upto(self, last: int) -> list[Row]:
        """The rows not taken yet up to seq `last`."""
        taken: list[Row] = []
        while True:
            chunk = self._chunk or next(self._chunks, [])
            cut = bisect_right(chunk, last, key=_seq_of)  # a chunk's rows at a time, not a row at a time
            taken += chunk[:cut]
            self._chunk = chunk[cut:]
            if self._chunk or not chunk:
                return taken


def _seq_of(row: Row) -> int:
    return int(row[2])


def _dropped_by_span(state: BuildState, last: int, span: int) -> dict[int, list[tuple[int, int, int]]]:
    """What dropped instances added to the counts in (0, `last`], by span (`first // span`), in one pass."""
    found: dict[int, list[tuple[int, int, int]]] = {}
    for delta in dropped_deltas_between(state, 0, last):
        found.setdefault((delta[0] - 1) // span, []).append(delta)
    return found


# A record's row without the seq it was written at (the rows are compared with the replay's records).
_RECORD_ROWS: Final = sa.select(*(c for c in state_records.columns if c.name != "seq")).order_by(
    *state_records.primary_key.columns
)


def record_problems(records: RecordStore, state: BuildState) -> list[str]:
    """Where the record rows differ from `state`'s records, when they are whole at its head; [] otherwise."""
    if records.watermark() != state.head_seq:
        return []
    rows = [0] * len(KIND_NAMES)  # rows of each kind: every one is a held record's (keys are unique)
    with records.engine.connect() as conn, closing(row_chunks(conn, _RECORD_ROWS)) as chunks:
        for chunk in chunks:
            for kind, key, body, created, closed in chunk:
                held = body_of(state, kind, key)
                if held is None:
                    return [f"the state store holds a row of {_named((kind, key))}, which the replay does not hold"]
                # The values, not the bytes: two picklings of equal values may differ (equal bytes, equal values).
                if body != held and comparable(kind, decoded(body)) != comparable(kind, row_value(state, kind, key)):
                    return [f"the state store's row of {_named((kind, key))} differs from the replay's record"]
                if created != created_of(state, kind, key):
                    return [f"the state store's row of {_named((kind, key))} says it was created at seq {created}"]
                if closed != closed_of(state, kind, key):
                    return [f"the state store's row of {_named((kind, key))} says it ended at seq {closed}"]
                rows[kind] += 1
        if rows != kind_counts(state):
            keys = sa.select(state_records.c.kind, state_records.c.id)  # which one: a second pass, only then
            with closing(row_chunks(conn, keys)) as key_chunks:
                stored = {(kind, key) for chunk in key_chunks for kind, key in chunk}
            missing = min(key for key in all_keys(state) if key not in stored)
            return [f"the state store has no row of {_named(missing)}, which the replay holds"]
        return _heartbeat_problems(conn, state) or _want_ref_problems(conn, state) or _cell_problems(conn, state)


def _heartbeat_problems(conn: Connection, state: BuildState) -> list[str]:
    """Where the heartbeat rows differ from the replayed runs' heartbeats after their first."""
    replayed = (beat for run_id in sorted(state.run_heartbeats) for beat in beats_of(state, run_id, 0))
    with closing(row_chunks(conn, _in_order(state_heartbeats, state_heartbeats.primary_key.columns))) as stored_rows:
        found = _first_unequal(stored_rows, replayed)
    if found is not None:
        stored, expected = found
        said = "none" if stored is None else f"run {stored[0]!r} at seq {stored[1]} ({stored[2]} ms)"
        return [f"the state store's heartbeats differ from the replay's: stored {said}, replayed {expected}"]
    return []


def _want_ref_problems(conn: Connection, state: BuildState) -> list[str]:
    """Where the rows of the wants by ref differ from the replayed wants' refs."""
    replayed = sorted(row for want in state.wants.values() for row in want_refs_of(want))
    with closing(row_chunks(conn, _in_order(state_want_refs, state_want_refs.primary_key.columns))) as stored_rows:
        found = _first_unequal(stored_rows, iter(replayed))
    if found is not None:
        stored, expected = found
        said = "none" if stored is None else f"want {stored[2]!r} naming {stored[0]!r}"
        return [f"the state store's wants by ref differ from the replay's: stored {said}, replayed {expected}"]
    return []


def _cell_problems(conn: Connection, state: BuildState) -> list[str]:
    """Where the grid cells' rows differ from the replayed refs' cells (their `seq`, when written, aside)."""
    replayed = (
        row for ref in sorted(ref_keys(state)) if (row := cell_row(state, ref, created_of(state, REF, ref) or 0))
    )
    with closing(row_chunks(conn, _in_order(state_cells, (state_cells.c.ref,)))) as stored_rows:
        found = _first_unequal(stored_rows, replayed, _unwritten)
    if found is not None:
        stored, expected = found
        said = "none" if stored is None else f"ref {stored[0]!r}: cell {stored[2]} since {stored[3]}"
        replay = "none" if expected is None else f"ref {expected[0]!r}: cell {expected[2]} since {expected[3]}"
        return [f"the state store's grid cells differ from the replay's: stored {said}, replayed {replay}"]
    return []


def _unwritten(cell: Row) -> Row:
    """A grid cell's row without the seq it was written at."""
    return (cell[0], *cell[2:])


def _first_unequal(
    stored: Iterator[list[Row]], replayed: Iterator[Row], view: Callable[[Row], Row] | None = None
) -> tuple[Row | None, Row | None] | None:
    """The first pair of a stored row and the replayed one at its place that differ (as `view`s), None for one
    past its side's end; None if none does. A chunk of rows is compared at once, and only where it differs
    row by row."""
    for chunk in stored:
        expected = list(itertools.islice(replayed, len(chunk)))
        if chunk == expected or (view is not None and list(map(view, chunk)) == list(map(view, expected))):
            continue
        for got, want in itertools.zip_longest(chunk, expected):
            if want is None or (got != want if view is None else view(got) != view(want)):
                return got, want
    extra = next(replayed, None)
    return None if extra is None else (None, extra)


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
