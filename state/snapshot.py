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
import zlib
from functools import cache
from pathlib import Path

from partbuild.state import build_state, ids, model, refs
from partbuild.state.build_state import BuildState
from partbuild.state.collector import collector_paused

# Bump to invalidate snapshots for a reason the source fingerprint cannot see.
SNAPSHOT_EPOCH = 1

_ALLOWED_CLASSES = {
    ("partbuild.state.build_state", "BuildState"),
    *(
        ("partbuild.state.model", name)
        for name in ("Instance", "Want", "JobRun", "Rejection", "InstanceState", "WantState", "JobRunState")
    ),
}


class SnapshotError(Exception):
    """A snapshot payload that cannot be decoded into a BuildState."""


@cache
def snapshot_format() -> str:
    """The format tag of snapshots this code writes and accepts."""
    h = hashlib.sha256()
    for module in (model, build_state, ids, refs):
        assert module.__file__ is not None
        h.update(Path(module.__file__).read_bytes())
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

    def write(self, data: bytes) -> int:  # type: ignore[override]
        self._chunks.append(self._deflate.compress(data))
        return len(data)

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

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        while not self._pending:
            if self._offset >= len(self._payload):
                self._pending = memoryview(self._inflate.flush())
                break
            chunk = self._payload[self._offset : self._offset + _CHUNK]
            self._offset += len(chunk)
            self._pending = memoryview(self._inflate.decompress(chunk))
        count = min(len(buffer), len(self._pending))
        buffer[:count] = self._pending[:count]
        self._pending = self._pending[count:]
        return count


_CHUNK = 1 << 20


def encode_state(state: BuildState) -> bytes:
    """Serialize a BuildState, compressing as it is pickled."""
    writer = _CompressingWriter()
    with collector_paused(), io.BufferedWriter(writer, _CHUNK) as buffered:
        pickle.Pickler(buffered, protocol=pickle.HIGHEST_PROTOCOL).dump(state)
        buffered.flush()
        return writer.payload()


class _StateUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> type:
        if (module, name) not in _ALLOWED_CLASSES:
            raise SnapshotError(f"snapshot refers to {module}.{name}, which is not a state class")
        return super().find_class(module, name)


def decode_state(payload: bytes) -> BuildState:
    """Rebuild a BuildState from `encode_state` output; SnapshotError if it is not one."""
    try:
        with collector_paused():
            state = _StateUnpickler(io.BufferedReader(_DecompressingReader(payload), _CHUNK)).load()
    except SnapshotError:
        raise
    except Exception as exc:
        raise SnapshotError(f"snapshot payload cannot be decoded: {exc!r}") from exc
    if not isinstance(state, BuildState):
        raise SnapshotError(f"snapshot holds a {type(state).__name__}, not a BuildState")
    return state
