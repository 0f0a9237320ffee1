"""A fold that holds its working set: records it has not touched lately live in the state store's rows only.

`WorkingSet(state, source)` turns the record tables of a `BuildState` into `ColdTable`s: dicts that, asked for a
key they do not hold, fault the record back from `source` (the state store's rows, state/store/cold_rows.py)
with what goes with it (an instance's packed history, kept fields and check results; a want's cause; a job
run's heartbeats; a ref's canonical pointer, first created seq, kept fields and the wants naming it), then
answer. `evict()` drops records from memory once their rows are current, so the fold decides as it would
holding everything (the tests fold every golden log both ways, evicting all it can after every pass).

Which keys went cold is kept as 64-bit hashes in sorted arrays (`ColdKeys`, 8 bytes a key): a key never
evicted (a fresh UUID, a new ref) costs a bisection, not a read of the database; a hash that collides costs
one read that finds nothing.

The rule that keeps it exact: a record is evicted only while its row holds it as it is (the store's records
projected up to the state's head, and the record not changed since: not in `BuildState.touched`), and every
table that holds a part of it faults the whole record back on a miss (a write into the records' own tables
too), never writing over a part held. So a record held has all its parts, and a miss of a part of a record
held (most instances have no history, no check results) needs no look at the cold keys. What stays in memory
whatever happens: an active want (its `tally` is the fold's bookkeeping, left out of its row) and a ref
something stale still serves (the fold walks `serving`).
"""

from __future__ import annotations

import heapq
from array import array
from bisect import bisect_left
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, TypeVar

from partbuild.state.fold.records import Instance, JobRun, Want

if TYPE_CHECKING:
    from partbuild.state.fold.build_state import BuildState

# The kinds of record that go cold, by what a fault reads.
INSTANCE, WANT, RUN, REF = "instance", "want", "job run", "ref"
MERGE_FRESH = 1 << 16  # hashes gathered before they are sorted into a level
_T = TypeVar("_T")


@dataclass(frozen=True)
class ColdInstance:
    instance: Instance
    history: int  # packed state changes before the latest (0: none)
    fields: tuple[object, ...] | None
    checks: tuple[Any, ...] | None


@dataclass(frozen=True)
class ColdRef:
    canonical: str | None
    first_created: int | None
    fields: tuple[object, ...] | None
    serving: str | None
    wants: list[str]  # the wants naming it, in creation order


class ColdSource(Protocol):
    """Where cold records are read back: the rows as of the state's head (None: no such record)."""

    def instance(self, uuid: str) -> ColdInstance | None: ...
    def want(self, want_id: str) -> tuple[Want, str | None] | None: ...
    def run(self, run_id: str) -> tuple[JobRun, bytearray] | None: ...
    def ref(self, ref: str) -> ColdRef | None: ...


class ColdKeys:
    """The keys of one kind that went cold, as hashes: sorted arrays (merged as they grow) and the fresh ones,
    with a bitmap of them in front (about 16 bits a key), so most keys that are not cold (a new UUID, a new ref)
    cost one bit's look, not a bisection of each array."""

    def __init__(self) -> None:
        self._levels: list[array[int]] = []
        self._fresh: set[int] = set()
        self._back: set[int] = set()  # hashes of keys faulted back since they went cold (held again)
        self._bits = bytearray(1 << 13)
        self._mask = (1 << 16) - 1  # bits in the map, less one
        self._marked = 0  # hashes marked in it

    def __len__(self) -> int:
        return sum(map(len, self._levels)) + len(self._fresh) - len(self._back)

    def add(self, key: str) -> None:
        code = hash(key)
        if code in self._back:
            self._back.discard(code)  # still in its level, and marked
            return
        self._fresh.add(code)
        self._mark(code)
        if len(self._fresh) >= MERGE_FRESH:
            self._merge()

    def maybe(self, key: str) -> bool:
        """Whether `key` may be cold (False: it is not; True: it is, or another key's hash is the same)."""
        code = hash(key)
        bit = code & self._mask
        if not self._bits[bit >> 3] >> (bit & 7) & 1 or code in self._back:
            return False
        if code in self._fresh:
            return True
        for level in self._levels:
            at = bisect_left(level, code)
            if at < len(level) and level[at] == code:
                return True
        return False

    def returned(self, key: str) -> None:
        """`key` is held again (faulted back, or found in no row): not cold until it is evicted again."""
        code = hash(key)
        if code in self._fresh:
            self._fresh.discard(code)
        else:
            self._back.add(code)

    def _mark(self, code: int) -> None:
        self._marked += 1
        if self._marked * 16 > self._mask + 1:  # fuller than a 16th: twice the bits, every hash marked again
            self._bits = bytearray(len(self._bits) * 2)
            self._mask = self._mask * 2 + 1
            for level in (*self._levels, self._fresh):
                for old in level:
                    self._set(old)
        self._set(code)

    def _set(self, code: int) -> None:
        bit = code & self._mask
        self._bits[bit >> 3] |= 1 << (bit & 7)

    def _merge(self) -> None:
        """The fresh hashes into a level of their own, then levels of like size merged (a few levels in all)."""
        self._levels.append(array("q", sorted(self._fresh)))
        self._fresh = set()
        while len(self._levels) > 1 and len(self._levels[-2]) <= 2 * len(self._levels[-1]):
            newest, older = self._levels.pop(), self._levels.pop()
            # A merge of the two sorted arrays into a third, a hash at a time: sorting their concatenation made a
            # Python int of each (about 40 bytes a key: a gigabyte at 24M keys, more than all the arrays).
            merged: Iterable[int] = heapq.merge(older, newest)
            if not self._levels:  # everything in one level: the keys held again leave it
                back, self._back = self._back, set()
                merged = (code for code in merged if code not in back)
            self._levels.append(array("q", merged))


