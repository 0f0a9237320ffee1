"""Point reads from the state store: a record, a ref's canonical and served instance, now or as of a seq.

`StoredRecords` answers from the rows of state/store/records.py alone, no live state: the record tables a
read of the past looks up (`RecordTables`) are mappings that read a row the first time a key is asked for,
all in one snapshot of the database, and the record as of N is rebuilt by the very functions that rebuild
it from the live state (state/fold/past.py). It answers only while the rows are whole at the changes'
watermark (`open_stored` returns None otherwise): then every record that existed at that seq is in a row
written at or before it, and none is missing that a row names.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, TypeVar

from sqlalchemy.engine import Connection

from partbuild.state.db import begin_snapshot
from partbuild.state.fold.history import HEARTBEAT_PAIR
from partbuild.state.fold.past import canonical_at, instance_at, run_at, served_at, want_at
from partbuild.state.fold.records import Instance, JobRun, Want
from partbuild.state.store.changes import changes_watermark
from partbuild.state.store.records import INSTANCE, REF, RUN, WANT, Key, RecordStore, loads, records_watermark

V = TypeVar("V")


class _ByKey(Mapping[str, V]):
    """A table of the rows, read by key only."""

    def __getitem__(self, key: str) -> V:
        raise NotImplementedError

    def __iter__(self) -> Iterator[str]:
        raise TypeError("the state store's tables are read by key, not walked")

    def __len__(self) -> int:
        raise TypeError("the state store's tables are read by key, not counted")


class _Rows(_ByKey[V]):
    """One part of one kind of row, by key (a missing row, or a part that is None, is a missing key)."""

    def __init__(self, stored: StoredRecords, kind: int, part: Callable[[Any], V | None]) -> None:
        self._stored = stored
        self._kind = kind
        self._part = part

    def __getitem__(self, key: str) -> V:
        decoded = self._stored.decoded(self._kind, key)
        value = None if decoded is None else self._part(decoded)
        if value is None:
            raise KeyError(key)
        return value


class _Fields(_ByKey[tuple[object, ...]]):
    """`BuildState.fields`: kept by instance UUID (in the instance's row) or by ref (in the ref's)."""

    def __init__(self, stored: StoredRecords) -> None:
        self._stored = stored

    def __getitem__(self, key: str) -> tuple[object, ...]:
        for kind, index in ((INSTANCE, 2), (REF, 2)):
            decoded = self._stored.decoded(kind, key)
            if decoded is not None and decoded[index] is not None:
                return decoded[index]
        raise KeyError(key)


def _itself(value: V) -> V:
    return value


class StoredRecords:
    """The records as of the store's watermark (`head_seq`), read from its rows: see the module docstring."""

    def __init__(self, records: RecordStore, conn: Connection, head_seq: int) -> None:
        self.head_seq = head_seq
        self._records = records
        self._conn = conn
        self._decoded: dict[Key, Any] = {}
        self.instances: Mapping[str, Instance] = _Rows(self, INSTANCE, _first)
        self.instance_histories: Mapping[str, int] = _Rows(self, INSTANCE, _second)
        self.wants: Mapping[str, Want] = _Rows(self, WANT, _first)
        self.job_runs: Mapping[str, JobRun] = _Rows(self, RUN, _first)
        self.canonical: Mapping[str, str] = _Rows(self, REF, _first)
        self.first_created: Mapping[str, int] = _Rows(self, REF, _second)
        self.serving: Mapping[str, str] = _Rows(self, REF, _fourth)
        self.fields: Mapping[str, tuple[object, ...]] = _Fields(self)

    def decoded(self, kind: int, key: str) -> Any:
        """The decoded body of one row (None: there is none), read once per key."""
        found = self._decoded.get((kind, key), self)
        if found is self:
            row = self._records.rows(self._conn, [(kind, key)]).get((kind, key))
            found = self._decoded[(kind, key)] = None if row is None else loads(kind, row[1])
        return found

    def _seq(self, seq: int | None) -> int:
        if seq is None:
            return self.head_seq
        if seq > self.head_seq:
            raise ValueError(f"the state store holds the records up to seq {self.head_seq}, not {seq}")
        return seq

    def instance(self, uuid: str, seq: int | None = None) -> Instance | None:
        """The instance as of `seq` (default: the watermark); None if it did not exist then."""
        at = self._seq(seq)
        found = self.instances.get(uuid)
        return None if found is None or found.created_seq > at else instance_at(self, found, at)

    def want(self, want_id: str, seq: int | None = None) -> Want | None:
        """The want as of `seq` (default: the watermark); None if it did not exist then."""
        at = self._seq(seq)
        found = self.wants.get(want_id)
        return None if found is None or found.created_seq > at else want_at(self, found, at)

    def job_run(self, run_id: str, seq: int | None = None) -> JobRun | None:
        """The job run as of `seq` (default: the watermark); None if it did not exist then."""
        at = self._seq(seq)
        found = self.job_runs.get(run_id)
        if found is None or found.created_seq > at:
            return None
        beat = self._records.heartbeat(self._conn, run_id, at)  # the newest by then is all a read needs
        return run_at(found, at, None if beat is None else bytearray(HEARTBEAT_PAIR.pack(*beat)))

    def canonical_uuid(self, ref: str, seq: int | None = None) -> str | None:
        """The UUID of the canonical instance of `ref` as of `seq` (None: it had none)."""
        return canonical_at(self, ref, self._seq(seq))

    def served_uuid(self, ref: str, seq: int | None = None) -> str | None:
        """The UUID of the instance readers got for `ref` as of `seq` (None: nothing Live to read)."""
        return served_at(self, ref, self._seq(seq))


def _first(body: Any) -> Any:
    return body[0]


def _second(body: Any) -> Any:
    return body[1]


def _fourth(body: Any) -> Any:
    return body[3]


@contextmanager
def open_stored(records: RecordStore) -> Iterator[StoredRecords | None]:
    """The store's records in one snapshot of the database, or None while they are not whole at the changes'
    watermark (being written for the first time, or behind it)."""
    with begin_snapshot(records.engine) as conn:
        head = changes_watermark(conn)
        yield StoredRecords(records, conn, head) if head and records_watermark(conn) == head else None
