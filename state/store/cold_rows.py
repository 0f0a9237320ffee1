"""The state store's rows as the source a working-set fold reads its cold records back from (state/fold/cold.py).

A record is read back exactly as the fold held it when it went cold: its row was written at or after its last
change and at or before the state's head (a working set evicts only what its own projection wrote). A row
written after the state's head is another process's, ahead of this fold: reading it would decide with the
future, so it is refused (`RowAhead`), never used.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, Final

from sqlalchemy.engine import Connection

from partbuild.state.fold.cold import INSTANCE as COLD_INSTANCE
from partbuild.state.fold.cold import REF as COLD_REF
from partbuild.state.fold.cold import RUN as COLD_RUN
from partbuild.state.fold.cold import WANT as COLD_WANT
from partbuild.state.fold.cold import ColdInstance, ColdMain, ColdRef, ReadBackFailed
from partbuild.state.fold.records import JobRun, Want
from partbuild.state.store.records import INSTANCE, REF, RUN, WANT, RecordStore, loads
from partbuild.state.store.rows_before import row_before

if TYPE_CHECKING:
    from partbuild.state.fold.build_state import BuildState


ROW_KIND: Final = {COLD_INSTANCE: INSTANCE, COLD_WANT: WANT, COLD_RUN: RUN, COLD_REF: REF}  # a kind's rows


_MANY: Final = 500  # rows read to a statement by `many`


class RowAhead(ReadBackFailed):
    """A cold record's row was written after the head of the fold reading it back."""

    def __init__(self, key: str, row_seq: int, head: int) -> None:
        super().__init__(
            f"the state store's row of {key!r} is as of seq {row_seq}, after this fold's head {head}: another "
            "process projected past it, so this working set cannot read its cold records back"
        )


class AsOfCheckpoint:
    """A working set loaded from a checkpoint at seq `at` whose rows moved on since (a start after a crash): each
    record cold in it is read back the first time as it was at `at` (its row, or the copy of it kept when the row
    first moved past `at`: state/store/rows_before.py); once read back it is held, and goes cold again only
    where its row holds it (`settled_by`), so later reads take the row."""

    def __init__(self, at: int) -> None:
        self.at = at
        self.read: set[tuple[int, str]] = set()  # keys read back since the load (as of `at` that once)

    def first_read(self, kind: int, key: str) -> bool:
        if (kind, key) in self.read:
            return False
        self.read.add((kind, key))
        return True


class StoreRows:
    """`ColdSource` over a `RecordStore`: one short read per record faulted back."""

    def __init__(
        self,
        records: RecordStore,
        head: Callable[[], int],
        *,
        settled_by: int = 0,
        checkpoint: AsOfCheckpoint | None = None,
        before_read: Callable[[], None] | None = None,
    ) -> None:
        """`head`: the fold's head. `settled_by`: a seq up to which the rows are known to hold what this fold
        evicts (a load from rows whole there, state/store/cold_start.py): a row as of a seq after the head but
        not after it is read back too. `checkpoint`: the first reads of a start from a checkpoint.
        `before_read`: called before each read (rows still being written elsewhere: wait for them)."""
        self.records = records
        self.head = head
        self.settled_by = settled_by
        self.checkpoint = checkpoint
        self.before_read = before_read

    def _connect(self) -> Connection:
        if self.before_read is not None:
            self.before_read()
        return self.records.engine.connect()

    def _row(self, conn: Connection, kind: int, key: str) -> Any:
        checkpoint = self.checkpoint
        if checkpoint is not None and checkpoint.first_read(kind, key):
            return self._row_at_checkpoint(conn, kind, key, checkpoint.at)
        found = self.records.rows(conn, [(kind, key)]).get((kind, key))
        return None if found is None else self._checked(kind, key, *found)

    def _checked(self, kind: int, key: str, seq: int, body: bytes) -> Any:
        """A row's record decoded, unless the row is ahead of the fold (`RowAhead`)."""
        if seq > (head := self.head()) and seq > self.settled_by:
            raise RowAhead(key, seq, head)
        return loads(kind, body)

    def _row_at_checkpoint(self, conn: Connection, kind: int, key: str, at: int) -> Any:
        found = row_before(conn, kind, key) or self.records.rows(conn, [(kind, key)]).get((kind, key))
        if found is None or found[0] > at:
            return None  # no row then: the record did not exist at the checkpoint (or only in memory)
        return loads(kind, found[1])

    def went_cold(self, kind: str, keys: list[str]) -> None:
        if self.checkpoint is not None:  # their rows hold them now: read back as the rows say from here on
            row_kind = ROW_KIND[kind]
            self.checkpoint.read.update((row_kind, key) for key in keys)

    def many(self, kind: str, keys: list[str]) -> dict[str, Any]:
        row_kind = ROW_KIND[kind]
        found: dict[str, Any] = {}
        with self._connect() as conn:
            for start in range(0, len(keys), _MANY):
                rows = self.records.rows(conn, [(row_kind, key) for key in keys[start : start + _MANY]])
                for (_, key), (seq, body) in rows.items():
                    value = self._checked(row_kind, key, seq, body)[0]
                    if value is not None:  # (a ref without a canonical pointer)
                        found[key] = value
        return found

    def instance(self, uuid: str) -> ColdInstance | None:
        with self._connect() as conn:
            row = self._row(conn, INSTANCE, uuid)
        return None if row is None else ColdInstance(*row)

    def want(self, want_id: str) -> tuple[Want, str | None] | None:
        with self._connect() as conn:
            row = self._row(conn, WANT, want_id)
        return None if row is None else (row[0], row[1])

    def run(self, run_id: str) -> tuple[JobRun, bytearray] | None:
        with self._connect() as conn:
            row = self._row(conn, RUN, run_id)
            return None if row is None else (row[0], self.records.beats(conn, run_id))

    def ref(self, ref: str) -> ColdRef | None:
        with self._connect() as conn:
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
