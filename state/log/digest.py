"""A stable digest of a whole BuildState, for audits.

Two replays of the same log, or a snapshot plus its tail, must give the same
digest. It walks `BuildState.LAYOUT` (state/fold/layout.py), which declares
every attribute once: entities are hashed in sorted key order from their
records' `digest_values()`, so the digest depends on what the state holds, not
on dict insertion order or on which process computed it. Derived indexes and
settings are left out: they follow from the entities. Fields added to a record
later are left out while unset (`_Record.added_later`), and attributes added
later while empty, so old logs keep their digests.
"""

from __future__ import annotations

import hashlib

from partbuild.state.fold.build_state import BuildState
from partbuild.state.fold.layout import Section
from partbuild.state.log.collector import collector_paused


def state_digest(state: BuildState, layout: tuple[Section, ...] = BuildState.LAYOUT) -> str:
    """Hex SHA-256 over the state's digested sections, in layout order (tests pass a broken layout)."""
    h = hashlib.sha256()
    with collector_paused():
        for section in layout:
            section.digest(state, h.update)
    return h.hexdigest()
