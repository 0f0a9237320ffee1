"""Partition instances: PartitionTaint, PartitionObserved, InstanceRetention, InstancesWaitUpstream."""

from __future__ import annotations

from bisect import bisect_left
from sys import intern
from typing import TYPE_CHECKING

from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.fold.group import fenced_decision_problem
from partbuild.state.fold.history import ENTRY_BITS, entry, keep_dropped
from partbuild.state.fold.records import BUILDABLE_INSTANCE_STATES, Instance
from partbuild.state.fold.transitions import (
    BUILDING,
    GONE,
    LIVE,
    MISSING,
    UP_FOR_RETRY,
    UPSTREAM_BUILDING,
    is_live,
    make_stale,
    move_instance_and_waiters,
    new_canonical,
    serves_stale,
    set_note,
    wait_for_upstream,
    withdraw,
)
from partbuild.state.fold.validation import ref_rejection, short, upstream_refs_problem
from partbuild.state.rules.refs import ref_problem

if TYPE_CHECKING:
    from partbuild.state.fold.build_state import BuildState

# (ref, reason, the Live canonical instances to taint in order, the one the event names)
TaintPlan = tuple[str, str, list[Instance], Instance]
# (ref, message, the current canonical instance or None, the instance that becomes Live if it is reused,
#  the Live instances built from the current one that the new data taints)
ObservedPlan = tuple[str, pb.PartitionObserved, Instance | None, Instance | None, list[Instance]]
# (instances to drop, UUIDs of the superseded instances kept)
RetentionPlan = tuple[list[Instance], list[str]]
# Each waiting instance with the refs it names that are not Live now.
WaitPlan = list[tuple[Instance, list[str]]]


# ----------------------------------------------------------------- PartitionTaint


def check_partition_taint(state: BuildState, seq: int, msg: pb.PartitionTaint, event: pb.Event) -> str | TaintPlan:
    """Validate a PartitionTaint; list every instance it reaches, the cascade included.

    A withdrawal names the Live instance readers get: the canonical one, or a stale one still serving
    while its successor is built. Keeping serving (the data is out of date, not wrong) needs a Live
    canonical instance: a stale one already has its successor.
    """
    ref = intern(msg.partition_ref)
    problem = ref_rejection(ref)
    if problem:
        return problem
    current = state.canonical_instance(ref)
    if current is None:
        return f"partition {short(ref)} has no instance to taint"
    if current.state != LIVE and not msg.keep_serving:
        served = state.serving.get(ref)
        current = state.instances[served] if served is not None else current
    if msg.instance_uuid and msg.instance_uuid != current.uuid:  # a writer that decided on an older state
        return f"instance {short(msg.instance_uuid)} is no longer the canonical instance of {short(ref)}"
    if current.state != LIVE:
        return f"partition {short(ref)} is {current.state.name.lower()}; only a Live instance can be tainted"
    reached = _taint_cascade(state, [current], msg.only_this_ref)
    return ref, msg.reason or "tainted", reached, current


def _taint_cascade(state: BuildState, start: list[Instance], only_this_ref: bool) -> list[Instance]:
    """The Live instances readers get that a taint of `start` reaches, in the order it reaches them.

    Depth-first through consumers: canonical Live instances, and stale ones still serving. Tainting
    one instance changes no other instance's eligibility, so walking first and tainting afterwards
    visits exactly what tainting while walking would.
    """
    instances = state.instances
    order: list[Instance] = []
    taken: set[str] = set()
    pending = start[::-1]  # popped from the end: the first of `start` first
    while pending:
        old = pending.pop()
        # Reached twice through a diamond, not Live, or replaced and no longer read: nothing (more) to taint.
        if old.state != LIVE or old.uuid in taken or (old.superseded_seq and not serves_stale(state, old)):
            continue
        taken.add(old.uuid)
        order.append(old)
        if not only_this_ref:
            for consumer in old.consumers or ():
                pending.append(instances[consumer])
    return order


