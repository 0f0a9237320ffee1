"""The listings of a read replica, from the state store's index on (kind, created, id): no list in memory.

The same reads as `ListingIndex` (state/queries/listing.py), which follows a live state: wants and job runs in
creation order (by created seq, then id), refs in sorted order with a lower bound of their first instance's
seq. A page reads its rows a chunk at a time by a range scan, so it costs its page, not the table. A job's refs
(the grid's `refs_matching`) are read by one range scan, kept per pattern and brought up to date with the refs
created since (a range scan of the index); the stale index reads a job's runs of its code versions other than
the current one from their version rows (state/store/run_versions.py), likewise brought up to date.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from itertools import takewhile

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from partbuild.state.fold.records import Instance
from partbuild.state.fold.view import StateView
from partbuild.state.queries.listing import spliced
from partbuild.state.queries.staleness import StaleIndex
from partbuild.state.schema import state_records as table
from partbuild.state.store.driver import DriverQuery
from partbuild.state.store.records import REF, RUN, WANT
from partbuild.state.store.stored import stored_of

CHUNK = 256  # rows a lazy listing reads at a time
# A pattern's refs: (the watermark they are up to, the refs, the list refs were spliced into, those refs).
_Matching = tuple[int, list[str], list[str] | None, list[str] | None]


class StoredOrder:
    """Wants or job runs in creation order, read from the index (`ListingIndex.wants`' reads)."""

    def __init__(self, engine: Engine, kind: int) -> None:
        self._engine = engine
        self._kind = kind

    def between(self, after: int, upto: int) -> Iterator[str]:
        """Ids created after seq `after` and at or before `upto`, oldest first, a chunk at a time."""
        key: tuple[int, str] | None = None
        created, ident = table.c.created, table.c.id
        while True:
            where = [table.c.kind == self._kind, created <= upto]
            if key is None:
                where.append(created > after)
            else:
                where.append(sa.or_(created > key[0], sa.and_(created == key[0], ident > key[1])))
            query = sa.select(created, ident).where(*where).order_by(created, ident).limit(CHUNK)
            with self._engine.connect() as conn:
                rows = conn.execute(query).all()
            for row in rows:
                yield row.id
            if len(rows) < CHUNK:
                return
            key = (rows[-1].created, rows[-1].id)

    def newest(self, upto: int, before: int | None) -> Iterator[tuple[int, str]]:
        """(created seq, id) of those created at or before `upto` and before seq `before`, newest first."""
        key: tuple[int, str] | None = None
        created, ident = table.c.created, table.c.id
        top = upto if before is None else min(upto, before - 1)
        while True:
            where = [table.c.kind == self._kind, created <= top]
            if key is not None:
                where.append(sa.or_(created < key[0], sa.and_(created == key[0], ident < key[1])))
            query = sa.select(created, ident).where(*where).order_by(created.desc(), ident.desc()).limit(CHUNK)
            with self._engine.connect() as conn:
                rows = conn.execute(query).all()
            for row in rows:
                yield row.created, row.id
            if len(rows) < CHUNK:
                return
            key = (rows[-1].created, rows[-1].id)

    def has_seq(self, seq: int) -> bool:
        """Whether one was created at `seq` (a cursor a page gave out)."""
        query = sa.select(table.c.id).where(table.c.kind == self._kind, table.c.created == seq).limit(1)
        with self._engine.connect() as conn:
            return conn.execute(query).first() is not None


class StoredListing:
    """`ListingIndex`'s reads from the state store (see the module docstring); `watermark()` is the store's."""

    def __init__(self, engine: Engine, watermark: Callable[[], int]) -> None:
        self._engine = engine
        self._watermark = watermark
        self.wants = StoredOrder(engine, WANT)
        self.runs = StoredOrder(engine, RUN)
        self._matching: dict[str, _Matching] = {}
        self._lock = threading.Lock()

    def refs_from(self, prefix: str, after: str | None) -> Iterator[str]:
        """Sorted refs at or after `prefix`, strictly after `after` when given."""
        return self._refs(prefix, after, None)

    def refs_as_of(self, seq: int, prefix: str, after: str | None) -> Iterator[str]:
        """Sorted refs under `prefix`, strictly after `after`, whose first instance may have been created by `seq`."""
        return takewhile(lambda ref: ref.startswith(prefix), self._refs(prefix, after, seq))

    def _refs(self, prefix: str, after: str | None, seq: int | None) -> Iterator[str]:
        ident = table.c.id
        bound = ident > after if after is not None and after >= prefix else ident >= prefix
        while True:
            where = [table.c.kind == REF, bound]
            if seq is not None:
                where.append(table.c.created <= seq)
            with self._engine.connect() as conn:
                refs = list(conn.execute(sa.select(ident).where(*where).order_by(ident).limit(CHUNK)).scalars())
            yield from refs
            if len(refs) < CHUNK or not refs[-1].startswith(prefix):
                return
            bound = ident > refs[-1]

    def refs_matching(self, key: str, prefix: str, match: Callable[[str], object]) -> Sequence[str]:
        """Sorted refs under `prefix` for which `match` is truthy, kept under `key` and brought up to date with
        the refs created since (spliced in); the list returned is never changed afterwards."""
        mark = self._watermark()
        with self._lock:
            cached = self._matching.get(key)
        if cached is not None and cached[0] >= mark:
            return cached[1]
        entry: _Matching
        if cached is None:
            # Those created by the mark alone: the ones created after it come with the next call's.
            found = [ref for ref in self._refs_under(prefix, mark) if match(ref)]
            entry = (mark, found, None, None)
        else:
            fresh = sorted(ref for ref in self._created_refs(cached[0], mark) if ref.startswith(prefix) and match(ref))
            entry = (mark, spliced(cached[1], fresh) if fresh else cached[1], cached[1], fresh)
        with self._lock:
            self._matching[key] = entry
        return entry[1]

    def _refs_under(self, prefix: str, upto: int) -> list[str]:
        """Every ref under `prefix` whose first instance was created by seq `upto`, sorted: one range scan, read
        whole on the driver's cursor (a job's refs are read once, then kept)."""
        above = _above(prefix)
        query = _REFS_UNDER if above is not None else _REFS_FROM
        params = {"prefix": prefix, "upto": upto, **({"above": above} if above is not None else {})}
        with self._engine.connect() as conn:
            return [ref for (ref,) in query.all(conn, params)]

    def _created_refs(self, after: int, upto: int) -> list[str]:
        """Refs whose first instance was created in seqs (`after`, `upto`]."""
        created = table.c.created
        query = sa.select(table.c.id).where(table.c.kind == REF, created > after, created <= upto)
        with self._engine.connect() as conn:
            return list(conn.execute(query).scalars())

    def added_to(self, key: str, older: Sequence[str]) -> list[str] | None:
        """The refs the last `refs_matching(key)` spliced into `older`, or None if it did not splice into it."""
        with self._lock:
            cached = self._matching.get(key)
        return cached[3] if cached is not None and cached[2] is older else None


def _above(prefix: str) -> str | None:
    """The least string above every string that starts with `prefix` (None: there is none to name)."""
    stripped = prefix.rstrip(chr(0x10FFFF))
    return stripped[:-1] + chr(ord(stripped[-1]) + 1) if stripped else None


def _refs_query(bounded: bool) -> DriverQuery:
    ident = table.c.id
    where = [table.c.kind == REF, ident >= sa.bindparam("prefix", type_=ident.type)]
    if bounded:
        where.append(ident < sa.bindparam("above", type_=ident.type))
    where.append(table.c.created <= sa.bindparam("upto", type_=table.c.created.type))
    return DriverQuery(sa.select(ident).where(*where).order_by(ident))


_REFS_UNDER, _REFS_FROM = _refs_query(True), _refs_query(False)


class StoredStaleIndex(StaleIndex):
    """The stale index of a replica: for each job, the runs of its code versions other than its current one (the
    current one's are not stale while it is), read from their version rows (state/store/run_versions.py) created
    since the last read, when a read asks; a job whose current version changed is read again from the start.
    A replica that is never asked reads no run for it, and one asked reads the runs that may be stale only."""

    def __init__(self) -> None:
        super().__init__()
        self._marks: dict[str, tuple[str, int]] = {}  # job -> (the version left out, the watermark read up to)
        self._following = threading.Lock()

    def _candidates(self, state: StateView, label: str, current: str, now: bool) -> Iterator[Instance]:
        stored = stored_of(state)
        if stored is not None:
            with self._following:
                left_out, mark = self._marks.get(label, (current, 0))
                if left_out != current:  # its runs of the new current version are in, the old one's are not
                    self.forget(label)
                    mark = 0
                if stored.head_seq > mark:
                    self.add(stored.runs_of_other_versions(label, current, mark))
                    self._marks[label] = (current, stored.head_seq)
        return super()._candidates(state, label, current, now)
