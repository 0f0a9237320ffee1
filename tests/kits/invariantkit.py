"""Checks of a folded BuildState, for the fold's tests: a comparable view of the whole state, the
structural invariants that hold after every event, the lifecycle edges one applied event may take, a
taint's outcome, and that a rejected event changed nothing but `head_seq` and `rejections`."""

from __future__ import annotations

import pickle
from collections import Counter
from dataclasses import dataclass
from enum import IntEnum
from typing import Any

from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.fold.build_state import BuildState
from partbuild.state.fold.records import (
    ACTIVE_RUN_STATES,
    TERMINAL_WANT_STATES,
    Instance,
    InstanceState,
    JobRun,
    JobRunState,
    Rejection,
    Want,
    WantState,
)
from partbuild.state.fold.transitions import derive_want_state
from partbuild.state.queries.lineage import attempts_for
from partbuild.state.rules.ids import instance_uuid

from stepkit import Action, is_live

# ----------------------------------------------------------------------------- state comparison


def _plain(value: Any) -> Any:
    """A comparable deep copy: records as tuples, dicts as ordered item tuples (order matters)."""
    if isinstance(value, Instance | Want | JobRun | Rejection):
        return (type(value).__name__, tuple(_plain(v) for v in value.__getstate__()))
    if isinstance(value, dict):
        return ("dict", tuple((k, _plain(v)) for k, v in value.items()))
    if isinstance(value, list):
        return ("list", tuple(_plain(v) for v in value))
    if isinstance(value, tuple):
        return tuple(_plain(v) for v in value)
    if isinstance(value, IntEnum):
        return (type(value).__name__, int(value))
    if isinstance(value, bytearray):  # packed pairs (a run's heartbeats)
        return bytes(value)
    assert value is None or isinstance(value, str | int | float | bytes), type(value)
    return value


def state_view(state: BuildState) -> dict[str, Any]:
    """Every attribute of the state (entities, derived indexes, counters) as comparable plain data."""
    return {name: _plain(value) for name, value in state.attributes().items()}


# ----------------------------------------------------------------------------- invariants


def check_unchanged_but_rejection(
    before: bytes, state: BuildState, head: int, rejection_count: int, action: Action
) -> None:
    """Assert `state` equals the pickled `before` once head_seq and the new rejection are rolled back."""
    applied_head, rejections = state.head_seq, state.rejections
    state.head_seq, state.rejections = head, rejections[:rejection_count]
    try:
        rolled_back = pickle.dumps(state, protocol=pickle.HIGHEST_PROTOCOL)
        if rolled_back != before:  # the same object graph pickles to the same bytes; else compare values
            assert state_view(state) == state_view(pickle.loads(before)), f"rejected {action} changed the state"
    finally:
        state.head_seq, state.rejections = applied_head, rejections


_I = InstanceState
# Every instance state change one applied event may make (a new instance starts Missing or Live).
INSTANCE_TRANSITIONS: dict[InstanceState, frozenset[InstanceState]] = {
    _I.MISSING: frozenset({_I.BUILDING, _I.LIVE}),
    # Tainted: it succeeded, but an input it read was tainted or replaced by new data while it ran.
    # Missing: its run was canceled (older logs); Canceled: likewise, replaced by a fresh instance.
    _I.BUILDING: frozenset(
        {_I.LIVE, _I.FAILED, _I.UP_FOR_RETRY, _I.MISSING, _I.UPSTREAM_BUILDING, _I.TAINTED, _I.CANCELED}
    ),
    _I.UPSTREAM_BUILDING: frozenset({_I.MISSING, _I.UPSTREAM_FAILED}),
    _I.UP_FOR_RETRY: frozenset({_I.BUILDING, _I.LIVE}),
    _I.LIVE: frozenset({_I.TAINTED}),
    _I.FAILED: frozenset(),
    _I.UPSTREAM_FAILED: frozenset(),
    _I.TAINTED: frozenset(),
    _I.CANCELED: frozenset(),
}
RUN_TRANSITIONS: dict[JobRunState, frozenset[JobRunState]] = {
    JobRunState.QUEUED: frozenset(JobRunState) - {JobRunState.QUEUED},
    JobRunState.RUNNING: frozenset(JobRunState) - ACTIVE_RUN_STATES,
}


