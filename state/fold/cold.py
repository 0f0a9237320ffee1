"""A fold that holds its working set: records it has not touched lately live in the state store's rows only.

`WorkingSet(state, source)` turns the record tables of a `BuildState` into `ColdTable`s: dicts that, asked for a
key they do not hold, fault the record back from `source` (the state store's rows, state/store/cold_rows.py)
with what goes with it (an instance's packed history, kept fields and check results; a want's cause; a job
run's heartbeats; a ref's canonical pointer, first created seq, kept fields and the wants naming it), then
answer. `evict()` drops records from memory once their rows are current, so the fold decides as it would
holding everything (the tests fold every golden log both ways, evicting all it can after every pass).

Which keys went cold is kept as 64-bit hashes (`key_code`, the same in every process) in sorted arrays
(`ColdKeys`, 8 bytes a key): a key never evicted (a fresh UUID, a new ref) costs a bisection, not a read of the
database; a hash that collides costs one read that finds nothing.

The rule that keeps it exact: a record is evicted only while its row holds it as it is (the store's records
projected up to the state's head, and the record not changed since: not in `BuildState.touched`), and every
table that holds a part of it faults the whole record back on a miss (a write into the records' own tables
too), never writing over a part held. So a record held has all its parts, and a miss of a part of a record
held (most instances have no history, no check results) needs no look at the cold keys. What stays in memory
whatever happens: an active want (its `tally` is the fold's bookkeeping, left out of its row) and a ref
something stale still serves (the fold walks `serving`).
"""

from __future__ import annotations

import functools
import heapq
import itertools
from array import array
from bisect import bisect_left
from collections.abc import Callable, Container, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, TypeAlias, TypeVar

from xxhash import xxh3_64_intdigest

from partbuild.state.fold.records import Instance, InstanceState, JobRun, Want

if TYPE_CHECKING:
    from partbuild.state.fold.build_state import BuildState

# The kinds of record that go cold, by what a fault reads.
INSTANCE, WANT, RUN, REF = "instance", "want", "job run", "ref"
MERGE_FRESH = 1 << 16  # hashes gathered before they are sorted into a level
_T = TypeVar("_T")
_V = TypeVar("_V")
_R = TypeVar("_R", Instance, Want, JobRun)
_LIVE = InstanceState.LIVE  # the states before it are the ones decisions act on (wanted, building, waiting)


class ReadBackFailed(RuntimeError):
    """A cold record could not be read back (the database failed, or its row is ahead of the fold). Raised
    from an event's check, the event is not folded (the state as before; the caller folds it again later),
    never taken for a rejection."""


class ReadBackRefused(ReadBackFailed):
    """The store cannot give this fold a record as it was at its head, and never will (a row written past the
    head with no version kept of it then; versions pruned past it): folding again does not help, the process
    must start again (state/store/row_versions.py)."""


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
    def went_cold(self, kind: str, keys: list[str]) -> None:
        """These records were evicted (their rows hold them as the fold does now)."""

    def many(self, kind: str, keys: list[str]) -> dict[str, Any]:
        """The records of `kind` (an instance, a want, a job run; a ref's canonical UUID) of those of `keys` that
        have one, read a few hundred to a statement, without what goes with them (not to be held: `ColdMain.peek`)."""
        ...


_HALF = 1 << 63
# What a snapshot keeps of a kind's cold keys: the sorted levels (arrays, or their bytes once loaded), the fresh
# and returned hashes, the bitmap, how many hashes it marks.
KeyParts: TypeAlias = "tuple[list[bytes | bytearray | array[int]], list[int], list[int], bytes, int]"


