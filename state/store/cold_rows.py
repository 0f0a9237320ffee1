"""The state store's rows as the source a working-set fold reads its cold records back from (state/fold/cold.py).

A record is read back exactly as the fold held it when it went cold: its row was written at or after its last
change and at or before the state's head (a working set evicts only what its own projection wrote). A row
written after the state's head is another process's, ahead of this fold: reading it would decide with the
future, so it is refused (`RowAhead`), never used.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from sqlalchemy.engine import Connection

from partbuild.state.fold.cold import ColdInstance, ColdMain, ColdRef, ReadBackFailed
from partbuild.state.fold.records import JobRun, Want
from partbuild.state.store.records import INSTANCE, REF, RUN, WANT, RecordStore, loads

if TYPE_CHECKING:
    from partbuild.state.fold.build_state import BuildState


class RowAhead(ReadBackFailed):
    """A cold record's row was written after the head of the fold reading it back."""

    def __init__(self, key: str, row_seq: int, head: int) -> None:
        super().__init__(
            f"the state store's row of {key!r} is as of seq {row_seq}, after this fold's head {head}: another "
            "process projected past it, so this working set cannot read its cold records back"
        )


class StoreRows:
    """`ColdSource` over a `RecordStore`: one short read per record faulted back."""

    def __init__(self, records: RecordStore, head: Callable[[], int], *, settled_by: int = 0) -> None:
        """`head`: the fold's head. `settled_by`: a seq up to which the rows are known to hold what this fold
        evicts (a load from rows whole there, state/store/cold_start.py): a row as of a seq after the head but
        not after it is read back too."""
        self.records = records
        self.head = head
        self.settled_by = settled_by

    def _row(self, conn: Connection, kind: int, key: str) -> Any:
        found = self.records.rows(conn, [(kind, key)]).get((kind, key))
        if found is None:
            return None
        seq, body = found
        if seq > (head := self.head()) and seq > self.settled_by:
            raise RowAhead(key, seq, head)
        return loads(kind, body)

    def instance(self, uuid: str) -> ColdInstance | None:
        with self.records.engine.connect() as conn:
            row = self._row(conn, INSTANCE, uuid)
        return None if row is None else ColdInstance(*row)

    def want(self, want_id: str) -> tuple[Want, str | None] | None:
        with self.records.engine.connect() as conn:
            row = self._row(conn, WANT, want_id)
        return None if row is None else (row[0], row[1])

    def run(self, run_id: str) -> tuple[JobRun, bytearray] | None:
        with self.records.engine.connect() as conn:
            row = self._row(conn, RUN, run_id)
            return None if row is None else (row[0], self.records.beats(conn, run_id))

    def ref(self, ref: str) -> ColdRef | None:
        with self.records.engine.connect() as conn:
            row = self._row(conn, REF, ref)
            wants = self.records.wants_of_ref(conn, ref, self.head())
        if row is None and not wants:
            return None
        canonical, first, fields, serving = row if row is not None else (None, None, None, None)
        return ColdRef(canonical, first, fields, serving, wants)


def refs_known(state: BuildState, records: RecordStore | None, prefix: str = "") -> Iterator[str]:
    """Every ref starting with `prefix` that `state` has a canonical pointer for, or may have: those it holds
    and, for a working set, those in the store's rows (gone cold, or changed since; the caller looks each up).
    Call it holding the state's read lock."""
    canonical = state.canonical
    held = [ref for ref in dict.keys(canonical) if ref.startswith(prefix)]
    yield from held
    if isinstance(canonical, ColdMain) and records is not None:
        seen = set(held)
        with records.engine.connect() as conn:
            yield from (ref for ref in records.ids(conn, REF, prefix) if ref not in seen)
