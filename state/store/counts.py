"""How many instances, wants and job runs were in each state, by seq, in the `state_counts` table.

A row (kind, state, seq, total) says that from `seq` on, `total` records of that kind were in that state; a
row is written only at the seqs where that count changed. The counts as of any seq are then one index probe
per (kind, state), in one statement, however long the log: what `PastState.counts` answers by scanning every
record. The rows follow from a span's changes (a creation adds one to its state, a move takes one from the
old state and adds one to the new) and from what instances that retention dropped added to the counts
(`history.dropped_deltas_between`: their changes are no longer among the live state's, yet a count as of a
seq before the drop still counts them, as the live state's did then).
"""

from __future__ import annotations

from collections.abc import Iterable
from itertools import groupby

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from partbuild.state.fold.records import InstanceState, JobRunState, WantState
from partbuild.state.queries.changes import INSTANCE_CREATED, INSTANCE_STATE, JOB_RUN_STATE, WANT_STATE, Change
from partbuild.state.schema import state_counts as table

# The counted kinds, by their code in the table, as `BuildState.counts()` names them.
COUNTED: tuple[tuple[str, type[InstanceState] | type[WantState] | type[JobRunState]], ...] = (
    ("instances", InstanceState),
    ("wants", WantState),
    ("job_runs", JobRunState),
)
_KIND_OF_CHANGE = {INSTANCE_CREATED: 0, INSTANCE_STATE: 0, WANT_STATE: 1, JOB_RUN_STATE: 2}
INSTANCES = 0

Counts = dict[tuple[int, int], int]  # (kind, state) -> count
CountRow = tuple[int, int, int, int]  # kind, state, seq, total: the table's columns


def count_rows(start: Counts, changes: Iterable[Change], dropped: Iterable[tuple[int, int, int]]) -> list[CountRow]:
    """The rows of a span: the count of each (kind, state) at each seq of the span where it changed.

    `start`: the counts before the span. `changes`: the span's changes. `dropped`: (seq, instance state,
    delta) of the instances retention dropped (`history.dropped_deltas_between`).
    """
    deltas: list[tuple[int, int, int, int]] = []  # seq, kind, state, delta
    for change in changes:
        kind = _KIND_OF_CHANGE.get(change.kind)
        if kind is None or change.to_state is None:
            continue  # a canonical pointer moved: nothing to count
        if change.from_state is not None:
            deltas.append((change.seq, kind, int(change.from_state), -1))
        deltas.append((change.seq, kind, int(change.to_state), 1))
    deltas += [(seq, INSTANCES, state, delta) for seq, state, delta in dropped]
    deltas.sort(key=_seq)
    counts = dict(start)
    rows: list[CountRow] = []
    for seq, at_seq in groupby(deltas, key=_seq):
        moved: Counts = {}
        for _, kind, state, delta in at_seq:
            moved[kind, state] = moved.get((kind, state), 0) + delta
        for (kind, state), delta in sorted(moved.items()):
            if delta:  # moves that cancel out within one seq change no count
                counts[kind, state] = counts.get((kind, state), 0) + delta
                rows.append((kind, state, seq, counts[kind, state]))
    return rows


def _seq(delta: tuple[int, ...]) -> int:
    return delta[0]


# One statement, a scalar subquery per (kind, state): the newest row at or before the seq, an index probe each.
_AS_OF = sa.bindparam("seq", type_=sa.BigInteger())
_COUNTS_AS_OF = sa.select(
    *(
        sa.select(table.c.total)
        .where(table.c.kind == kind, table.c.state == int(state), table.c.seq <= _AS_OF)
        .order_by(table.c.seq.desc())
        .limit(1)
        .scalar_subquery()
        .label(f"c{kind}_{int(state)}")
        for kind, (_, states) in enumerate(COUNTED)
        for state in states
    )
)


def counts_at(conn: Connection, seq: int) -> Counts:
    """The counts as of `seq` from the rows (0 where none was written by then)."""
    values = conn.execute(_COUNTS_AS_OF, {"seq": seq}).one()
    keys = [(kind, int(state)) for kind, (_, states) in enumerate(COUNTED) for state in states]
    return {key: value or 0 for key, value in zip(keys, values, strict=True)}


def counts_by_name(counts: Counts) -> dict[str, dict[str, int]]:
    """Shaped as `BuildState.counts()`: kind name -> state name -> count."""
    return {
        name: {state.name.lower(): counts.get((kind, int(state)), 0) for state in states}
        for kind, (name, states) in enumerate(COUNTED)
    }
