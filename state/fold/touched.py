"""What the fold changed since a seq: the keys of the instances, wants, job runs, refs, versions of small
records and check requests it changed.

Off (`BuildState.touched` is None) unless a projector of the state store turns it on (state/store/): then
every change the fold makes to a record adds its key here (a creation, a state change, and the changes that
are no state change: a heartbeat, a consumer, a note, what it waits for, a superseding, a drop; a ref's
canonical pointer and what it serves), and a projector pass reads these records only, instead of scanning
every record. How the state runs, not what it holds: left out of the digest and of snapshots (a loaded
state starts with it off).

A pass drains the state's record and puts a new one in its place (`after`), which keeps the drained ones for
a while (`KEPT_LINKS`, `KEPT_KEYS`): a reader that asks what changed after a recent seq (`changed_after`: a
folding server's grid brought forward from its last head) reads their keys, not every record.
"""

from __future__ import annotations

KEPT_LINKS = 32  # drained records a new one keeps, newest first
KEPT_KEYS = 200_000  # and at most about this many instance and ref keys in them


class Touched:
    """The keys of the records changed after `since` (a seq the state had folded when tracking began)."""

    __slots__ = (
        "check_requests",
        "dropped_from",
        "instances",
        "previous",
        "refs",
        "runs",
        "since",
        "versions",
        "wants",
    )

    def __init__(self, since: int, dropped_from: int = 0) -> None:
        self.since = since
        self.previous: Touched | None = None  # the record drained before this one began, kept for readers
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

    def after(self, head: int, dropped_from: int) -> Touched:
        """The record that replaces this one, drained at `head`: it keeps this one, and the bounded chain of those
        before it, for `changed_after`."""
        new = Touched(head, dropped_from)
        new.previous = self
        link, links, keys = self, 1, len(self.instances) + len(self.refs)
        while link.previous is not None:
            if links >= KEPT_LINKS or keys >= KEPT_KEYS:
                link.previous = None  # (a reader walking the chain meanwhile stops here: it scans instead)
                break
            link = link.previous
            links, keys = links + 1, keys + len(link.instances) + len(link.refs)
        return new


def changed_after(touched: Touched | None, seq: int) -> tuple[set[str], set[str]] | None:
    """(UUIDs of the instances, refs) whose records changed after `seq`, from the state's record of what the
    fold touched and the drained ones it keeps; None when tracking is off or they do not reach back to `seq`.

    Safe beside the fold's thread only under the state's read lock; beside a projector's pass, each set is
    copied by one C-level call (the GIL held throughout), so none is read while it changes."""
    instances: set[str] = set()
    refs: set[str] = set()
    link = touched
    while link is not None:
        instances.update(link.instances)
        refs.update(link.refs)
        if link.since <= seq:
            return instances, refs
        link = link.previous
    return None