_ABSENT: Any = object()


class ColdTable(dict[str, Any]):
    """A dict whose misses ask `fault(key)` to bring the key's record back first (a read, a delete, a pop)."""

    __slots__ = ("_fault",)

    def __init__(self, items: dict[str, Any], fault: Callable[[str], object]) -> None:
        super().__init__(items)
        self._fault = fault

    def __missing__(self, key: str) -> Any:
        self._fault(key)
        return dict.__getitem__(self, key) if dict.__contains__(self, key) else _raise(key)

    def get(self, key: str, default: Any = None) -> Any:
        value = dict.get(self, key, _ABSENT)
        if value is _ABSENT:
            self._fault(key)
            return dict.get(self, key, default)
        return value

    def __contains__(self, key: object) -> bool:
        return dict.__contains__(self, key) or (isinstance(key, str) and self._faulted(key))

    def __delitem__(self, key: str) -> None:
        self._faulted(key)
        dict.__delitem__(self, key)

    def setdefault(self, key: str, default: Any = None) -> Any:
        self._faulted(key)
        return dict.setdefault(self, key, default)

    def pop(self, key: str, *default: Any) -> Any:
        self._faulted(key)
        return dict.pop(self, key, *default)

    def _faulted(self, key: str) -> bool:
        if dict.__contains__(self, key):
            return True
        self._fault(key)
        return dict.__contains__(self, key)


class ColdMain(ColdTable):
    """The table of the records themselves (instances, wants, job runs, canonical pointers): a write of a key not
    held faults its record first, so a record held has all its parts (which `_part_of` relies on)."""

    __slots__ = ()

    def __setitem__(self, key: str, value: Any) -> None:
        if not dict.__contains__(self, key):
            self._fault(key)
        dict.__setitem__(self, key, value)


def _raise(key: str) -> Any:
    raise KeyError(key)


@dataclass
class Faults:
    """How many records a working set read back and evicted, by kind (a fault that found no row: `missed`)."""

    read_back: dict[str, int] = field(default_factory=dict)
    evicted: dict[str, int] = field(default_factory=dict)
    missed: int = 0


