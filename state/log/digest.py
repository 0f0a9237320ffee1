"""A stable digest of a whole BuildState, for audits.

Two replays of the same log, or a snapshot plus its tail, must give the same
digest. Entities are hashed in sorted key order from their record tuples, so
the digest depends on what the state holds, not on dict insertion order or on
which process computed it. Derived indexes are left out: they follow from the
entities.
"""

from __future__ import annotations

import hashlib

from partbuild.state.fold.build_state import BuildState
from partbuild.state.fold.records import SourceScan
from partbuild.state.log.collector import collector_paused


def state_digest(state: BuildState) -> str:
    """Hex SHA-256 over the state's entities, counts and rejections."""
    with collector_paused():
        return _digest(state)


def _digest(state: BuildState) -> str:
    h = hashlib.sha256()
    update = h.update
    update(repr(("head", state.head_seq, state.clock_ms, state.dropped_instances)).encode())
    for name, table in (("instance", state.instances), ("want", state.wants), ("job_run", state.job_runs)):
        update(f"\n{name}s {len(table)}".encode())
        for key in sorted(table):
            values = table[key].__getstate__()
            if name == "instance" and values[-1] is None:  # `version`, added last: see model.Instance
                values = values[:-1]
            update(repr(values).encode())
    update(b"\ncanonical")
    for ref in sorted(state.canonical):
        update(f"{ref!r}={state.canonical[ref]}".encode())
    update(b"\nrejections")
    for rejection in state.rejections:
        update(repr(rejection.__getstate__()).encode())
    update(repr((state.instance_counts, state.want_counts, state.run_counts)).encode())
    if state.bucket_runs:  # only where round-robin ran: logs from before bucketing keep their digests
        update(repr(sorted(state.bucket_runs.items())).encode())
    if state.bucket_layouts:
        update(repr(sorted(state.bucket_layouts.items())).encode())
    if state.groups:  # only where a group ran: older logs keep their digests
        update(repr([state.groups[name].record() for name in sorted(state.groups)]).encode())
    if state.sources:  # only where a connector scanned: older logs keep their digests
        update(repr([_scan_record(state.sources[name]) for name in sorted(state.sources)]).encode())
    if state.subscriptions:  # only where subscriptions were made: older logs keep their digests
        update(repr([state.subscriptions[name].record() for name in sorted(state.subscriptions)]).encode())
    return h.hexdigest()


def _scan_record(scan: SourceScan) -> tuple[object, ...]:
    """A source scan's fields with its key ranges' fields in full (their repr is redacted, so not that)."""
    return tuple(
        [key_range.__getstate__() for key_range in value] if isinstance(value, list) else value
        for value in scan.__getstate__()
    )
