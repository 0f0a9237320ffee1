"""The state store's rows as the source a working-set fold reads its cold records back from (state/fold/cold.py).

A record is read back exactly as the fold held it when it went cold: as its row was at the fold's head (the row,
or the version of it kept when another process wrote it past that head: state/store/row_versions.py). A
working set evicts only a record whose row at its head holds it (state/store/checkpoints.py), and the record
has not changed in the fold since (it would have been read back), so the row as of any later head holds it
too. A row written after the head with no version that held at it is refused (`RowAhead`), never used.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, Final

from sqlalchemy.engine import Connection

from partbuild.state.fold.cold import INSTANCE as COLD_INSTANCE
from partbuild.state.fold.cold import REF as COLD_REF
from partbuild.state.fold.cold import RUN as COLD_RUN
from partbuild.state.fold.cold import WANT as COLD_WANT
from partbuild.state.fold.cold import ColdInstance, ColdMain, ColdRef, ReadBackRefused
from partbuild.state.fold.records import JobRun, Want
from partbuild.state.store.records import INSTANCE, REF, RUN, WANT, RecordStore, loads
from partbuild.state.store.row_versions import check_not_pruned, versions_at

if TYPE_CHECKING:
    from partbuild.state.fold.build_state import BuildState


ROW_KIND: Final = {COLD_INSTANCE: INSTANCE, COLD_WANT: WANT, COLD_RUN: RUN, COLD_REF: REF}  # a kind's rows


_MANY: Final = 500  # rows read to a statement by `many`


class RowAhead(ReadBackRefused):
    """A cold record's row was written after the head of the fold reading it back, and no version of it that
    held at the head was kept."""

    def __init__(self, key: str, row_seq: int, head: int) -> None:
        super().__init__(
            f"the state store's row of {key!r} is as of seq {row_seq}, after this fold's head {head}, and no "
            "version of it as of the head was kept: this working set cannot read its cold records back"
        )


def rows_as_of(
    conn: Connection, records: RecordStore, kind: int, ids: Sequence[str], at: int
) -> tuple[dict[str, tuple[int, bytes]], dict[str, int]]:
    """(seq, body) of the rows of these ids of `kind` as they were at seq `at` (the row, or its version that
    held then: a row written or deleted since), and the seq of the row of each id that has one only after
    `at` (no version held then: the record was created after `at`, or its version was not kept)."""
    main = records.rows(conn, [(kind, key) for key in ids])
    found: dict[str, tuple[int, bytes]] = {}
    ahead: dict[str, int] = {}
    for (_, key), row in main.items():
        if row[0] <= at:
            found[key] = row
        else:
            ahead[key] = row[0]
    if len(found) < len(ids):
        kept = versions_at(conn, kind, [key for key in ids if key not in found], at)
        found.update(kept)
        ahead = {key: seq for key, seq in ahead.items() if key not in kept}
    return found, ahead


class AsOfCheckpoint:
    """A working set loaded from a checkpoint at seq `at` whose rows moved on since (a start after a crash): each
    record cold in it is read back the first time as it was at `at` (its row, or the version of it kept for the
    checkpoint: state/store/row_versions.py); once read back it is held, and goes cold again only where its
    row holds it (`settled_by`), so later reads take the row."""

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
        """`head`: the fold's head. `settled_by`: a seq the rows are whole at, which a load settles the records
        it evicts against (state/store/cold_start.py): until the head reaches it, records are read as of it.
        `checkpoint`: the first reads of a start from a checkpoint. `before_read`: called before each read
        (rows still being written elsewhere: wait for them)."""
        self.records = records
        self.head = head
        self.settled_by = settled_by
        self.checkpoint = checkpoint
        self.before_read = before_read

    def _connect(self) -> Connection:
        if self.before_read is not None:
            self.before_read()
        return self.records.engine.connect()

    def _read(
        self, conn: Connection, kind: int, ids: Sequence[str], *, faulted: bool = False
    ) -> tuple[dict[str, tuple[int, bytes]], int]:
        """The rows of `ids` as of the seq they are read at (returned with them); a row ahead with no version is
        refused (`RowAhead`); an id with no row then, where versions were pruned past that seq, too. `faulted`:
        one record read back into the state (from a checkpoint, the first time as of it)."""
        checkpoint = self.checkpoint
        if checkpoint is not None and faulted and checkpoint.first_read(kind, ids[0]):
            at = checkpoint.at  # (a row ahead of it: a record created since)
            found, _ = rows_as_of(conn, self.records, kind, ids, at)
        else:
            at = max(self.head(), self.settled_by)
            found, ahead = rows_as_of(conn, self.records, kind, ids, at)
            if ahead:
                key, seq = next(iter(ahead.items()))
                raise RowAhead(key, seq, at)
        if len(found) < len(ids):
            check_not_pruned(conn, at, checkpoint=checkpoint is not None and at == checkpoint.at)
        return found, at

    def _row(self, conn: Connection, kind: int, key: str) -> tuple[Any, int]:
        found, at = self._read(conn, kind, [key], faulted=True)
        row = found.get(key)
        return (None if row is None else loads(kind, row[1])), at

    def went_cold(self, kind: str, keys: list[str]) -> None:
        if self.checkpoint is not None:  # their rows hold them now: read back as the rows say from here on
            row_kind = ROW_KIND[kind]
            self.checkpoint.read.update((row_kind, key) for key in keys)

    def many(self, kind: str, keys: list[str]) -> dict[str, Any]:
        row_kind = ROW_KIND[kind]
        found: dict[str, Any] = {}
        with self._connect() as conn:
            for start in range(0, len(keys), _MANY):
                rows, _ = self._read(conn, row_kind, keys[start : start + _MANY])
                for key, (_, body) in rows.items():
                    value = loads(row_kind, body)[0]
                    if value is not None:  # (a ref without a canonical pointer)
                        found[key] = value
        return found

    def instance(self, uuid: str) -> ColdInstance | None:
        with self._connect() as conn:
            row, _ = self._row(conn, INSTANCE, uuid)
        return None if row is None else ColdInstance(*row)

    def want(self, want_id: str) -> tuple[Want, str | None] | None:
        with self._connect() as conn:
            row, _ = self._row(conn, WANT, want_id)
        return None if row is None else (row[0], row[1])

    def run(self, run_id: str) -> tuple[JobRun, bytearray] | None:
        with self._connect() as conn:
            row, at = self._row(conn, RUN, run_id)
            return None if row is None else (row[0], self.records.beats(conn, run_id, upto=at))

    def ref(self, ref: str) -> ColdRef | None:
        with self._connect() as conn:
            row, _ = self._row(conn, REF, ref)
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