def key_code(key: str) -> int:
    """A key's 64-bit hash (signed, as the arrays hold it), the same in every process: a str's `hash` is salted per
    process, so the cold keys a snapshot keeps would not be found by the process that loads it."""
    return xxh3_64_intdigest(key.encode("utf-8", "surrogatepass")) - _HALF


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
        code = key_code(key)
        if code in self._back:
            self._back.discard(code)  # still in its level, and marked
            return
        self._fresh.add(code)
        self._mark(code)
        if len(self._fresh) >= MERGE_FRESH:
            self._merge()

    def maybe(self, key: str) -> bool:
        """Whether `key` may be cold (False: it is not; True: it is, or another key's hash is the same)."""
        code = key_code(key)
        bit = code & self._mask
        if not self._bits[bit >> 3] >> (bit & 7) & 1 or code in self._back:
            return False
        return code in self._fresh or self._in_levels(code)

    def returned(self, key: str) -> None:
        """`key` is held again (faulted back, or found in no row): not cold until it is evicted again. Said
        twice (two threads read it back at once), the second changes nothing."""
        code = key_code(key)
        if code in self._fresh:
            self._fresh.discard(code)
        elif code not in self._back and self._in_levels(code):
            self._back.add(code)

    def _in_levels(self, code: int) -> bool:
        for level in self._levels:
            at = bisect_left(level, code)
            if at < len(level) and level[at] == code:
                return True
        return False

    def parts(self) -> KeyParts:
        """What a snapshot keeps of these keys: the sorted levels as they are (never changed once made, so they may
        be pickled after the state's lock is let go: state/log/snapshot.py), the fresh and returned hashes and the
        bitmap copied (marking 23M hashes again took a minute)."""
        return (list(self._levels), sorted(self._fresh), sorted(self._back), bytes(self._bits), self._marked)

    @classmethod
    def from_parts(cls, parts: KeyParts) -> ColdKeys:
        keys = cls()
        levels, fresh, back, bits, marked = parts
        for level in levels:
            keys._levels.append(array("q"))
            keys._levels[-1].frombytes(level)
        keys._fresh, keys._back = set(fresh), set(back)
        keys._bits, keys._mask, keys._marked = bytearray(bits), len(bits) * 8 - 1, marked
        return keys

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
    held faults its record first, so a record held has all its parts (which `_part_of` relies on).

    `returned`: the keys held because they were read back (each at the end of the dict's order, which is
    otherwise the order the records were created in: `created_since`)."""

    __slots__ = ("peek_cold", "returned")

    def __init__(self, items: dict[str, Any], fault: Callable[[str], object]) -> None:
        super().__init__(items, fault)
        self.returned: set[str] = set()
        self.peek_cold: Callable[[list[str]], dict[str, Any]] = lambda _keys: {}

    def peek(self, keys: Iterable[str]) -> dict[str, Any]:
        """The values this table has for `keys`, held or cold, the cold ones read from their rows a few hundred at
        a time and not held: a walk over many keys (every ref of a source) grows no working set and does not read
        a row at a time."""
        found: dict[str, Any] = {}
        missing: list[str] = []
        for key in keys:
            value = dict.get(self, key, _ABSENT)
            if value is _ABSENT:
                missing.append(key)
            else:
                found[key] = value
        if missing:
            found.update(self.peek_cold(missing))
        return found

    def __setitem__(self, key: str, value: Any) -> None:
        if not dict.__contains__(self, key):
            self._fault(key)
        dict.__setitem__(self, key, value)


def peek(table: Mapping[str, _V], keys: Iterable[str]) -> dict[str, _V]:
    """The values `table` has for `keys`: a working set's cold ones read from their rows, not held (`ColdMain.peek`)."""
    if isinstance(table, ColdMain):
        return table.peek(keys)
    return {key: value for key in keys if (value := table.get(key, _ABSENT)) is not _ABSENT}


