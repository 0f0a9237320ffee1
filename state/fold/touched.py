"""What the fold changed since a seq: the keys of the instances, wants, job runs, refs, versions of small
records and check requests it changed.

Off (`BuildState.touched` is None) unless a projector of the state store turns it on (state/store/): then
every change the fold makes to a record adds its key here (a creation, a state change, and the changes that
are no state change: a heartbeat, a consumer, a note, what it waits for, a superseding, a drop; a ref's
canonical pointer and what it serves), and a projector pass reads these records only, instead of scanning
every record. How the state runs, not what it holds: left out of the digest and of snapshots (a loaded
state starts with it off).
"""

from __future__ import annotations


class Touched:
    """The keys of the records changed after `since` (a seq the state had folded when tracking began)."""

    __slots__ = ("check_requests", "dropped_from", "instances", "refs", "runs", "since", "versions", "wants")

    def __init__(self, since: int, dropped_from: int = 0) -> None:
        self.since = since
        # The length of `BuildState.dropped_changes` then: the deltas of instances dropped since come after it.
        self.dropped_from = dropped_from
        self.instances: set[str] = set()
        self.wants: set[str] = set()
        self.runs: set[str] = set()
        self.refs: set[str] = set()  # canonical pointers moved, what a ref serves, a first instance dropped
        self.versions: set[str] = set()  # small records that kept a new version (`name/key`)
        self.check_requests: set[str] = set()  # asked for or answered

    def absorb(self, earlier: Touched) -> None:
        """Take back what a pass drained but could not write: tracked since the earlier of the two."""
        self.since = min(self.since, earlier.since)
        self.dropped_from = min(self.dropped_from, earlier.dropped_from)
        self.instances |= earlier.instances
        self.wants |= earlier.wants
        self.runs |= earlier.runs
        self.refs |= earlier.refs
        self.versions |= earlier.versions
        self.check_requests |= earlier.check_requests
