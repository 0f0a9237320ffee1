"""The digest of a working set (state/fold/cold.py): the state digest of everything it holds and everything it
evicted, without reading the evicted records back into memory.

`state_digest` hashes each table's records in key order from memory. Here the tables that go cold (the
instances, wants and job runs, the canonical pointers, the check results and the wants' causes) are hashed
from a merge, in key order, of the keys held and the rows of the store (read a chunk at a time on the driver's
cursor, state/store/row_stream.py, each decoded for its hash and dropped): a key held is hashed from memory, any
other from its row. The rows must be current (the store projected to the state's head, nothing touched since),
as for an eviction: a record's row then holds what memory would. The bytes fed to the hash are those
`state_digest` feeds it, section by section, so the two digests are equal (the tests fold every golden log both
ways).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from partbuild.state.fold.build_state import BuildState
from partbuild.state.fold.cold import WorkingSet
from partbuild.state.fold.layout import Items, Pointers, Section, Table, Update
from partbuild.state.log.collector import collector_paused
from partbuild.state.schema import state_records as table
from partbuild.state.store.records import INSTANCE, REF, RUN, WANT, RecordStore, decoded, loads
from partbuild.state.store.row_stream import row_chunks

# Each cold table: the kind of row its cold entries are in, and where in a decoded row its entry is (None there:
# none). An entry at 0 of an instance's, a want's or a run's row is the record (`loads` builds it); the others are
# plain values, read from the row as it was pickled (`decoded`: nothing built that is not hashed).
COLD: dict[str, tuple[int, int]] = {
    "instances": (INSTANCE, 0),
    "wants": (WANT, 0),
    "job_runs": (RUN, 0),
    "canonical": (REF, 0),
    "check_results": (INSTANCE, 3),
    "want_causes": (WANT, 1),
}


def working_set_digest(working: WorkingSet, records: RecordStore) -> str:
    """`state_digest` of the state `working` holds with its cold records, read from `records`' rows."""
    state = working.state
    touched = state.touched
    assert touched is not None and touched.since == state.head_seq, "project the store to the head first"
    h = hashlib.sha256()
    with collector_paused(), records.engine.connect() as conn:
        for section in BuildState.LAYOUT:
            if not any(name in COLD for name in section.names):
                section.digest(state, h.update)
                continue
            for name in section.names:
                if name not in COLD:
                    replace(section, names=(name,)).digest(state, h.update)
                    continue
                _digest_cold(section, name, _Cold(conn, state, name), h.update)
    return h.hexdigest()


class _Cold:
    """A cold table's entries: those held, and the others from their rows (in key order, a chunk at a time)."""

    def __init__(self, conn: Connection, state: BuildState, name: str) -> None:
        self.conn = conn
        self.kind, self.at = COLD[name]
        self.held: dict[str, Any] = getattr(state, name)

    def count(self) -> int:
        """How many entries a record table has (a row holds a record), from the rows' ids alone."""
        held, contains = self.held, dict.__contains__  # not the working set's own `in`: it reads a record back
        ids = (row[0] for chunk in row_chunks(self.conn, self._rows(bodies=False)) for row in chunk)
        return len(held) + sum(1 for key in ids if not contains(held, key))

    def walk(self) -> Iterator[tuple[str, Any]]:
        """(key, value) of each entry in key order (none for a row whose value is None)."""
        held, get = self.held, dict.__getitem__
        keys = sorted(dict.keys(held))
        kind, at, ahead = self.kind, self.at, 0
        record = at == 0 and kind in (INSTANCE, WANT, RUN)  # the record itself: built; any other value as pickled
        for chunk in row_chunks(self.conn, self._rows(bodies=True)):
            for key, body in chunk:
                while ahead < len(keys) and keys[ahead] < key:
                    yield keys[ahead], get(held, keys[ahead])
                    ahead += 1
                if ahead < len(keys) and keys[ahead] == key:
                    yield key, get(held, key)
                    ahead += 1
                elif (value := loads(kind, body)[0] if record else decoded(body)[at]) is not None:
                    yield key, value
        for key in keys[ahead:]:
            yield key, get(held, key)

    def _rows(self, *, bodies: bool) -> sa.Select[Any]:
        """(id, body) of the rows of the table's kind, or their ids alone, by id in the order Python sorts
        strings (code points: PostgreSQL's "C")."""
        ident = table.c.id.collate("C") if self.conn.dialect.name == "postgresql" else table.c.id
        columns = (table.c.id, table.c.body) if bodies else (table.c.id,)
        return sa.select(*columns).where(table.c.kind == self.kind).order_by(ident)


def _digest_cold(section: Section, name: str, cold: _Cold, update: Update) -> None:
    """What `section.digest` feeds the hash for table `name`, from its entries in key order."""
    if isinstance(section, Table):
        update(f"\n{name} {cold.count()}".encode())
        for _, record in cold.walk():
            update(repr(record.digest_values()).encode())
    elif isinstance(section, Pointers):
        update(f"\n{name}".encode())
        for key, value in cold.walk():
            update(f"{key!r}={value}".encode())
    elif isinstance(section, Items):  # `repr(sorted(items.items()))`, a pair at a time, once there is one
        first = True
        for pair in cold.walk():
            update(b"[" if first else b", ")
            update(repr(pair).encode())
            first = False
        if not first:
            update(b"]")
    else:
        raise TypeError(f"a cold table in a {type(section).__name__} section: {name}")