@dataclass(frozen=True)
class Marks:
    """The lifecycle fields of every entity, to compare across one event."""

    instances: dict[str, tuple[InstanceState, int]]  # uuid -> (state, superseded_seq)
    wants: dict[str, tuple[WantState, int]]  # want_id -> (state, updated_seq)
    runs: dict[str, tuple[JobRunState, int]]  # job_run_id -> (state, updated_seq)


def marks(state: BuildState) -> Marks:
    return Marks(
        {u: (i.state, i.superseded_seq) for u, i in state.instances.items()},
        {k: (w.state, w.updated_seq) for k, w in state.wants.items()},
        {k: (r.state, r.updated_seq) for k, r in state.job_runs.items()},
    )


def check_transitions(before: Marks, state: BuildState, seq: int, kind: str | None) -> None:
    """Assert that the applied event at `seq` (of payload `kind`) moved entities only along allowed edges."""
    for uuid, (old, superseded_seq) in before.instances.items():
        inst = state.instances.get(uuid)
        if inst is None:
            assert kind == "instance_retention" and superseded_seq, f"{kind} dropped {uuid} ({old.name})"
            continue
        if inst.state != old:
            assert inst.state in INSTANCE_TRANSITIONS[old], f"{kind}: {inst.ref!r} went {old.name}->{inst.state.name}"
            assert inst.updated_seq == seq
        if superseded_seq:
            assert inst.superseded_seq == superseded_seq, "superseded twice"
    for uuid, inst in state.instances.items():
        if uuid not in before.instances:
            assert inst.created_seq == seq and inst.state in (_I.MISSING, _I.LIVE), f"{kind} created {inst}"
    for want_id, (old_state, old_seq) in before.wants.items():
        want = state.wants[want_id]
        if old_state in TERMINAL_WANT_STATES:
            assert (want.state, want.updated_seq) == (old_state, old_seq), f"terminal want {want_id} changed"
        elif want.state != old_state:
            assert want.updated_seq == seq
    assert kind == "want_create" or len(state.wants) == len(before.wants)
    for run_id, (old_run_state, old_seq) in before.runs.items():
        run = state.job_runs[run_id]
        if run.state != old_run_state:
            moved = f"{run_id}: {old_run_state.name}->{run.state.name}"
            assert run.state in RUN_TRANSITIONS.get(old_run_state, ()), moved
            assert run.updated_seq == seq
        elif old_run_state not in ACTIVE_RUN_STATES:
            assert run.updated_seq == old_seq
    assert len(state.job_runs) == len(before.runs) + (kind == "job_run_buffer")


def check_taint_outcome(state: BuildState, seq: int, msg: pb.PartitionTaint) -> None:
    """After an applied taint: the ref's Live instance was replaced; cascades reached every Live consumer."""
    fresh = state.instances[state.canonical[msg.partition_ref]]
    assert fresh.state == InstanceState.MISSING and fresh.created_seq == seq
    first = state.instances[fresh.previous_uuid or ""]
    tainted = [i for i in state.instances.values() if i.state == InstanceState.TAINTED and i.updated_seq == seq]
    assert first in tainted
    for instance in tainted:
        assert instance.superseded_seq == seq and instance.note
        if msg.only_this_ref:
            assert instance is first, f"only_this_ref taint reached {instance.ref!r}"
            continue
        for uuid in instance.consumers or ():
            consumer = state.instances[uuid]
            assert consumer.superseded_seq or consumer.state != InstanceState.LIVE, (
                f"consumer {consumer.ref!r} of tainted {instance.ref!r} is still canonical and Live"
            )


