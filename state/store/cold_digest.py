"""The digest of a working set (state/fold/cold.py): the state digest of everything it holds and everything it
evicted, without reading the evicted records back into memory.

`state_digest` hashes each table's records in key order from memory. Here the tables that go cold (the
instances, wants and job runs, the canonical pointers, the check results and the wants' causes) are hashed
from a merge, in key order, of the keys held and the rows of the store (read a chunk at a time, each decoded
for its hash and dropped): a key held is hashed from memory, any other from its row. The rows must be current
(the store projected to the state's head, nothing touched since), as for an eviction: a record's row then
holds what memory would. The bytes fed to the
hash are those `state_digest` feeds it, section by section, so the two digests are equal (the tests fold every
golden log both ways).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any

from sqlalchemy.engine import Connection

from partbuild.state.fold.build_state import BuildState
from partbuild.state.fold.cold import WorkingSet
from partbuild.state.fold.layout import Items, Pointers, Section, Table, Update
from partbuild.state.log.collector import collector_paused
from partbuild.state.store.records import INSTANCE, REF, RUN, WANT, RecordStore, loads

# Each cold table: the kind of row its cold entries are in, and the entry a decoded row holds (None: none).
_RowPart = Callable[[Any], Any]
COLD: dict[str, tuple[int, _RowPart]] = {
    "instances": (INSTANCE, lambda row: row[0]),
    "wants": (WANT, lambda row: row[0]),
    "job_runs": (RUN, lambda row: row[0]),
    "canonical": (REF, lambda row: row[0]),
    "check_results": (INSTANCE, lambda row: row[3]),
    "want_causes": (WANT, lambda row: row[1]),
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
                _digest_cold(section, name, _entries(conn, records, state, name), h.update)
    return h.hexdigest()


Walk = Callable[..., Iterator[tuple[str, Any]]]


def _entries(conn: Connection, records: RecordStore, state: BuildState, name: str) -> Walk:
    """A walk, in key order, of (key, value) of table `name`: those held, and the others' from their rows."""
    kind, part = COLD[name]
    held: dict[str, Any] = getattr(state, name)

    def walk(decode: bool = True) -> Iterator[tuple[str, Any]]:
        """Without `decode`, the keys alone (a record table's: every row holds a record), each with None."""
        keys = sorted(dict.keys(held))
        at = 0
        for key, body in records.scan_in_key_order(conn, kind, bodies=decode):
            while at < len(keys) and keys[at] < key:
                yield keys[at], dict.__getitem__(held, keys[at])
                at += 1
            if at < len(keys) and keys[at] == key:
                yield key, dict.__getitem__(held, key)
                at += 1
                continue
            value = part(loads(kind, body)) if decode else None
            if value is not None or not decode:
                yield key, value
        for key in keys[at:]:
            yield key, dict.__getitem__(held, key)

    return walk


def _digest_cold(section: Section, name: str, walk: Walk, update: Update) -> None:
    """What `section.digest` feeds the hash for table `name`, from its entries in key order."""
    if isinstance(section, Table):
        update(f"\n{name} {sum(1 for _ in walk(decode=False))}".encode())
        for _, record in walk():
            update(repr(record.digest_values()).encode())
    elif isinstance(section, Pointers):
        update(f"\n{name}".encode())
        for key, value in walk():
            update(f"{key!r}={value}".encode())
    elif isinstance(section, Items):  # `repr(sorted(items.items()))`, a pair at a time, once there is one
        first = True
        for pair in walk():
            update(b"[" if first else b", ")
            update(repr(pair).encode())
            first = False
        if not first:
            update(b"]")
    else:
        raise TypeError(f"a cold table in a {type(section).__name__} section: {name}")
