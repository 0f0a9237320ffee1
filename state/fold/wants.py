"""Wants: WantCreate, WantCancel, and TTL expiry on the log's clock."""

from __future__ import annotations

import heapq
from sys import intern
from typing import TYPE_CHECKING

from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.fold.transitions import TALLY_SIZE, derive_want_state, end_want, new_canonical
from partbuild.state.fold.validation import describe_source, id_problem, ref_rejection, short
from partbuild.state.model import RETRYABLE_BY_NEW_WANT, Instance, Want, WantState

if TYPE_CHECKING:
    from partbuild.state.build_state import BuildState

# (message, interned refs, their canonical instances or None, parent want, source label)
WantCreatePlan = tuple[pb.WantCreate, tuple[str, ...], tuple[Instance | None, ...], Want | None, str]
# The wants to cancel, each with its cancel reason, in the order they are canceled.
WantCancelPlan = list[tuple[Want, str]]

_CANCELED = WantState.CANCELED
_EXPIRED = WantState.EXPIRED
_SUCCESSFUL = WantState.SUCCESSFUL


# ----------------------------------------------------------------- WantCreate


def check_want_create(state: BuildState, seq: int, msg: pb.WantCreate, event: pb.Event) -> str | WantCreatePlan:
    """Validate a WantCreate; resolve its parent and the current instance of each ref."""
    # Interned: a ref string is then held once however many events, wants and runs name it.
    refs = tuple(map(intern, msg.partition_refs))
    problem = _want_create_problem(state, msg, refs)
    if problem:
        return problem
    parent = state.wants[msg.parent_want_id] if msg.parent_want_id else None
    currents = tuple(map(state.canonical_instance, refs))
    source = intern(describe_source(event)) if event.HasField("source") else ""
    return msg, refs, currents, parent, source


def _want_create_problem(state: BuildState, msg: pb.WantCreate, refs: tuple[str, ...]) -> str | None:
    """Why a WantCreate is not a valid next step, or None."""
    want_id = msg.want_id
    problem = id_problem("want_id", want_id)
    if problem:
        return problem
    if want_id in state.wants:
        return f"want {short(want_id)} already exists"
    if not refs:
        return "want lists no partition refs"
    for ref in refs:
        problem = ref_rejection(ref)
        if problem:
            return problem
    if len(refs) > 1 and len(set(refs)) != len(refs):
        return "want lists a partition ref more than once"
    if msg.ttl_seconds < 0 or msg.sla_seconds < 0 or msg.data_timestamp_ms < 0:
        return "data_timestamp_ms, ttl_seconds and sla_seconds must not be negative"
    if msg.parent_want_id:
        parent = state.wants.get(msg.parent_want_id)
        if parent is None:
            return f"parent want {short(msg.parent_want_id)} does not exist"
        if msg.root_want_id and msg.root_want_id != parent.root_want_id:
            return f"root_want_id {short(msg.root_want_id)} is not the parent's root {short(parent.root_want_id)}"
    elif msg.root_want_id and msg.root_want_id != want_id:
        return "root_want_id is set but parent_want_id is not"
    return None


def apply_want_create(state: BuildState, seq: int, plan: WantCreatePlan, event: pb.Event) -> None:
    """Record the want, give each ref a canonical instance to join, and derive the want's state."""
    msg, refs, currents, parent, source = plan
    want_id = msg.want_id
    created_ms = event.timestamp_ms
    want = Want(
        want_id,
        refs,
        seq,
        created_ms,
        msg.data_timestamp_ms or created_ms,
        msg.ttl_seconds,
        msg.sla_seconds,
        intern(msg.comment),
        source,
        parent.want_id if parent is not None else None,
        parent.root_want_id if parent is not None else want_id,
    )
    state.wants[want_id] = want
    tally = [0] * TALLY_SIZE
    wants_by_ref = state.wants_by_ref
    for ref, current in zip(refs, currents, strict=True):
        tally[_instance_for_new_want(state, seq, ref, current).state] += 1
        listed = wants_by_ref.get(ref)
        if listed is None:
            wants_by_ref[ref] = [want_id]
        else:
            listed.append(want_id)
    if parent is not None:
        if parent.children is None:
            parent.children = [want_id]
        else:
            parent.children.append(want_id)
    _start_want(state, seq, want, tally)


def _instance_for_new_want(state: BuildState, seq: int, ref: str, current: Instance | None) -> Instance:
    """The canonical instance a new want joins; a fresh one if there is none or it failed."""
    if current is None:
        return new_canonical(state, seq, ref, None)
    if current.state in RETRYABLE_BY_NEW_WANT:
        # Asking again after a failure is asking for a new attempt.
        return new_canonical(state, seq, ref, current)
    return current


def _start_want(state: BuildState, seq: int, want: Want, tally: list[int]) -> None:
    """Set a new want's state from its tally: fulfilled at once, or active (indexed, maybe expiring)."""
    new = derive_want_state(tally, len(want.refs))
    want.state = new
    state.want_counts[new] += 1
    if new == _SUCCESSFUL:
        # Everything already Live: fulfilled on arrival. (Failed states cannot occur
        # here because failed canonical instances were replaced by fresh ones.)
        canonical = state.canonical
        want.satisfied_by = tuple(canonical[ref] for ref in want.refs)
        return
    want.tally = tally
    active = state._active_wants_by_ref
    want_id = want.want_id
    for ref in want.refs:
        waiting = active.get(ref)
        if waiting is None:
            active[ref] = {want_id: None}
        else:
            waiting[want_id] = None
    expires_at = want.expires_at_ms
    if expires_at is not None:
        heapq.heappush(state._expiry, (expires_at, seq, want_id))


# ----------------------------------------------------------------- WantCancel


def check_want_cancel(state: BuildState, seq: int, msg: pb.WantCancel, event: pb.Event) -> str | WantCancelPlan:
    """Validate a WantCancel; list the want and its active derivative wants, each with its reason."""
    want = state.wants.get(msg.want_id)
    if want is None:
        return f"want {short(msg.want_id)} does not exist"
    if want.tally is None:
        return f"want {short(msg.want_id)} is already {want.state.name.lower()}"
    # Derivative wants exist only to serve their parent: cancel the active ones with it.
    # Same walk (and order) as the cancellation itself; `planned` stands in for "already canceled".
    plan: WantCancelPlan = []
    planned: set[str] = set()
    stack = [(want, msg.reason or "canceled")]
    while stack:
        current, reason = stack.pop()
        if current.tally is None or current.want_id in planned:
            continue
        planned.add(current.want_id)
        plan.append((current, reason))
        for child_id in current.children or ():
            stack.append((state.wants[child_id], f"parent want {current.want_id} canceled"))
    return plan


def apply_want_cancel(state: BuildState, seq: int, plan: WantCancelPlan, event: pb.Event) -> None:
    """Cancel the planned wants."""
    for want, reason in plan:
        want.cancel_reason = reason
        end_want(state, want, _CANCELED, seq)


# ----------------------------------------------------------------- TTL expiry


def expire_due(state: BuildState, seq: int) -> None:
    """Expire active wants whose TTL (from data_timestamp) has passed on the log's clock.

    Runs after an applied event moved the clock (BuildState.apply), as part of that event.
    """
    heap = state._expiry
    now = state.clock_ms
    while heap and heap[0][0] <= now:
        _, _, want_id = heapq.heappop(heap)
        want = state.wants[want_id]
        if want.tally is not None:
            end_want(state, want, _EXPIRED, seq)