def canonical_instances(state: BuildState, refs: Iterable[str], chunk: int = 500) -> Iterator[tuple[str, Instance]]:
    """(ref, its canonical instance) for each of `refs` that has one, `chunk` refs at a time: a working set's cold
    pointers and instances are read from their rows a chunk to a statement, and not held (`peek`)."""
    refs = iter(refs)
    while batch := list(itertools.islice(refs, chunk)):
        pointers = peek(state.canonical, batch)
        instances = peek(state.instances, pointers.values())
        for ref in batch:
            uuid = pointers.get(ref)
            if uuid is not None and uuid in instances:
                yield ref, instances[uuid]


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
        # Readers that walk what was created after a seq (`created_since`): records created after the least
        # of their seqs stay held (`for_decisions`), so a walk finds them all.
        self.pins: dict[str, Callable[[], int]] = {}
        loaders = {INSTANCE: self._instance, WANT: self._want, RUN: self._run, REF: self._ref}
        for kind, names in self.TABLES.items():
            main = ColdMain(getattr(state, names[0]), loaders[kind])
            main.peek_cold = functools.partial(self._peek, kind)
            setattr(state, names[0], main)
            for name in names[1:]:
                setattr(state, name, ColdTable(getattr(state, name), _part_of(main, loaders[kind])))
        # Kept fields are an instance's (by UUID) or a ref's (by ref): a miss may be either.
        of_instance, of_ref = _part_of(state.instances, self._instance), _part_of(state.canonical, self._ref)
        state.fields = ColdTable(state.fields, lambda key: of_instance(key) or of_ref(key))

    def parts(self) -> dict[str, Any]:
        """What a snapshot keeps besides the state (`plain_state`): the cold keys and the keys read back."""
        returned = {kind: sorted(getattr(self.state, names[0]).returned) for kind, names in self.TABLES.items()}
        return {"keys": {kind: keys.parts() for kind, keys in self.keys.items()}, "returned": returned}

    @classmethod
    def restored(cls, state: BuildState, source: ColdSource, parts: dict[str, Any]) -> WorkingSet:
        """The working set a snapshot kept: `state` (its tables plain dicts) and `parts`."""
        working = cls(state, source)
        for kind, names in cls.TABLES.items():
            working.keys[kind] = ColdKeys.from_parts(parts["keys"][kind])
            getattr(state, names[0]).returned.update(parts["returned"][kind])
        return working

    def plain_state(self) -> BuildState:
        """A shallow copy of the state with plain dicts for tables (what pickles; nothing read back)."""
        state = self.state
        plain = type(state).__new__(type(state))
        for name, value in state.attributes().items():
            setattr(plain, name, dict(value) if isinstance(value, ColdTable) else value)
        return plain

    def holds(self, kind: str, key: str) -> bool:
        """Whether the state has this record, held or cold, without reading it back (a key whose hash another
        cold key shares is said to be held)."""
        main = getattr(self.state, self.TABLES[kind][0])
        return dict.__contains__(main, key) or self.keys[kind].maybe(key)

    def is_held(self, kind: str, key: str) -> bool:
        """Whether the record is in memory now (a ref: any part of its row), without reading it back."""
        state = self.state
        if kind != REF:
            return dict.__contains__(getattr(state, self.TABLES[kind][0]), key)
        return any(dict.__contains__(getattr(state, name), key) for name in self.TABLES[REF])

    def sizes(self) -> tuple[int, int]:
        """(records held in memory, keys that went cold to the store's rows), over the kinds that go cold."""
        state = self.state
        held = sum(len(dict.keys(getattr(state, names[0]))) for names in self.TABLES.values())
        return held, sum(len(keys) for keys in self.keys.values())

    # ----------------------------------------------------------------- faults

    def _peek(self, kind: str, keys: list[str]) -> dict[str, Any]:
        """The records of `keys` not held that may be cold, from their rows, not held (`ColdMain.peek`)."""
        cold = self.keys[kind]
        maybe = [key for key in keys if cold.maybe(key)]
        if not maybe:
            return {}
        try:
            return self.source.many(kind, maybe)
        except ReadBackFailed:
            raise
        except Exception as exc:
            raise ReadBackFailed(f"reading {len(maybe)} rows back failed: {exc}") from exc

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
        # Another thread may look for the key meanwhile (faults happen under the read lock): it finds the record
        # whole (its own row last) or still cold (and reads it too; the second put changes nothing).
        try:
            found = read(key)
        except ReadBackFailed:
            raise
        except Exception as exc:
            raise ReadBackFailed(f"reading the row of {key!r} back failed: {exc}") from exc
        if found is None:
            cold.returned(key)
            self.faults.missed += 1
            return False
        main = getattr(self.state, self.TABLES[kind][0])
        main.returned.add(key)
        put(key, found)
        cold.returned(key)
        if not dict.__contains__(main, key):
            main.returned.discard(key)  # (a ref with no canonical pointer)
        self.faults.read_back[kind] = self.faults.read_back.get(kind, 0) + 1
        return True

    def _put_instance(self, uuid: str, found: ColdInstance) -> None:
        state = self.state
        _put(state.instance_histories, uuid, found.history or None)
        _put(state.fields, uuid, found.fields)
        _put(state.check_results, uuid, found.checks)
        _put(state.instances, uuid, found.instance)  # last: with it held, its parts are (`_part_of`)

    def _put_want(self, want_id: str, found: tuple[Want, str | None]) -> None:
        _put(self.state.want_causes, want_id, found[1])
        _put(self.state.wants, want_id, found[0])

    def _put_run(self, run_id: str, found: tuple[JobRun, bytearray]) -> None:
        _put(self.state.run_heartbeats, run_id, found[1] or None)
        _put(self.state.job_runs, run_id, found[0])

    def _put_ref(self, ref: str, found: ColdRef) -> None:
        state = self.state
        _put(state.first_created, ref, found.first_created)
        _put(state.fields, ref, found.fields)
        _put(state.serving, ref, found.serving)
        wants = found.wants
        _put(state.wants_by_ref, ref, (wants[0],) if len(wants) == 1 else wants or None)
        _put(state.canonical, ref, found.canonical)

    # ----------------------------------------------------------------- eviction

    def evictable(self, *, projected: int | None = None, for_decisions: bool = False) -> dict[str, list[str]]:
        """The keys of every record that may go cold now, by kind: those held whose rows are current and not
        changed since (`BuildState.touched`). `projected`: the seq the store's rows are written up to (at
        least where tracking restarted); None: the head. `for_decisions`: see `may_go`."""
        state = self.state
        touched = state.touched
        assert touched is not None, "project the store first"
        assert touched.since == state.head_seq if projected is None else touched.since <= projected, "project first"
        untouched = {
            INSTANCE: (key for key in dict.keys(state.instances) if key not in touched.instances),
            WANT: (key for key in dict.keys(state.wants) if key not in touched.wants),
            RUN: (key for key in dict.keys(state.job_runs) if key not in touched.runs),
            REF: (key for key in _ref_keys(state) if key not in touched.refs),
        }
        return {kind: self.may_go(kind, keys, for_decisions) for kind, keys in untouched.items()}

    def may_go(self, kind: str, keys: Iterable[str], for_decisions: bool = False) -> list[str]:
        """Those of `keys` (held records of `kind` whose rows are current) that may go cold: never an active
        want (its tally is left out of its row) nor a ref something stale serves (the fold walks `serving`).

        `for_decisions`: nor what a live process decides with (records created after a `pins` seq, instances
        wanted, building or waiting, queued and running job runs, refs wanted, waited for or in flight), so
        its steps do not read them back each time."""
        state = self.state
        floor = min((pin() for pin in self.pins.values()), default=None) if for_decisions else None
        if kind == INSTANCE:
            instances = state.instances
            hot = _LIVE if for_decisions else 0
            return [key for key in keys if _goes(dict.__getitem__(instances, key), hot, floor)]
        if kind == WANT:
            wants = state.wants
            ended = (key for key in keys if dict.__getitem__(wants, key).tally is None)
            return [key for key in ended if _goes(dict.__getitem__(wants, key), 0, floor)]
        if kind == RUN:
            runs, active = state.job_runs, state.active_run_ids if for_decisions else {}
            return [key for key in keys if key not in active and _goes(dict.__getitem__(runs, key), 0, floor)]
        keep: Container[str] = state.serving
        if for_decisions:
            keep = {*state.serving, *state.active_wants_by_ref, *state.waiters, *_refs_in_flight(state)}
        return [key for key in keys if key not in keep]

    def evict(self, keys: Mapping[str, Iterable[str]]) -> None:
        """Drop these records (from `evictable`) from memory: they are read back from their rows when asked for."""
        state = self.state
        for kind, names in self.TABLES.items():
            tables = [getattr(state, name) for name in names]
            if kind in (INSTANCE, REF):
                tables.append(state.fields)
            cold = self.keys[kind]
            returned = tables[0].returned
            going = list(keys.get(kind, ()))
            for key in going:
                for table in tables:
                    dict.pop(table, key, None)
                returned.discard(key)
                cold.add(key)
            if going:
                self.source.went_cold(kind, going)
            self.faults.evicted[kind] = self.faults.evicted.get(kind, 0) + len(going)


