"""Wants: WantCreate, WantCancel, and TTL expiry on the log's clock."""

from __future__ import annotations

import heapq
from sys import intern
from typing import TYPE_CHECKING

from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.fold.group import fenced_member_problem
from partbuild.state.fold.records import RETRYABLE_BY_NEW_WANT, Instance, Want, WantState
from partbuild.state.fold.transitions import TALLY_SIZE, derive_want_state, end_want, new_canonical
from partbuild.state.fold.validation import describe_source, id_problem, short
from partbuild.state.rules.refs import ref_problem

if TYPE_CHECKING:
    from partbuild.state.fold.build_state import BuildState

# (the new want's record, the current canonical instance of each of its refs or None, its parent)
WantCreatePlan = tuple[Want, list[Instance | None], Want | None]
# The wants to cancel, each with its cancel reason, in the order they are canceled.
WantCancelPlan = list[tuple[Want, str]]

_CANCELED = WantState.CANCELED
_EXPIRED = WantState.EXPIRED
_SUCCESSFUL = WantState.SUCCESSFUL


# ----------------------------------------------------------------- WantCreate


def check_want_create(state: BuildState, seq: int, msg: pb.WantCreate, event: pb.Event) -> str | WantCreatePlan:
    """Validate a WantCreate; resolve its parent and the current instance of each ref; build its record."""
    # Interned: a ref string is then held once however many events, wants and runs name it.
    refs = tuple(map(intern, msg.partition_refs))
    problem = _want_create_problem(state, msg, refs)
    if problem:
        return problem
    if msg.HasField("fence"):  # a group member's derivative want: it may name any bucket, but it must be a member
        problem = fenced_member_problem(state, msg.fence, event)
        if problem:
            return problem
    want_id = msg.want_id
    parent = state.wants[msg.parent_want_id] if msg.parent_want_id else None
    canonical, instances = state.canonical, state.instances
    currents = []  # a loop, not a generator: most wants name one ref, and this is the replay hot path
    for ref in refs:
        uuid = canonical.get(ref)
        currents.append(None if uuid is None else instances[uuid])
    created_ms = event.timestamp_ms
    # The new record (not in the state until the apply phase inserts it).
    want = Want(
        want_id,
        refs,
        seq,
        created_ms,
        msg.data_timestamp_ms or created_ms,
        msg.ttl_seconds,
        msg.sla_seconds,
        intern(msg.comment),
        intern(describe_source(event)) if event.HasField("source") else "",
        parent.want_id if parent is not None else None,
        parent.root_want_id if parent is not None else want_id,
    )
    return want, currents, parent


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
        problem = ref_problem(ref)
        if problem:
            return f"{problem}: {short(ref)}"
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
    """Record the want, give each ref a canonical instance to join, and derive the want's state.

    One function rather than several: most wants name one ref, so calls are a good part of the cost.
    """
    want, currents, parent = plan
    want_id, refs = want.want_id, want.refs
    state.wants[want_id] = want
    if state.touched is not None:
        state.touched.wants.add(want_id)
    tally = [0] * TALLY_SIZE
    wants_by_ref = state.wants_by_ref
    for ref, current in zip(refs, currents, strict=False):  # same length by construction
        if current is None:
            current = new_canonical(state, seq, ref, None)
        elif current.state in RETRYABLE_BY_NEW_WANT:  # asking again after a failure: a new attempt
            current = new_canonical(state, seq, ref, current)
        tally[current.state] += 1
        listed = wants_by_ref.get(ref)
        if listed is None:
            wants_by_ref[ref] = (want_id,)  # most refs are wanted once: a tuple is 16 bytes less than a list
        elif type(listed) is list:
            listed.append(want_id)
        else:
            wants_by_ref[ref] = [*listed, want_id]
    if parent is not None:
        if state.touched is not None:
            state.touched.wants.add(parent.want_id)
        if parent.children is None:
            parent.children = [want_id]
        else:
            parent.children.append(want_id)
    new = want.state = derive_want_state(tally, len(refs))
    state.want_counts[new] += 1
    if new == _SUCCESSFUL:
        # Everything already Live: fulfilled on arrival. (Failed states cannot occur
        # here because failed canonical instances were replaced by fresh ones above.)
        canonical = state.canonical
        want.satisfied_by = tuple(canonical[ref] for ref in refs)
        return
    want.tally = tally
    active = state.active_wants_by_ref
    wanted, canonical, instances = state.wanted_instance_counts, state.canonical, state.instances
    for ref in refs:
        waiting = active.get(ref)
        if waiting is None:
            active[ref] = {want_id: None}
            wanted[instances[canonical[ref]].state] += 1  # a ref no active want named: now one does
        else:
            waiting[want_id] = None
    expires_at = want.expires_at_ms
    if expires_at is not None:
        heapq.heappush(state.expiry, (expires_at, seq, want_id))


# ----------------------------------------------------------------- WantCancel


def check_want_cancel(state: BuildState, seq: int, msg: pb.WantCancel, event: pb.Event) -> str | WantCancelPlan:
    """Validate a WantCancel; list the want and its active derivative wants, each with its reason."""
    want = state.wants.get(msg.want_id)
    if want is None:
        return f"want {short(msg.want_id)} does not exist"
    if want.tally is None:
        return f"want {short(msg.want_id)} is already {want.state.name.lower()}"
    return _cancellation(state, want, msg.reason or "canceled")


def _cancellation(state: BuildState, want: Want, reason: str) -> WantCancelPlan:
    """`want` and its active derivative wants (they exist only to serve it), each with its cancel reason.

    In the order the cancellation visits them; `planned` stands in for "already canceled".
    """
    plan: WantCancelPlan = []
    planned: set[str] = set()
    stack = [(want, reason)]
    while stack:
        current, why = stack.pop()
        if current.tally is None or current.want_id in planned:
            continue
        planned.add(current.want_id)
        plan.append((current, why))
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
    heap = state.expiry
    now = state.clock_ms
    while heap and heap[0][0] <= now:
        _, _, want_id = heapq.heappop(heap)
        want = state.wants[want_id]
        if want.tally is not None:
            end_want(state, want, _EXPIRED, seq)
