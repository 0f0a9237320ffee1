"""A ref's cell in the status grid: its canonical instance's state, with two refinements.

A Live instance whose latest checks warned or errored is `warning`; a Missing one that replaced a tainted one
(not rebuilt yet) is `tainted`. `cell_states` answers for many refs, now or as of a seq (a grid asks for
100,000); `ref_cell` answers for one ref of the live state with the seq since which its cell has held, which
the state store keeps beside each ref (state/store/cells.py) so a read replica's grid is a range scan.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Final, cast

from partbuild.state.fold.build_state import BuildState
from partbuild.state.fold.checks import CheckEntry, latest_checks, warned
from partbuild.state.fold.past import PastState, canonical_at, instance_state_at, live_state
from partbuild.state.fold.records import InstanceState
from partbuild.state.fold.view import StateView
from partbuild.state.rules.check_results import check_result_name

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


CheckPairs = tuple[tuple[str, str], ...]  # (check name, CheckResultName) of an instance's latest checks


def ref_cell(state: BuildState, ref: str) -> tuple[int, int, CheckPairs | None] | None:
    """(cell code, since, checks) of `ref` in the live state, None while it has no instance. `checks`: the latest
    checks of the instance its readers get (a stale one still serving, else the canonical one), as a grid's
    check filter reads them (None: never checked). `since`: a seq from which on every read as of a seq gets
    this cell and these checks (`cell_states` then takes its fast path at each step: the canonical instance
    created by then, its state and checks unchanged since, its predecessor's state too; and the instance
    readers get the same, with its checks)."""
    uuid = state.canonical.get(ref)
    if uuid is None:
        return None
    found = cell_state(state, ref)
    assert found is not None
    instances, results = state.instances, state.check_results
    instance = instances[uuid]
    since = max(instance.created_seq, instance.updated_seq, _checked_seq(results, uuid))
    if instance.previous_uuid is not None:
        previous = instances.get(instance.previous_uuid)
        if previous is not None:
            since = max(since, previous.updated_seq)
    kept = state.fields.get(ref)  # a ref's kept changes are what it served: the last one counts
    if kept:
        since = max(since, cast(int, kept[-3]))  # (seq, field, value) triples
    served = state.serving.get(ref, uuid)
    if served != uuid:
        since = max(since, instances[served].updated_seq, _checked_seq(results, served))
    latest = latest_checks(results.get(served, ()))
    checks = None if latest is None else tuple((row[0], check_result_name(row[1], row[2], row[3])) for row in latest[1])
    return CELL_CODES[found], since, checks


def _checked_seq(results: Mapping[str, tuple[CheckEntry, ...]], uuid: str) -> int:
    """The seq of an instance's latest checks (0: none)."""
    entries = results.get(uuid)
    return entries[-1][0] if entries else 0
