"""A ref's cell in the status grid: its canonical instance's state, with two refinements.

A Live instance whose latest checks warned or errored is `warning`; a Missing one that replaced a tainted one
(not rebuilt yet) is `tainted`. `cell_states` answers for many refs, now or as of a seq (a grid asks for
100,000); `ref_cell` answers for one ref of the live state with the seq since which its cell has held, which
the state store keeps beside each ref (state/store/cells.py) so a read replica's grid is a range scan.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

from partbuild.state.fold.build_state import BuildState
from partbuild.state.fold.checks import warned
from partbuild.state.fold.past import PastState, canonical_at, instance_state_at, live_state
from partbuild.state.fold.records import InstanceState
from partbuild.state.fold.view import StateView

_NAMES: Final = {state: state.name.lower() for state in InstanceState}
WARNING: Final = "warning"
TAINTED: Final = _NAMES[InstanceState.TAINTED]
GRID_STATES: Final = [*_NAMES.values(), WARNING]  # the names cells hold, one object each
# A cell's number in the store: its index in GRID_STATES.
CELL_CODES: Final = {name: code for code, name in enumerate(GRID_STATES)}
_LIVE, _MISSING, _TAINTED = InstanceState.LIVE, InstanceState.MISSING, InstanceState.TAINTED


def cell_states(state: StateView, refs: Iterable[str]) -> list[tuple[str, str]]:
    """(ref, grid state) of each of `refs` that has an instance as of the state's seq, in their order.

    One tight loop: dict lookups, the state names precomputed. As of a seq the states come from the live
    records and their histories (`canonical_at`, `instance_state_at`, with their common case inline: a record
    unchanged since that seq), not from rebuilt past Instance records."""
    past = isinstance(state, PastState)
    live = live_state(state)
    seq = state.head_seq
    canonical, instances, checked = live.canonical, live.instances, live.check_results
    out: list[tuple[str, str]] = []
    append = out.append
    for ref in refs:
        uuid = canonical.get(ref)
        if uuid is None:
            continue
        instance = instances.get(uuid)
        if past and (instance is None or instance.created_seq > seq):
            uuid = canonical_at(live, ref, seq)
            if uuid is None:
                continue
            instance = instances[uuid]
        assert instance is not None
        found = instance.state if not past or instance.updated_seq <= seq else instance_state_at(live, instance, seq)[0]
        if found is _LIVE:
            if uuid in checked and warned(state.check_results.get(uuid, ())):
                append((ref, WARNING))
                continue
        elif found is _MISSING and instance.previous_uuid is not None:
            previous = instances.get(instance.previous_uuid)
            if previous is not None:
                before = previous.state if not past or previous.updated_seq <= seq else None
                if before is None:
                    before = instance_state_at(live, previous, seq)[0]
                if before is _TAINTED:
                    # A taint makes a fresh Missing instance canonical at once: "tainted" until rebuilt.
                    append((ref, TAINTED))
                    continue
        append((ref, _NAMES[found]))
    return out


def cell_state(state: StateView, ref: str) -> str | None:
    """The grid's state of `ref` (None: no instance as of the state's seq)."""
    found = cell_states(state, [ref])
    return found[0][1] if found else None


def ref_cell(state: BuildState, ref: str) -> tuple[int, int] | None:
    """(cell code, since) of `ref` in the live state, None while it has no instance: `since` is a seq from which
    on every read as of a seq gets this cell (`cell_states` then takes its fast path at each step: the canonical
    instance created by then, its state and checks unchanged since, its predecessor's state too)."""
    uuid = state.canonical.get(ref)
    if uuid is None:
        return None
    found = cell_state(state, ref)
    assert found is not None
    instance = state.instances[uuid]
    since = max(instance.created_seq, instance.updated_seq)
    entries = state.check_results.get(uuid)
    if entries:
        since = max(since, entries[-1][0])
    if instance.previous_uuid is not None:
        previous = state.instances.get(instance.previous_uuid)
        if previous is not None:
            since = max(since, previous.updated_seq)
    return CELL_CODES[found], since