def apply_partition_taint(state: BuildState, seq: int, plan: TaintPlan, event: pb.Event) -> None:
    """Withdraw the planned instances (each ref gets a fresh Missing instance), or, to keep serving, make
    those whose job serves stale data stale."""
    ref, reason, reached, current = plan
    keep_serving = event.partition_taint.keep_serving
    for old in reached:
        note = reason if old is current else f"upstream {ref} tainted: {reason}"
        if keep_serving:
            _out_of_date(state, old, seq, note)
        else:
            withdraw(state, old, seq, note)


def _out_of_date(state: BuildState, old: Instance, seq: int, why: str) -> None:
    """Its inputs or code changed: stale and still serving if its job says so and it is not stale already,
    else withdrawn, as before stale instances existed."""
    if old.superseded_seq:  # stale already: its successor is canonical
        return
    run = state.job_runs.get(old.built_by) if old.built_by is not None else None
    if run is not None and run.serve_stale:
        make_stale(state, old, seq, why)
    else:
        withdraw(state, old, seq, why)


# ----------------------------------------------------------------- PartitionObserved


def check_partition_observed(
    state: BuildState, seq: int, msg: pb.PartitionObserved, event: pb.Event
) -> str | ObservedPlan:
    """Validate a PartitionObserved; decide whether its current instance becomes Live or a new one.

    With a version, a Live partition observed again is judged by it: the same version is nothing
    new (rejected), another one is new data that taints what was built from the old.
    """
    ref = intern(msg.partition_ref)
    problem = ref_problem(ref)  # inline rather than ref_rejection: source data arrives often
    if problem:
        return f"{problem}: {short(ref)}"
    if not msg.location:
        return "observed partition has no location"
    if msg.row_count < 0 or msg.bytes < 0:
        return "row_count and bytes must not be negative"
    if msg.version_strong and not msg.version:
        return "a strong version needs a version"
    uuid = state.canonical.get(ref)
    if uuid is None:
        return ref, msg, None, None, []
    current = state.instances[uuid]
    current_state = current.state
    if current_state in (BUILDING, UPSTREAM_BUILDING):
        return f"partition {short(ref)} is being built by a job run; it cannot also be observed"
    if current_state in (MISSING, UP_FOR_RETRY):
        return ref, msg, current, current, []
    if current_state == GONE and msg.judge_gone_by_version and msg.version and current.version is not None:
        return _back_from_gone(ref, msg, current, state)
    if current_state != LIVE:  # failed (or gone, by the older rule): a new instance replaces it, nothing tainted
        return ref, msg, current, None, []
    if not msg.version:  # as before versions: a new location is a new instance, nothing is tainted
        if current.location == msg.location:
            return f"partition {short(ref)} is already Live at {short(msg.location)}"
        return ref, msg, current, None, []
    return _observed_again(ref, msg, current, state)


def _observed_again(ref: str, msg: pb.PartitionObserved, current: Instance, state: BuildState) -> str | ObservedPlan:
    """A Live partition observed with a version: unchanged, learned, moved, or new data."""
    same_place = current.location == msg.location
    if current.version is None:
        if same_place:  # observed before its source reported versions: learn it, change nothing
            return ref, msg, current, current, []
        return ref, msg, current, None, _built_from(state, current)  # moved, unknown content: assume new
    if current.version[0] == msg.version:
        if same_place:
            return f"partition {short(ref)} is already Live at {short(msg.location)} with this version"
        if msg.version_strong and current.version[1]:  # the same bytes moved: nothing built from them changes
            return ref, msg, current, None, []
    return ref, msg, current, None, _built_from(state, current)


def _back_from_gone(ref: str, msg: pb.PartitionObserved, gone: Instance, state: BuildState) -> ObservedPlan:
    """A gone partition found again. The version it had, where it was: the same instance is Live again
    (the directory was listed while it was rewritten, or unlisted for a while), and what it fed still holds.
    The same strong version elsewhere: a new instance of the same bytes, nothing tainted. Another version:
    a new instance, and what the gone one fed is out of date."""
    assert gone.version is not None
    if gone.version[0] == msg.version:
        if gone.location == msg.location:
            return ref, msg, gone, gone, []
        if msg.version_strong and gone.version[1]:
            return ref, msg, gone, None, []
    return ref, msg, gone, None, _built_from(state, gone)


