"""The state-machine primitives every handler's apply phase is built from.

Instances: a new canonical instance, a state change (with want tallies kept
current), a state change that also wakes or fails what waits for the ref, and
the waiting itself. Wants: tallies, refresh, the end of a want. These run only
in apply phases, on objects a check phase resolved; the lookups they make
follow the state's own indexes (canonical pointers, waiters, active wants),
whose targets exist by the fold's invariants, never identifiers from an event.

Want states are kept current incrementally: each active want holds a tally of
its refs' canonical instance states, adjusted whenever a canonical instance
changes state or the canonical pointer moves, so no transition ever scans all
of a want's refs or all wants.

Replay calls these a few times per event: module-level aliases and plain
functions keep attribute lookups off the hot path.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from partbuild.state.fold.history import ENTRY_BITS, STATE_BITS, keep_field
from partbuild.state.fold.records import Instance, InstanceState, Want, WantState
from partbuild.state.rules.ids import instance_uuid

if TYPE_CHECKING:
    from partbuild.state.fold.build_state import BuildState

# Module-level aliases: the replay hot path avoids enum attribute lookups.
MISSING = InstanceState.MISSING
BUILDING = InstanceState.BUILDING
UPSTREAM_BUILDING = InstanceState.UPSTREAM_BUILDING
UP_FOR_RETRY = InstanceState.UP_FOR_RETRY
LIVE = InstanceState.LIVE
FAILED = InstanceState.FAILED
UPSTREAM_FAILED = InstanceState.UPSTREAM_FAILED
TAINTED = InstanceState.TAINTED
GONE = InstanceState.GONE
CANCELED = InstanceState.CANCELED
TALLY_SIZE = len(InstanceState)
_SUCCESSFUL = WantState.SUCCESSFUL
_WANT_FAILED = WantState.FAILED
_WANT_UPSTREAM_FAILED = WantState.UPSTREAM_FAILED
_WANT_BUILDING = WantState.BUILDING
_WANT_UPSTREAM_BUILDING = WantState.UPSTREAM_BUILDING
_WANT_IDLE = WantState.IDLE
_WANT_FAILURES = (_WANT_FAILED, _WANT_UPSTREAM_FAILED)


def derive_want_state(tally: list[int], ref_count: int) -> WantState:
    """A want's state from how many of its refs' canonical instances are in each state.

    Priority: any Failed, any UpstreamFailed, all Live, any Building, any
    UpstreamBuilding, else Idle (Missing and UpForRetry wait to be scheduled).
    """
    if tally[FAILED]:
        return WantState.FAILED
    if tally[UPSTREAM_FAILED]:
        return WantState.UPSTREAM_FAILED
    if tally[LIVE] == ref_count:
        return WantState.SUCCESSFUL
    if tally[BUILDING]:
        return WantState.BUILDING
    if tally[UPSTREAM_BUILDING]:
        return WantState.UPSTREAM_BUILDING
    return WantState.IDLE


def is_live(state: BuildState, ref: str) -> bool:
    """Whether the canonical instance of `ref` is Live (a read; check phases use it too)."""
    uuid = state.canonical.get(ref)
    return uuid is not None and state.instances[uuid].state == LIVE


# ----------------------------------------------------------------- instances


def new_canonical(state: BuildState, seq: int, ref: str, previous: Instance | None) -> Instance:
    """Create a Missing instance of `ref` and point the canonical pointer at it.

    `previous` is the ref's current canonical instance (None for a new ref); it
    becomes superseded, a retention candidate.
    """
    uuid = instance_uuid(seq, ref)
    instance = Instance(uuid, ref, MISSING, seq, previous.uuid if previous else None)
    if state.instances.setdefault(uuid, instance) is not instance:  # one lookup that also inserts
        # Unreachable: one event creates at most one instance per ref, and UUIDs derive from (seq, ref).
        raise RuntimeError(f"instance UUID collision for {ref!r} at seq {seq}")
    state.instance_counts[MISSING] += 1
    state.canonical[ref] = uuid
    touched = state.touched
    if touched is not None:
        touched.instances.add(uuid)
        touched.refs.add(ref)
        if previous is not None:  # its `superseded_seq`
            touched.instances.add(previous.uuid)
    if previous is not None:
        if state.owed_retries:  # replaced: a retry of it is owed no more
            state.owed_retries.pop(previous.uuid, None)
        previous.superseded_seq = seq
        state.superseded.append(previous.uuid)
        canonical_changed(state, ref, previous.state, MISSING, seq)
    return instance


def move_instance(state: BuildState, instance: Instance, new: InstanceState, seq: int) -> None:
    """Move an instance to `new`, keeping counts and want tallies; what waits for its ref is not told
    (`move_instance_and_waiters` tells it)."""
    old = instance.state
    # The change this one follows goes to the history, but for its creation (Missing at created_seq) and
    # Building (always at the created_seq of its newest attempt): reads of the past know those.
    if old != BUILDING:
        updated = instance.updated_seq
        if old or updated != instance.created_seq:
            histories = state.instance_histories
            uuid = instance.uuid
            histories[uuid] = histories.get(uuid, 0) << ENTRY_BITS | updated << STATE_BITS | old
    instance.state = new
    instance.updated_seq = seq
    if state.touched is not None:
        state.touched.instances.add(instance.uuid)
    counts = state.instance_counts
    counts[old] -= 1
    counts[new] += 1
    # Checked inline: most transitions concern refs no active want is waiting for.
    if not instance.superseded_seq and instance.ref in state.active_wants_by_ref:
        canonical_changed(state, instance.ref, old, new, seq)


def move_instance_and_waiters(state: BuildState, instance: Instance, new: InstanceState, seq: int) -> None:
    """`move_instance`, then wake (Live) or fail (Failed, UpstreamFailed) the instances waiting for its ref."""
    move_instance(state, instance, new, seq)
    if instance.superseded_seq:
        return
    if new == LIVE and state.serving and state.serving.pop(instance.ref, None) is not None:
        keep_field(state, instance.ref, seq, "serving", None)  # a successor passed: readers move to it now
    if instance.ref not in state.waiters:
        return
    if new == LIVE:
        upstream_live(state, instance.ref, seq)
    elif new in (FAILED, UPSTREAM_FAILED):
        upstream_failed(state, instance.ref, seq)


def serves_stale(state: BuildState, instance: Instance) -> bool:
    """Whether `instance` is a stale Live one still serving readers while its successor is canonical."""
    return bool(instance.superseded_seq) and state.serving.get(instance.ref) == instance.uuid


def make_stale(state: BuildState, instance: Instance, seq: int, why: str) -> None:
    """A Live canonical instance is out of date: a Missing successor becomes canonical, and it stays Live and
    keeps serving readers (stale) until that successor goes Live (`move_instance_and_waiters`)."""
    new_canonical(state, seq, instance.ref, instance)
    state.serving[instance.ref] = instance.uuid
    keep_field(state, instance.ref, seq, "serving", instance.uuid)  # by ref: reads of the past find it
    set_note(state, instance, f"stale: {why}", seq)


def withdraw(state: BuildState, instance: Instance, seq: int, note: str) -> None:
    """The data of a Live instance is wrong: it is Tainted; a fresh Missing instance becomes canonical
    (unless a successor already is: a stale instance that was still serving stops)."""
    if instance.superseded_seq:
        del state.serving[instance.ref]
        keep_field(state, instance.ref, seq, "serving", None)
    else:
        new_canonical(state, seq, instance.ref, instance)
    move_instance(state, instance, TAINTED, seq)
    set_note(state, instance, note, seq)


def wait_for_upstream(
    state: BuildState, instance: Instance, still_missing: Sequence[str], seq: int, *, keep: bool = True
) -> None:
    """Make `instance` wait (UpstreamBuilding) for `still_missing` (refs not Live); Missing if none.

    What it waits for as of any later seq follows from the refs it began with and when each became
    Live: `keep` them, unless a read of the past finds them elsewhere (a run's missing refs).
    """
    if not still_missing:
        move_instance(state, instance, MISSING, seq)
        return
    if keep:
        keep_field(state, instance.uuid, seq, "waits", tuple(still_missing))
    instance.waiting_on = dict.fromkeys(still_missing)
    all_waiters = state.waiters
    for ref in still_missing:
        waiters = all_waiters.get(ref)
        if waiters is None:
            all_waiters[ref] = {instance.uuid: None}
        else:
            waiters[instance.uuid] = None
    move_instance(state, instance, UPSTREAM_BUILDING, seq)


def upstream_live(state: BuildState, ref: str, seq: int) -> None:
    """`ref` became Live: instances that waited only for it can be scheduled again."""
    waiters = state.waiters.pop(ref, None)
    if not waiters:
        return
    instances = state.instances
    for uuid in waiters:
        instance = instances[uuid]
        waiting = instance.waiting_on
        assert waiting is not None
        del waiting[ref]
        if state.touched is not None:
            state.touched.instances.add(uuid)
        if not waiting:
            instance.waiting_on = None
            move_instance(state, instance, MISSING, seq)


def upstream_failed(state: BuildState, ref: str, seq: int) -> None:
    """`ref` failed: its waiters fail as UpstreamFailed, and so on downstream."""
    pending = [ref]
    while pending:
        failed_ref = pending.pop()
        waiters = state.waiters.pop(failed_ref, None)
        if not waiters:
            continue
        # Who failed because of whom: a reaction wants them again once it is Live (orchestrator/reactions.py).
        state.upstream_failures.setdefault(failed_ref, {}).update(waiters)
        for uuid in waiters:
            instance = state.instances[uuid]
            _stop_waiting(state, instance, except_ref=failed_ref)
            set_note(state, instance, f"upstream {failed_ref} failed", seq)
            move_instance(state, instance, UPSTREAM_FAILED, seq)
            pending.append(instance.ref)


def _stop_waiting(state: BuildState, instance: Instance, except_ref: str) -> None:
    """Take `instance` out of the waiter index of every ref it waits for but `except_ref`."""
    all_waiters = state.waiters
    for other in instance.waiting_on or ():
        if other == except_ref:
            continue
        waiters = all_waiters[other]
        del waiters[instance.uuid]
        if not waiters:
            del all_waiters[other]
    instance.waiting_on = None


def set_note(state: BuildState, instance: Instance, note: str | None, seq: int) -> None:
    """Say why `instance` failed or was tainted; kept with its seq for reads of the past."""
    keep_field(state, instance.uuid, seq, "note", note)
    instance.note = note


# ----------------------------------------------------------------- wants


def canonical_changed(state: BuildState, ref: str, old: InstanceState, new: InstanceState, seq: int) -> None:
    """The canonical state of `ref` went from `old` to `new`: adjust its active wants (and, the ref being
    actively wanted, `wanted_instance_counts`).

    Each want's tally moves, its state is derived again, and a want that became
    Successful, Failed or UpstreamFailed is retired. One function, no helper per
    want: it runs for nearly every instance transition of the replay.
    """
    if old == new:
        return
    active = state.active_wants_by_ref.get(ref)
    if not active:
        return
    wanted = state.wanted_instance_counts
    wanted[old] -= 1
    wanted[new] += 1
    wants = state.wants
    counts = state.want_counts
    # Copy: a want that becomes terminal leaves this index while we iterate.
    for want_id in [*active]:
        want = wants[want_id]
        tally = want.tally
        assert tally is not None
        tally[old] -= 1
        tally[new] += 1
        # derive_want_state, inline: it runs for nearly every instance transition of the replay.
        if tally[FAILED]:
            derived = _WANT_FAILED
        elif tally[UPSTREAM_FAILED]:
            derived = _WANT_UPSTREAM_FAILED
        elif tally[LIVE] == len(want.refs):
            derived = _SUCCESSFUL
        elif tally[BUILDING]:
            derived = _WANT_BUILDING
        elif tally[UPSTREAM_BUILDING]:
            derived = _WANT_UPSTREAM_BUILDING
        else:
            derived = _WANT_IDLE
        if derived == want.state:
            continue
        counts[want.state] -= 1
        counts[derived] += 1
        if want.state or want.updated_seq != want.created_seq:  # its creation (Idle) is known: not kept
            want.history = want.history << ENTRY_BITS | want.updated_seq << STATE_BITS | want.state
        want.state = derived
        want.updated_seq = seq
        if state.touched is not None:
            state.touched.wants.add(want.want_id)
        if derived == _SUCCESSFUL:
            want.satisfied_by = tuple(map(state.canonical.__getitem__, want.refs))
            retire_want(state, want)
        elif derived in _WANT_FAILURES:
            retire_want(state, want)


def end_want(state: BuildState, want: Want, new: WantState, seq: int) -> None:
    """Move an active want to a terminal state set by an event (canceled, expired)."""
    state.want_counts[want.state] -= 1
    state.want_counts[new] += 1
    if want.state or want.updated_seq != want.created_seq:  # its creation (Idle) is known: not kept
        want.history = want.history << ENTRY_BITS | want.updated_seq << STATE_BITS | want.state
    want.state = new
    want.updated_seq = seq
    if state.touched is not None:
        state.touched.wants.add(want.want_id)
    retire_want(state, want)


def retire_want(state: BuildState, want: Want) -> None:
    """Drop a want that reached a terminal state from the active index (and a ref it leaves unwanted from
    `wanted_instance_counts`)."""
    want.tally = None
    active = state.active_wants_by_ref
    want_id = want.want_id
    for ref in want.refs:
        waiting = active[ref]
        del waiting[want_id]
        if not waiting:
            del active[ref]
            state.wanted_instance_counts[state.instances[state.canonical[ref]].state] -= 1
