"""Encoding BuildState snapshots: caches of the fold at a seq, never a source of truth.

A snapshot is only trusted by the exact code that wrote it: its format string
carries a fingerprint of the fold's source, so any change to the fold, the
entities or the id scheme makes older snapshots invisible (start-up then
replays from the log, which is always possible). Decoding uses an unpickler
that can only build partbuild's own state classes, so a tampered snapshot row
cannot run code.
"""

from __future__ import annotations

import hashlib
import io
import pickle
import sys
import zlib
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from partbuild.state import fold, rules
from partbuild.state.fold import records as model
from partbuild.state.fold.build_state import BuildState
from partbuild.state.fold.cold import WorkingSet
from partbuild.state.fold.registry import RECORD_CLASSES
from partbuild.state.log.collector import collector_paused

if TYPE_CHECKING:
    from _typeshed import ReadableBuffer, WriteableBuffer

# Bump to invalidate snapshots for a reason the source fingerprint cannot see.
SNAPSHOT_EPOCH = 1

# What a snapshot may contain: the state and the registry's record classes. Fold plans are never
# pickled: they live for one event.
_ALLOWED_CLASSES = frozenset((cls.__module__, cls.__qualname__) for cls in (BuildState, *RECORD_CLASSES))


class SnapshotError(Exception):
    """A snapshot payload that cannot be decoded into a BuildState, or a state that must not be encoded."""


def _fold_sources() -> list[Path]:
    """The source files whose change must invalidate snapshots: every module of the fold (its handlers, the
    registry, the records; new ones included), every pure rule the fold applies, the module of every record
    class the registry lists, and the encoding itself."""
    paths: set[Path] = set()
    for package in (fold, rules):
        assert package.__file__ is not None
        paths.update(Path(package.__file__).parent.glob("*.py"))
    for cls in RECORD_CLASSES:
        module = sys.modules[cls.__module__]
        assert module.__file__ is not None
        paths.add(Path(module.__file__))
    return [*sorted(paths), Path(__file__)]


@cache
def snapshot_format() -> str:
    """The format tag of snapshots this code writes and accepts."""
    h = hashlib.sha256()
    for path in _fold_sources():
        # The name too, so moving code between fold modules changes the tag.
        h.update(path.name.encode() + b"\0")
        h.update(path.read_bytes())
    return f"buildstate/{SNAPSHOT_EPOCH}/{h.hexdigest()[:16]}"


class _CompressingWriter(io.RawIOBase):
    """A write-only file that deflates as the pickler writes: only the compressed bytes are ever held.

    `pickle.dumps` then `zlib.compress` held the whole pickle (~0.7 GiB at a million
    instances) beside the state while a checkpoint was written.
    """

    def __init__(self) -> None:
        self._deflate = zlib.compressobj(1)  # fast: snapshots are written on the hot path of start-up
        self._chunks: list[bytes] = []

    def writable(self) -> bool:
        return True

    def write(self, data: ReadableBuffer, /) -> int:
        self._chunks.append(self._deflate.compress(data))
        return memoryview(data).nbytes

    def payload(self) -> bytes:
        self._chunks.append(self._deflate.flush())
        return b"".join(self._chunks)


class _DecompressingReader(io.RawIOBase):
    """A read-only file inflating a payload as the unpickler reads it."""

    def __init__(self, payload: bytes) -> None:
        self._inflate = zlib.decompressobj()
        self._payload = memoryview(payload)
        self._offset = 0
        self._pending = memoryview(b"")  # inflated bytes not read yet (a view: reading never copies the rest)

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: WriteableBuffer, /) -> int:
        view = memoryview(buffer)  # any writable buffer (BufferedReader passes a memoryview)
        while not self._pending:
            if self._offset >= len(self._payload):
                self._pending = memoryview(self._inflate.flush())
                break
            chunk = self._payload[self._offset : self._offset + _CHUNK]
            self._offset += len(chunk)
            self._pending = memoryview(self._inflate.decompress(chunk))
        count = min(len(view), len(self._pending))
        view[:count] = self._pending[:count]
        self._pending = self._pending[count:]
        return count


_CHUNK = 1 << 20


def encode_state(state: BuildState, extra: object = None) -> bytes:
    """Serialize a BuildState, compressing as it is pickled (then `extra`, plain values, if any)."""
    if state.broken:
        raise SnapshotError("the state is half-applied (an apply phase raised); it must not be snapshotted")
    writer = _CompressingWriter()
    with collector_paused(), io.BufferedWriter(writer, _CHUNK) as buffered:
        pickler = pickle.Pickler(buffered, protocol=pickle.HIGHEST_PROTOCOL)
        _dump(state, pickler)
        if extra is not None:
            pickler.dump(extra)
        buffered.flush()
        return writer.payload()


def working_set_format() -> str:
    """The format tag of a working set's snapshots (state/fold/cold.py): only a working set loads them (its
    records gone cold are not in them), and only with the store's rows as of their seq."""
    return f"{snapshot_format()}/working-set-2"  # 2: the cold keys' hashes the same in every process (the first
    # format's were salted by the process that saved them: a start found none of its cold records)


