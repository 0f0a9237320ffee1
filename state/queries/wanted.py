"""Waiting instances no active want needs: what a want that expired or was canceled left behind.

An instance *waits* while it is Missing, UpstreamBuilding or UpForRetry: those are the
states that move on only when the orchestrator acts, and it acts only for refs an active
(non-terminal) want names (`decide` walks `active_wants_by_ref`). Building is not waiting:
its job run is in flight and ends it on its own; Live, Failed, UpstreamFailed, Tainted,
Canceled and Gone are where instances end. So a waiting instance whose ref no active want
names is *unwanted*: nothing will build it until someone wants its ref again.

"Directly or through derivative wants": upstream refs are wanted by derivative wants, which
are wants of their own (`parent_want_id` set). They end with their parent: a cancel cascades
to them (state/fold/wants.py), and the orchestrator gives them the parent's data timestamp
and TTL, so they expire with it. An upstream instance is therefore wanted exactly while
the derivative want naming it is active, which is while its parent is.

Cheap at a million instances: waiting instances are always canonical (every event that
supersedes an instance ends it: Tainted, Canceled, or it was Failed or Live already), so
per state the wanted ones are the active refs whose canonical instance is in it, which the
fold counts as it goes (`BuildState.wanted_instance_counts`), and the unwanted ones the rest
of the state's count: O(states) per read, whatever the number of instances or active refs.
As of a seq the same rule reads the state then (`PastState`: its counts, a scan of the
records as before, and its active wants' canonical instances).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from partbuild.state.fold.records import Instance, InstanceState
from partbuild.state.fold.view import StateView

# The states an instance waits in for the orchestrator to act (see the module docstring).
WAITING_STATES = (InstanceState.MISSING, InstanceState.UPSTREAM_BUILDING, InstanceState.UP_FOR_RETRY)
WAITING_STATE_NAMES = tuple(state.name.lower() for state in WAITING_STATES)


@dataclass(frozen=True)
class WaitingCount:
    """Instances in one waiting state: how many an active want needs, how many none does."""

    total: int
    wanted: int

    @property
    def unwanted(self) -> int:
        return self.total - self.wanted


def is_unwanted(state: StateView, instance: Instance) -> bool:
    """Whether `instance` waits (Missing, UpstreamBuilding, UpForRetry) and no active want names its ref."""
    return instance.state in WAITING_STATES and instance.ref not in state.active_wants_by_ref


def waiting_counts(state: StateView, instance_counts: Mapping[str, int]) -> dict[str, WaitingCount]:
    """Per waiting state (by name), how many instances are in it and how many of them an active want needs.

    `instance_counts` are the state's counts by state name (`state.counts()["instances"]`): as of a
    seq they cost a scan already, and the caller has them. The wanted ones are an index of the fold
    (`wanted_instance_counts`): O(states) now; as of a seq, O(wants + active refs) (`PastState`).
    """
    wanted = state.wanted_instance_counts
    return {
        name: WaitingCount(instance_counts[name], wanted[waiting])
        for name, waiting in zip(WAITING_STATE_NAMES, WAITING_STATES, strict=True)
    }
