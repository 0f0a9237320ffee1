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

from partbuild.state import build_state, fold, ids, model, refs
from partbuild.state.build_state import BuildState
from partbuild.state.collector import collector_paused

# Bump to invalidate snapshots for a reason the source fingerprint cannot see.
SNAPSHOT_EPOCH = 1

# What a snapshot may contain. Fold plans are never pickled: they live for one event.
_ALLOWED_CLASSES = {
    ("partbuild.state.build_state", "BuildState"),
    *(
        ("partbuild.state.model", name)
        for name in ("Instance", "Want", "JobRun", "Rejection", "InstanceState", "WantState", "JobRunState")
    ),
}


class SnapshotError(Exception):
    """A snapshot payload that cannot be decoded into a BuildState, or a state that must not be encoded."""


def _fold_sources() -> list[Path]:
    """The source files whose change must invalidate snapshots: entities, the fold (every module of
    `partbuild.state.fold`, new ones included), ids and refs."""
    paths = []
    for module in (model, build_state, ids, refs):
        assert module.__file__ is not None
        paths.append(Path(module.__file__))
    assert fold.__file__ is not None
    paths.extend(sorted(Path(fold.__file__).parent.glob("*.py")))
    return paths


@cache
def snapshot_format() -> str:
    """The format tag of snapshots this code writes and accepts."""
    h = hashlib.sha256()
    for path in _fold_sources():
        # The name too, so moving code between fold modules changes the tag.
        h.update(path.name.encode() + b"\0")
        h.update(path.read_bytes())
    return f"buildstate/{SNAPSHOT_EPOCH}/{h.hexdigest()[:16]}"


def encode_state(state: BuildState) -> bytes:
    """Serialize a BuildState (fast compression: snapshots are written on the hot path of start-up)."""
    if state.broken:
        raise SnapshotError("the state is half-applied (an apply phase raised); it must not be snapshotted")
    with collector_paused():
        return zlib.compress(pickle.dumps(state, protocol=pickle.HIGHEST_PROTOCOL), 1)


class _StateUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> type:
        if (module, name) not in _ALLOWED_CLASSES:
            raise SnapshotError(f"snapshot refers to {module}.{name}, which is not a state class")
        return super().find_class(module, name)


def decode_state(payload: bytes) -> BuildState:
    """Rebuild a BuildState from `encode_state` output; SnapshotError if it is not one."""
    try:
        with collector_paused():
            state = _StateUnpickler(io.BytesIO(zlib.decompress(payload))).load()
    except SnapshotError:
        raise
    except Exception as exc:
        raise SnapshotError(f"snapshot payload cannot be decoded: {exc!r}") from exc
    if not isinstance(state, BuildState):
        raise SnapshotError(f"snapshot holds a {type(state).__name__}, not a BuildState")
    return state