def _part_of(main: dict[str, Any], load: Callable[[str], bool]) -> Callable[[str], bool]:
    """The fault of a table holding a part of the records of `main`: none while the record is held (its parts
    go and come back with it, so a miss is a part it lacks: most instances have no history, no check results),
    its load otherwise. Most misses of a fold are such, and a look in `main` is cheaper than `ColdKeys.maybe`."""

    def fault(key: str) -> bool:
        return not dict.__contains__(main, key) and load(key)

    return fault


def _goes(record: Instance | Want | JobRun, hot: int, floor: int | None) -> bool:
    """Whether `record` may go cold: an instance in a state at or after `hot` (0: any), created by `floor`."""
    return (floor is None or record.created_seq <= floor) and (not hot or record.state >= hot)


def _refs_in_flight(state: BuildState) -> Iterator[str]:
    """The refs whose canonical instance is held and not Live nor ended (wanted, building, waiting)."""
    instances = state.instances
    for ref, uuid in dict.items(state.canonical):
        instance = dict.get(instances, uuid) if uuid is not None else None
        if instance is not None and instance.state < _LIVE:
            yield ref


def created_since(table: dict[str, _R], seen: int) -> list[_R]:
    """The records of `table` (instances, wants or job runs by key) created after seq `seen`, oldest first.

    A dict keeps the order records were created in, so the walk goes back from the newest and stops at the
    first created by `seen`; a working set's table also holds records read back, each put at the end
    whenever it was created, which the walk steps over (`ColdMain.returned`)."""
    returned: Container[str] = table.returned if isinstance(table, ColdMain) else ()
    found: list[_R] = []
    for key in reversed(table):
        record = dict.__getitem__(table, key)
        if record.created_seq <= seen:
            if key in returned:
                continue
            break
        found.append(record)
    found.reverse()
    found.sort(key=_created_seq)  # stable: records of one seq stay in the order they were created
    return found


def _created_seq(record: Any) -> int:
    return int(record.created_seq)


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