def _built_from(state: BuildState, current: Instance) -> list[Instance]:
    """The Live canonical instances built from `current`'s data, transitively: new data makes them stale.

    Data that moved with its strong version kept (a new instance of the same bytes) fed whatever was
    built from the earlier instances too, so their consumers are included.
    """
    instances = state.instances
    same_bytes = [current]
    while (last := same_bytes[-1]).previous_uuid and last.version and last.version[1]:
        earlier = instances.get(last.previous_uuid)
        if earlier is None or earlier.version != last.version:
            break
        same_bytes.append(earlier)
    consumers = [instances[uuid] for instance in same_bytes for uuid in instance.consumers or ()]
    return _taint_cascade(state, consumers, only_this_ref=False)


def apply_partition_observed(state: BuildState, seq: int, plan: ObservedPlan, event: pb.Event) -> None:
    """The observed data makes the reused or a new canonical instance Live; taints what the old one fed."""
    ref, msg, current, reused, stale = plan
    version = (msg.version, msg.version_strong) if msg.version else None
    if reused is not None and reused.state == LIVE:  # only its version was learned
        reused.version = version
        histories = state.instance_histories  # Live before, and after
        histories[reused.uuid] = histories.get(reused.uuid, 0) << ENTRY_BITS | entry(reused.updated_seq, LIVE)
        reused.updated_seq = seq
        if state.touched is not None:
            state.touched.instances.add(reused.uuid)
        return
    instance = reused if reused is not None else new_canonical(state, seq, ref, current)
    if instance.state == GONE:  # found again as it was (`_back_from_gone`): no longer gone
        set_note(state, instance, f"found again with the version it had (seq {seq})", seq)
    instance.location = msg.location
    instance.row_count = msg.row_count
    instance.byte_count = msg.bytes
    instance.metadata = dict(sorted(msg.metadata.items())) if msg.metadata else None
    instance.version = version
    move_instance_and_waiters(state, instance, LIVE, seq)
    for old in stale:
        _out_of_date(state, old, seq, f"upstream {ref} has new data (observed at seq {seq})")


# ----------------------------------------------------------------- InstanceRetention


def split_superseded(state: BuildState, cutoff_seq: int) -> RetentionPlan:
    """(instances an InstanceRetention(drop_superseded_before_seq=cutoff_seq) drops, in the fold's order;
    UUIDs of the others kept): those that stopped being canonical before `cutoff_seq`.

    Only superseded instances are candidates: canonical ones never are, and so never are the
    instances of an active run or waiting ones (both canonical). `state.superseded` is in the
    order instances were superseded, so the dropped ones are a prefix of it.
    """
    instances = state.instances
    superseded = state.superseded
    end = bisect_left(superseded, cutoff_seq, key=lambda uuid: instances[uuid].superseded_seq)
    if not state.serving:
        return [instances[uuid] for uuid in superseded[:end]], superseded[end:]
    # A stale instance still serving readers is kept; the kept ones stay in superseded order.
    serving = set(state.serving.values())
    still = [uuid for uuid in superseded[:end] if uuid in serving]
    dropped = [instances[uuid] for uuid in superseded[:end] if uuid not in serving]
    return dropped, [*still, *superseded[end:]]


def split_superseded_by_creation(state: BuildState, cutoff_seq: int) -> RetentionPlan:
    """As `split_superseded`, by the rule of logs written before issue 23: superseded instances created
    before `cutoff_seq` (an instance canonical for a year went the moment it was superseded)."""
    instances = state.instances
    dropped: list[Instance] = []
    kept: list[str] = []
    serving = set(state.serving.values())
    for uuid in state.superseded:
        instance = instances[uuid]
        if instance.created_seq < cutoff_seq and uuid not in serving:
            dropped.append(instance)
        else:
            kept.append(uuid)
    return dropped, kept