def encode_working_set(working: WorkingSet) -> bytes:
    """A working set's snapshot: its state with what it holds, then its cold keys."""
    return WorkingSetSnapshot(working).payload()


class WorkingSetSnapshot:
    """`encode_working_set` in two steps, so a running process holds its state's lock for the first only: made
    under it, the state with what it holds is pickled and compressed (small: a working set) and the cold keys'
    parts are taken (their sorted levels as they are, never changed once made; the rest copied); `payload`, after
    letting go, pickles and compresses the keys (8 bytes a key: most of the bytes, and of the time: 0.8 of the
    0.96 s at a million instances)."""

    def __init__(self, working: WorkingSet) -> None:
        state = working.plain_state()
        if state.broken:
            raise SnapshotError("the state is half-applied (an apply phase raised); it must not be snapshotted")
        self._writer = _CompressingWriter()
        self._buffered = io.BufferedWriter(self._writer, _CHUNK)
        self._pickler = pickle.Pickler(self._buffered, protocol=pickle.HIGHEST_PROTOCOL)
        with collector_paused():
            _dump(state, self._pickler)
        self._parts = working.parts()

    def payload(self) -> bytes:
        keys = {
            kind: ([pickle.PickleBuffer(level) for level in levels], *rest)
            for kind, (levels, *rest) in self._parts["keys"].items()
        }  # the levels' bytes written from their buffers, not copied first
        with collector_paused(), self._buffered:
            self._pickler.dump({**self._parts, "keys": keys})
            self._buffered.flush()
            return self._writer.payload()


def decode_working_set(payload: bytes) -> tuple[BuildState, dict[str, Any]]:
    """The state and the parts of `encode_working_set`'s output (`WorkingSet.restored` puts them together)."""
    found: list[Any] = []
    state = decode_state(payload, found.append)
    if len(found) != 1 or not isinstance(found[0], dict):
        raise SnapshotError("a working set's snapshot without its cold keys")
    return state, found[0]


# The record tables: pickled after every shared string is in the pickler's memo, without memoizing them.
_TABLES = ("instances", "wants", "job_runs")


def _dump(state: BuildState, pickler: pickle.Pickler) -> None:
    """The state without its record tables, the strings records share, then the tables in fast mode.

    Why not `dump(state)`: the pickler's memo keeps a reference to everything it
    pickled until the end, so every record and the field tuple it pickles as
    stayed alive beside the state (about the state's size again at a million
    instances). Here the memo first learns every shared object (record classes,
    state enums, ids, refs, labels) from the indexes; the tables are then
    written in fast mode, where existing memo entries are still used (strings
    stay shared after loading) but nothing new is kept.
    """
    shell = BuildState.__new__(BuildState)
    for name, value in state.attributes().items():
        # The tables come after; whether the fold tracks what it touched is the process's, not the state's.
        setattr(shell, name, {} if name in _TABLES else None if name == "touched" else value)
    pickler.dump(shell)
    wants = state.wants.values()
    shared = [
        # The record classes first: in fast mode a class not in the memo is written (and looked up
        # when loading) once per record.
        [model.Instance, model.Want, model.JobRun, *model.InstanceState, *model.WantState, *model.JobRunState],
        list(state.instances),
        list(state.wants),
        list(state.job_runs),
        list({run.job_label: None for run in state.job_runs.values()}),
        list({text: None for want in wants for text in (want.comment, want.source)}),
    ]
    pickler.dump(shared)
    pickler.fast = True
    for name in _TABLES:
        pickler.dump(getattr(state, name))


def _load(unpickler: pickle.Unpickler) -> BuildState:
    """The inverse of `_dump`."""
    state = unpickler.load()
    if not isinstance(state, BuildState):
        raise SnapshotError(f"snapshot holds a {type(state).__name__}, not a BuildState")
    unpickler.load()  # the shared strings: the unpickler's memo holds them for the tables
    for name in _TABLES:
        table = unpickler.load()
        if not isinstance(table, dict):
            raise SnapshotError(f"snapshot table {name} is a {type(table).__name__}, not a dict")
        setattr(state, name, table)
    return state


class StateUnpickler(pickle.Unpickler):
    """An unpickler that builds the state's own classes only: snapshots, and the state store's record rows."""

    def find_class(self, module: str, name: str) -> type:
        if (module, name) not in _ALLOWED_CLASSES:
            raise SnapshotError(f"snapshot refers to {module}.{name}, which is not a state class")
        return super().find_class(module, name)


def decode_state(payload: bytes, extra: Callable[[object], None] | None = None) -> BuildState:
    """Rebuild a BuildState from `encode_state` output; SnapshotError if it is not one. `extra`: given what
    follows the state (what `encode_state` was given as `extra`)."""
    try:
        with collector_paused():
            unpickler = StateUnpickler(io.BufferedReader(_DecompressingReader(payload), _CHUNK))
            state = _load(unpickler)
            if extra is not None:
                extra(unpickler.load())
    except SnapshotError:
        raise
    except Exception as exc:
        raise SnapshotError(f"snapshot payload cannot be decoded: {exc!r}") from exc
    return state