class WorkingSet:
    """A `BuildState` whose cold records live in `source`: see the module docstring."""

    # The tables of each kind, the record's own first: evicting a record pops its key from all of them.
    TABLES: ClassVar[dict[str, tuple[str, ...]]] = {
        INSTANCE: ("instances", "instance_histories", "check_results"),
        WANT: ("wants", "want_causes"),
        RUN: ("job_runs", "run_heartbeats"),
        REF: ("canonical", "first_created", "wants_by_ref"),
    }

    def __init__(self, state: BuildState, source: ColdSource) -> None:
        self.state = state
        self.source = source
        self.keys = {kind: ColdKeys() for kind in self.TABLES}
        self.faults = Faults()
        loaders = {INSTANCE: self._instance, WANT: self._want, RUN: self._run, REF: self._ref}
        for kind, names in self.TABLES.items():
            main = ColdMain(getattr(state, names[0]), loaders[kind])
            setattr(state, names[0], main)
            for name in names[1:]:
                setattr(state, name, ColdTable(getattr(state, name), _part_of(main, loaders[kind])))
        # Kept fields are an instance's (by UUID) or a ref's (by ref): a miss may be either.
        of_instance, of_ref = _part_of(state.instances, self._instance), _part_of(state.canonical, self._ref)
        state.fields = ColdTable(state.fields, lambda key: of_instance(key) or of_ref(key))

    # ----------------------------------------------------------------- faults

    def _instance(self, uuid: str) -> bool:
        return self._load(INSTANCE, uuid, self.source.instance, self._put_instance)

    def _want(self, want_id: str) -> bool:
        return self._load(WANT, want_id, self.source.want, self._put_want)

    def _run(self, run_id: str) -> bool:
        return self._load(RUN, run_id, self.source.run, self._put_run)

    def _ref(self, ref: str) -> bool:
        return self._load(REF, ref, self.source.ref, self._put_ref)

    def _load(self, kind: str, key: str, read: Callable[[str], _T | None], put: Callable[[str, _T], None]) -> bool:
        """Read a record of `kind` back (when `key` may be cold) and put its parts in place; whether it was found."""
        cold = self.keys[kind]
        if not cold.maybe(key):
            return False
        cold.returned(key)
        found = read(key)
        if found is None:
            self.faults.missed += 1
            return False
        put(key, found)
        self.faults.read_back[kind] = self.faults.read_back.get(kind, 0) + 1
        return True

    def _put_instance(self, uuid: str, found: ColdInstance) -> None:
        state = self.state
        _put(state.instances, uuid, found.instance)
        _put(state.instance_histories, uuid, found.history or None)
        _put(state.fields, uuid, found.fields)
        _put(state.check_results, uuid, found.checks)

    def _put_want(self, want_id: str, found: tuple[Want, str | None]) -> None:
        _put(self.state.wants, want_id, found[0])
        _put(self.state.want_causes, want_id, found[1])

    def _put_run(self, run_id: str, found: tuple[JobRun, bytearray]) -> None:
        _put(self.state.job_runs, run_id, found[0])
        _put(self.state.run_heartbeats, run_id, found[1] or None)

    def _put_ref(self, ref: str, found: ColdRef) -> None:
        state = self.state
        _put(state.canonical, ref, found.canonical)
        _put(state.first_created, ref, found.first_created)
        _put(state.fields, ref, found.fields)
        _put(state.serving, ref, found.serving)
        wants = found.wants
        _put(state.wants_by_ref, ref, (wants[0],) if len(wants) == 1 else wants or None)

    # ----------------------------------------------------------------- eviction

    def evictable(self) -> dict[str, list[str]]:
        """The keys of every record that may go cold now, by kind: those held whose rows are current (the
        caller projected the store to the head) and not changed since (`BuildState.touched`)."""
        state = self.state
        touched = state.touched
        assert touched is not None and touched.since == state.head_seq, "project the store to the head first"
        serving = state.serving
        return {
            INSTANCE: [key for key in dict.keys(state.instances) if key not in touched.instances],
            WANT: [key for key, want in dict.items(state.wants) if want.tally is None and key not in touched.wants],
            RUN: [key for key in dict.keys(state.job_runs) if key not in touched.runs],
            REF: [key for key in _ref_keys(state) if key not in touched.refs and key not in serving],
        }

    def evict(self, keys: Mapping[str, Iterable[str]]) -> None:
        """Drop these records (from `evictable`) from memory: they are read back from their rows when asked for."""
        state = self.state
        for kind, names in self.TABLES.items():
            tables = [getattr(state, name) for name in names]
            if kind in (INSTANCE, REF):
                tables.append(state.fields)
            cold, evicted = self.keys[kind], 0
            for key in keys.get(kind, ()):
                for table in tables:
                    dict.pop(table, key, None)
                cold.add(key)
                evicted += 1
            self.faults.evicted[kind] = self.faults.evicted.get(kind, 0) + evicted


def _part_of(main: dict[str, Any], load: Callable[[str], bool]) -> Callable[[str], bool]:
    """The fault of a table holding a part of the records of `main`: none while the record is held (its parts
    go and come back with it, so a miss is a part it lacks: most instances have no history, no check results),
    its load otherwise. Most misses of a fold are such, and a look in `main` is cheaper than `ColdKeys.maybe`."""

    def fault(key: str) -> bool:
        return not dict.__contains__(main, key) and load(key)

    return fault


def _ref_keys(state: BuildState) -> Iterable[str]:
    """Every ref held in a part of a ref's row or in the wants by ref."""
    held = dict.fromkeys(dict.keys(state.canonical))
    held.update(dict.fromkeys(dict.keys(state.first_created)))
    held.update(dict.fromkeys(dict.keys(state.wants_by_ref)))
    held.update((key, None) for key in dict.keys(state.fields) if not dict.__contains__(state.instances, key))
    return held


def _put(table: dict[str, Any], key: str, value: object) -> None:
    """Put a part read back in place (None: the record has none) without asking the table to fault, nor
    writing over a part held."""
    if value is not None:
        dict.setdefault(table, key, value)
