"""What the fold changed since a seq: the keys of the instances, wants and job runs whose state moved.

Off (`BuildState.touched` is None) unless a projector of the state store turns it on (state/store/): then
every creation and state change of a record adds its key here, and a projector pass reads the changes of
these records only, instead of scanning every record's `updated_seq`. How the state runs, not what it
holds: left out of the digest and of snapshots (a loaded state starts with it off).
"""

from __future__ import annotations


class Touched:
    """The keys of the records changed after `since` (a seq the state had folded when tracking began)."""

    __slots__ = ("dropped_from", "instances", "runs", "since", "wants")

    def __init__(self, since: int, dropped_from: int = 0) -> None:
        self.since = since
        # The length of `BuildState.dropped_changes` then: the deltas of instances dropped since come after it.
        self.dropped_from = dropped_from
        self.instances: set[str] = set()
        self.wants: set[str] = set()
        self.runs: set[str] = set()

    def absorb(self, earlier: Touched) -> None:
        """Take back what a pass drained but could not write: tracked since the earlier of the two."""
        self.since = min(self.since, earlier.since)
        self.dropped_from = min(self.dropped_from, earlier.dropped_from)
        self.instances |= earlier.instances
        self.wants |= earlier.wants
        self.runs |= earlier.runs