def check_invariants(state: BuildState) -> None:
    """Assert the fold's structural invariants; each holds after every event, applied or rejected."""
    instances, wants, runs, canonical = state.instances, state.wants, state.job_runs, state.canonical

    # Canonical pointers: exactly the instances with superseded_seq == 0, one per ref.
    for ref, uuid in canonical.items():
        assert uuid in instances, f"canonical {ref!r} -> unknown {uuid}"
        assert instances[uuid].ref == ref
        assert instances[uuid].superseded_seq == 0
    assert sorted(state.superseded) == sorted(u for u, i in instances.items() if i.superseded_seq)
    assert len(set(state.superseded)) == len(state.superseded)
    # In the order they stopped being canonical: retention by that order drops a prefix (state/fold/instances.py).
    stopped = [instances[uuid].superseded_seq for uuid in state.superseded]
    assert stopped == sorted(stopped), "superseded instances out of the order they were superseded in"

    upstream_building = InstanceState.UPSTREAM_BUILDING
    for uuid, inst in instances.items():
        assert inst.uuid == uuid
        assert uuid == instance_uuid(inst.created_seq, inst.ref), "UUID not derived from the log position"
        assert inst.created_seq <= inst.updated_seq <= state.head_seq
        is_canonical = canonical.get(inst.ref) == uuid
        assert is_canonical == (inst.superseded_seq == 0), f"{inst} canonical={is_canonical}"
        if inst.superseded_seq:
            assert inst.created_seq < inst.superseded_seq <= state.head_seq
        if inst.state in (InstanceState.BUILDING, upstream_building):
            assert is_canonical, f"{inst.state.name} instance is not canonical: {inst}"
        if inst.state == InstanceState.TAINTED:
            assert not is_canonical, f"canonical instance is tainted: {inst}"
        if inst.state == InstanceState.CANCELED:
            assert not is_canonical, f"canonical instance is canceled: {inst}"
            assert runs[inst.attempts[-1]].state == JobRunState.CANCELED, f"canceled, but not its run: {inst}"
        if inst.state == upstream_building:
            assert inst.waiting_on, f"UpstreamBuilding without upstreams: {inst}"
            assert inst.ref not in inst.waiting_on
            for ref in inst.waiting_on:
                assert uuid in state.waiters.get(ref, {}), f"{uuid} waits on {ref!r} but is not indexed"
                assert not is_live(state, ref), f"{uuid} waits on {ref!r}, which is Live"
        else:
            assert inst.waiting_on is None, f"{inst.state.name} instance keeps waiting_on: {inst}"
        previous = instances.get(inst.previous_uuid) if inst.previous_uuid else None
        if previous is not None:
            assert previous.ref == inst.ref
            assert previous.superseded_seq == inst.created_seq
        if inst.built_by is not None:
            builder = runs[inst.built_by]
            assert builder.state == JobRunState.SUCCEEDED and uuid in builder.instance_uuids
        if inst.state == InstanceState.BUILDING:
            attempts = [run.job_run_id for run in attempts_for(state, uuid)]
            active = [run_id for run_id in attempts if runs[run_id].state in ACTIVE_RUN_STATES]
            assert attempts and active == [attempts[-1]], f"Building {uuid} has active runs {active}"

    # A canonical instance that failed in the latest event left nothing waiting for its ref.
    for ref, uuid in canonical.items():
        inst = instances[uuid]
        if inst.updated_seq == state.head_seq and inst.state in (InstanceState.FAILED, InstanceState.UPSTREAM_FAILED):
            assert not state.waiting_for(ref), f"{ref!r} failed but {state.waiting_for(ref)} still wait for it"

    # Waiter index: exactly the UpstreamBuilding instances, under each ref they wait on.
    for ref, waiters in state.waiters.items():
        assert waiters, f"empty waiter set left for {ref!r}"
        for uuid in waiters:
            assert instances[uuid].state == upstream_building and ref in (instances[uuid].waiting_on or ())

    # Per-state counters equal a recount.
    recounts = (
        (state.instance_counts, _recount((i.state for i in instances.values()), InstanceState)),
        (state.want_counts, _recount((w.state for w in wants.values()), WantState)),
        (state.run_counts, _recount((r.state for r in runs.values()), JobRunState)),
    )
    for kept, recount in recounts:
        assert kept == recount, f"per-state counts {kept} != recount {recount}"

    # Job runs: active ones build canonical Building instances; indexes are inverses.
    by_instance: dict[str, tuple[str, ...]] = {}
    for run in sorted(runs.values(), key=lambda r: r.created_seq):
        assert run.created_seq <= run.updated_seq <= state.head_seq
        if run.state in ACTIVE_RUN_STATES:
            for uuid in run.instance_uuids:
                inst = instances[uuid]
                assert inst.state == InstanceState.BUILDING and not inst.superseded_seq, f"{run} -> {inst}"
        if run.state == JobRunState.QUEUED:
            assert run.last_heartbeat_ms == 0
        if run.state == JobRunState.DEP_MISS:
            assert run.missing_refs
        assert (run.error_class is not None) == (run.state == JobRunState.FAILED)
        for uuid in run.instance_uuids:
            by_instance[uuid] = (*by_instance.get(uuid, ()), run.job_run_id)
    consumers: dict[str, Counter[str]] = {}
    for uuid, inst in instances.items():
        for input_uuid in inst.inputs:
            consumers.setdefault(input_uuid, Counter())[uuid] += 1
    by_age = sorted(runs.values(), key=lambda r: r.created_seq)
    active_runs = [r.job_run_id for r in by_age if r.state in ACTIVE_RUN_STATES]
    assert list(state.active_run_ids) == active_runs
    for uuid, inst in instances.items():
        assert inst.attempts == by_instance.get(uuid, ()), f"attempts of {uuid}"
        assert inst.consumers is None or inst.consumers, "empty consumer list kept"
        assert Counter(inst.consumers or ()) == consumers.get(uuid, Counter()), f"consumers of {uuid}"

    # Wants.
    wants_by_ref: dict[str, list[str]] = {}
    active_by_ref: dict[str, set[str]] = {}
    heap_entries = set(state.expiry)
    for want in sorted(wants.values(), key=lambda w: w.created_seq):
        for ref in want.refs:
            wants_by_ref.setdefault(ref, []).append(want.want_id)
        assert want.created_seq <= want.updated_seq <= state.head_seq
        is_active = want.tally is not None
        assert is_active == (want.state not in TERMINAL_WANT_STATES), f"{want}"
        expires_at = want.expires_at_ms
        if is_active:
            assert want.tally is not None  # for the type checker
            recount = [0] * len(InstanceState)
            for ref in want.refs:
                recount[instances[canonical[ref]].state] += 1
            assert want.tally == recount, f"{want.want_id}: tally {want.tally} != recount {recount}"
            assert want.state == derive_want_state(recount, len(want.refs))
            for ref in want.refs:
                active_by_ref.setdefault(ref, set()).add(want.want_id)
            if expires_at is not None:
                assert expires_at > state.clock_ms, f"{want.want_id} should have expired at {expires_at}"
                assert (expires_at, want.created_seq, want.want_id) in heap_entries
        if want.state == WantState.EXPIRED:
            assert expires_at is not None and expires_at <= state.clock_ms
        if want.state == WantState.SUCCESSFUL:
            assert len(want.satisfied_by) == len(want.refs)
            for ref, uuid in zip(want.refs, want.satisfied_by, strict=True):
                if uuid in instances:
                    assert instances[uuid].ref == ref and instances[uuid].created_seq <= want.updated_seq
        else:
            assert want.satisfied_by == ()
        assert (want.cancel_reason is not None) == (want.state == WantState.CANCELED)
        if want.parent_want_id is None:
            assert want.root_want_id == want.want_id
        else:
            parent = wants[want.parent_want_id]
            assert want.root_want_id == parent.root_want_id
            assert want.want_id in (parent.children or [])
            assert parent.created_seq < want.created_seq
        children = want.children or []
        assert [wants[c].parent_want_id for c in children] == [want.want_id] * len(children)
        assert len(set(children)) == len(children)
        if want.state == WantState.CANCELED:  # canceling a want cancels its active derivative wants
            for child in children:
                if wants[child].created_seq < want.updated_seq:
                    assert wants[child].tally is None, f"{child} outlived its canceled parent {want.want_id}"
    assert {ref: list(ids) for ref, ids in state.wants_by_ref.items()} == wants_by_ref
    assert {ref: set(ids) for ref, ids in state.active_wants_by_ref.items()} == active_by_ref
    assert all(state.active_wants_by_ref.values())
    wanted = [0] * len(InstanceState)  # what an active want needs, by state (state/queries/wanted.py)
    for ref in state.active_wants_by_ref:
        wanted[instances[canonical[ref]].state] += 1
    assert state.wanted_instance_counts == wanted, "wanted_instance_counts does not follow the active refs"
    heap = state.expiry
    assert all(heap[(i - 1) // 2] <= heap[i] for i in range(1, len(heap))), "expiry heap is not a heap"


def _recount(states: Any, enum: type[IntEnum]) -> list[int]:
    counts = [0] * len(enum)
    for value in states:
        counts[value] += 1
    return counts