def check_instance_retention(
    state: BuildState, seq: int, msg: pb.InstanceRetention, event: pb.Event
) -> str | RetentionPlan:
    """Validate an InstanceRetention; list what it drops (by when each stopped being canonical, or, in
    events written before that rule, by when each was created)."""
    cutoff = msg.drop_superseded_before_seq
    if not cutoff:  # as before the new rule, the rejections included
        cutoff = msg.drop_superseded_created_before_seq
        if cutoff <= 0:
            return "drop_superseded_created_before_seq must be positive"
        return split_superseded_by_creation(state, cutoff)
    if cutoff < 0:
        return "drop_superseded_before_seq must be positive"
    if msg.drop_superseded_created_before_seq:
        return "an InstanceRetention sets drop_superseded_before_seq or drop_superseded_created_before_seq, not both"
    return split_superseded(state, cutoff)


def apply_instance_retention(state: BuildState, seq: int, plan: RetentionPlan, event: pb.Event) -> None:
    """Drop the planned instances; the consumer lists of their inputs forget them."""
    dropped, kept = plan
    for instance in dropped:
        _drop(state, instance, seq)
    state.superseded = kept


def _drop(state: BuildState, instance: Instance, seq: int) -> None:
    """Forget one instance; whatever still names it (inputs of others, runs, wants) keeps the UUID only,
    and the counts by state as of earlier seqs what it added to them (`keep_dropped`)."""
    instances = state.instances
    uuid = instance.uuid
    keep_dropped(state, instance, seq)  # before its history goes
    del instances[uuid]
    touched = state.touched
    if touched is not None:  # its rows go
        touched.instances.add(uuid)
        touched.refs.add(instance.ref)
    state.fields.pop(uuid, None)  # retention drops the history of what it drops
    state.instance_histories.pop(uuid, None)
    state.check_results.pop(uuid, None)
    if instance.previous_uuid is None:  # but that its ref had no instance before: reads of the past say so
        state.first_created[instance.ref] = instance.created_seq
    state.instance_counts[instance.state] -= 1
    for input_uuid in instance.inputs:
        upstream = instances.get(input_uuid)  # None: dropped earlier (this event or before)
        if upstream is not None and upstream.consumers and uuid in upstream.consumers:
            if touched is not None:
                touched.instances.add(input_uuid)
            kept = [consumer for consumer in upstream.consumers if consumer != uuid]
            upstream.consumers = kept if len(kept) > 1 else (kept[0],) if kept else None
    state.dropped_instances += 1


# ----------------------------------------------------------------- InstancesWaitUpstream


def check_instances_wait_upstream(
    state: BuildState, seq: int, msg: pb.InstancesWaitUpstream, event: pb.Event
) -> str | WaitPlan:
    """Validate an InstancesWaitUpstream; resolve each instance and which of its refs are not Live."""
    if not msg.waits:
        return "wait event lists no instances"
    plan: WaitPlan = []
    seen: set[str] = set()
    for wait in msg.waits:
        instance = state.instances.get(wait.instance_uuid)
        if instance is None:
            return f"unknown partition instance {short(wait.instance_uuid)}"
        if instance.uuid in seen:
            return f"instance {instance.uuid} is listed more than once"
        seen.add(instance.uuid)
        if instance.superseded_seq:
            return f"instance {instance.uuid} of {short(instance.ref)} is no longer canonical"
        if instance.state not in BUILDABLE_INSTANCE_STATES:
            named = f"instance {instance.uuid} of {short(instance.ref)}"
            return f"{named} is {instance.state.name.lower()}; only a schedulable one can wait"
        refs = tuple(map(intern, wait.upstream_refs))
        problem = upstream_refs_problem(refs, {instance.ref})
        if problem:
            return problem
        # Every waiting instance is schedulable, so not Live, before and after it waits:
        # which refs are Live cannot change while the plan is applied.
        plan.append((instance, [ref for ref in refs if not is_live(state, ref)]))
    if msg.HasField("fence"):  # decided by a worker-group member: only partitions of buckets it owns now
        problem = fenced_decision_problem(state, msg.fence, event, [instance for instance, _ in plan])
        if problem:
            return problem
    return plan


def apply_instances_wait_upstream(state: BuildState, seq: int, plan: WaitPlan, event: pb.Event) -> None:
    """Each instance waits for its refs that are not Live (or stays Missing if all are)."""
    for instance, still_missing in plan:
        wait_for_upstream(state, instance, still_missing, seq)
