"""Applying retention from the run loop: drop instances superseded more than a number of days ago.

`RetentionPolicy` (`run --retain-days`) says when to append `InstanceRetention`. Off by
default. When on, the loop asks at most once per check interval whether some
superseded (non-canonical) instance stopped being canonical before the cutoff, and only then
appends one `InstanceRetention`; the fold decides what goes (never a canonical
instance), so replay stays deterministic whatever clock computed the cutoff.
"""

from __future__ import annotations

from dataclasses import dataclass

from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.fold.build_state import BuildState
from partbuild.state.log.events import envelope, system
from partbuild.state.log.store import EventLog
from partbuild.state.queries.retention import cutoff_seq_before, cutoff_sparing_active_runs, retention_candidates

DAY_MS = 86_400_000
RETENTION = system("retention")


@dataclass
class RetentionPolicy:
    """Keep `retain_days` days of history (instances superseded since); look every `check_interval_ms`."""

    retain_days: int
    check_interval_ms: int = 3_600_000
    next_check_ms: int = 0

    def cutoff_due(self, log: EventLog, now_ms: int) -> int:
        """The cutoff seq to apply now if a check is due (I/O: the log maps time to a seq), else 0."""
        if now_ms < self.next_check_ms:
            return 0
        self.next_check_ms = now_ms + self.check_interval_ms
        return cutoff_seq_before(log, now_ms - self.retain_days * DAY_MS)


def retention_event(state: BuildState, cutoff_seq: int, now_ms: int) -> pb.Event | None:
    """The InstanceRetention to append for this cutoff, if some instance was superseded long enough ago to go.

    The cutoff is lowered so that no instance a queued or running job may still name as
    an input is dropped (its success would be rejected and the work done again).
    """
    cutoff_seq = cutoff_sparing_active_runs(state, cutoff_seq)
    if cutoff_seq <= 0 or not retention_candidates(state, cutoff_seq):
        return None
    dropping = pb.InstanceRetention(drop_superseded_before_seq=cutoff_seq)
    return envelope(dropping, source=RETENTION, timestamp_ms=now_ms)
