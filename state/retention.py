"""Retention: which superseded instances an InstanceRetention would drop, and the seq a point in time maps to."""

from __future__ import annotations

from partbuild.state.build_state import BuildState
from partbuild.state.model import Instance
from partbuild.state.store import EventLog


def retention_candidates(state: BuildState, cutoff_seq: int) -> list[Instance]:
    """The instances `InstanceRetention(cutoff_seq)` would drop now: superseded, created before the cutoff."""
    instances = state.instances
    return [
        instances[uuid]
        for uuid in state._superseded
        if uuid in instances and instances[uuid].created_seq < cutoff_seq
    ]


def cutoff_seq_before(log: EventLog, before_ms: int) -> int:
    """The first seq recorded at or after `before_ms` (head + 1 if none): everything below it is older."""
    low, high = 1, log.head() + 1
    while low < high:
        middle = (low + high) // 2
        row = log.read(middle - 1, 1)[0]
        if row.recorded_at_ms >= before_ms:
            high = middle
        else:
            low = middle + 1
    return low if log.head() else 0
