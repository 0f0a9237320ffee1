"""Job runs: JobRunBuffer, JobRunHeartbeat, and the outcomes (success, failure, cancel, missing deps)."""

from __future__ import annotations

from collections.abc import Sequence
from operator import attrgetter
from sys import intern
from typing import TYPE_CHECKING

from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.fold import buckets
from partbuild.state.fold.checks import NO_CHECKS, ChecksPlan, checks_problem, gate_problem, record_checks
from partbuild.state.fold.group import fenced_decision_problem, removed_runner_problem
from partbuild.state.fold.history import (
    ENTRY_BITS,
    HEARTBEAT_PAIR,
    MS_MASK,
    RUN_ENTRY_BITS,
    STATE_BITS,
    keep_versions,
)
from partbuild.state.fold.records import ACTIVE_RUN_STATES, BUILDABLE_INSTANCE_STATES, Instance, JobRun, JobRunState
from partbuild.state.fold.transitions import (
    BUILDING,
    CANCELED,
    FAILED,
    LIVE,
    MISSING,
    TAINTED,
    UP_FOR_RETRY,
    is_live,
    move_instance,
    move_instance_and_waiters,
    new_canonical,
    serves_stale,
    set_note,
    wait_for_upstream,
)
from partbuild.state.fold.validation import MAX_ID_LENGTH, id_problem, short, upstream_refs_problem

MAX_NOTE = 4_000  # an output's own failure message: one line of root cause, with room

if TYPE_CHECKING:
    from partbuild.state.fold.build_state import BuildState

# (run id, interned job label, the canonical instances it builds, the bucket it was decided under)
BufferPlan = tuple[str, str, list[Instance], pb.BucketScope | None]
# Input instances: their UUIDs (the held strings) and the instances themselves, in the same order.
Inputs = tuple[tuple[str, ...], Sequence[Instance]]
# An output's message and the inputs it names as its own (none: the run's apply).
OutputPlan = tuple[pb.OutputResult, Inputs]
# Outputs that failed on their own, by instance UUID.
FailedOutputs = dict[str, pb.OutputFailure]
# (run, the instances it built, run-level inputs, outputs described by the event by instance UUID, checks,
#  the outputs that failed on their own)
SuccessPlan = tuple[JobRun, list[Instance], Inputs, dict[str, OutputPlan], ChecksPlan, FailedOutputs]
# (run, the event's message, the run's instances, checks, the outputs that failed on their own)
FailurePlan = tuple[JobRun, pb.JobRunFailure, list[Instance], ChecksPlan, FailedOutputs]
# (run, the reason, the run's instances, whether fresh instances replace them)
CancelPlan = tuple[JobRun, str | None, list[Instance], bool]
# (run, its instances, the missing refs, those of them not Live now)
MissingDepsPlan = tuple[JobRun, list[Instance], tuple[str, ...], list[str]]

_QUEUED = JobRunState.QUEUED
_RUNNING = JobRunState.RUNNING
_PAIR = HEARTBEAT_PAIR  # a heartbeat: (seq, ms), appended to its run's bytes
_PERMANENT = pb.ERROR_CLASS_PERMANENT
_uuid_of = attrgetter("uuid")
_NO_INPUTS: Inputs = ((), ())
_LAYOUTS = ("bucket_layouts",)


def _active_run(state: BuildState, job_run_id: str, own: bool = True) -> JobRun | str:
    """The queued or running job run, or why an event of it is not a valid next step.

    An event of the run's own process (`own`: a heartbeat, an unfenced outcome) is refused once the group member
    that buffered it was removed from its group; the owner's fenced failure and an operator's cancel are not.
    """
    run = state.job_runs.get(job_run_id)
    if run is None:
        return f"job run {short(job_run_id)} does not exist"
    if run.state not in ACTIVE_RUN_STATES:
        return f"job run {short(job_run_id)} is already {run.state.name.lower()}"
    if own and state.run_fences:
        problem = removed_runner_problem(state, job_run_id)
        if problem:
            return problem
    return run


def _instances_of(state: BuildState, run: JobRun) -> list[Instance]:
    """The instances a run builds (an active run's instances are canonical, never dropped)."""
    return list(map(state.instances.__getitem__, run.instance_uuids))


def _move_run(state: BuildState, run: JobRun, new: JobRunState, seq: int, event: pb.Event) -> None:
    """Move a job run to `new`, keeping the per-state counts and the active index."""
    state.run_counts[run.state] -= 1
    state.run_counts[new] += 1
    old = run.state
    if old or run.updated_seq != run.created_seq:  # else the change it replaces is its creation: nothing to keep
        # history.run_entry(run.updated_seq, old, run.updated_ms), inline: the replay's hot path
        entry = (run.updated_ms & MS_MASK) << ENTRY_BITS | run.updated_seq << STATE_BITS | old
        run.history = run.history << RUN_ENTRY_BITS | entry
    run.state = new
    run.updated_seq = seq
    run.updated_ms = event.timestamp_ms
    if state.touched is not None:
        state.touched.runs.add(run.job_run_id)
    if new not in ACTIVE_RUN_STATES:
        del state.active_run_ids[run.job_run_id]
        if state.run_fences:
            state.run_fences.pop(run.job_run_id, None)


# ----------------------------------------------------------------- JobRunBuffer


def check_job_run_buffer(state: BuildState, seq: int, msg: pb.JobRunBuffer, event: pb.Event) -> str | BufferPlan:
    """Validate a JobRunBuffer; resolve the canonical, buildable instances it names."""
    run_id = msg.job_run_id
    problem = id_problem("job_run_id", run_id) or id_problem("job_label", msg.job_label)
    if problem:
        return problem
    if len(msg.code_version) > MAX_ID_LENGTH:  # empty is allowed: unknown
        return f"code_version is longer than {MAX_ID_LENGTH} characters"
    if msg.blocking_checks:
        problem = _check_names_problem(msg.blocking_checks)
        if problem:
            return problem
    if run_id in state.job_runs:
        return f"job run {short(run_id)} already exists"
    uuids = tuple(msg.instance_uuids)
    if not uuids:
        return "job run builds no partition instances"
    if len(uuids) > 1 and len(set(uuids)) != len(uuids):
        return "job run lists a partition instance more than once"
    known = state.instances
    instances = []
    for uuid in uuids:
        instance = known.get(uuid)
        if instance is None:
            return f"unknown partition instance {short(uuid)}"
        if instance.superseded_seq:
            return f"instance {uuid} of {short(instance.ref)} is no longer canonical"
        if instance.state not in BUILDABLE_INSTANCE_STATES:
            return f"instance {uuid} of {short(instance.ref)} is {instance.state.name.lower()}, not buildable"
        instances.append(instance)
    scope = None
    if msg.HasField("bucket"):  # decided by a sharded worker: only its own bucket's partitions
        scope = msg.bucket
        problem = buckets.scoped_problem(state, scope) or buckets.outsider(scope, instances)
        if problem:
            return problem
    if msg.HasField("fence"):  # decided by a worker-group member: only partitions of buckets it owns now
        if scope is not None:
            return "a job run is fenced by a worker group or scoped to a static bucket, not both"
        problem = fenced_decision_problem(state, msg.fence, event, instances)
        if problem:
            return problem
    return run_id, intern(msg.job_label), instances, scope


def apply_job_run_buffer(state: BuildState, seq: int, plan: BufferPlan, event: pb.Event) -> None:
    """Queue the run; its instances become Building."""
    run_id, label, instances, scope = plan
    if scope is not None:
        buckets.fix_layout(state, seq, scope)
        keep_versions(state, seq, _LAYOUTS)
    # The instances' own UUID strings, not the event's copies: one string per UUID in memory.
    run = JobRun(run_id, label, tuple(map(_uuid_of, instances)), seq, event.timestamp_ms)
    msg = event.job_run_buffer
    version = msg.code_version
    if version:  # one string per version in memory, not one per run
        run.code_version = intern(version)
    if msg.serve_stale:
        run.serve_stale = True
    if msg.blocking_checks:
        run.blocking_checks = tuple(map(intern, msg.blocking_checks))
    state.job_runs[run_id] = run
    state.active_run_ids[run_id] = None
    if msg.HasField("fence"):  # a group member's: fenced off if the member is removed while it runs
        state.run_fences[run_id] = (intern(msg.fence.group), intern(msg.fence.task_id))
    if state.touched is not None:
        state.touched.runs.add(run_id)
    state.run_counts[_QUEUED] += 1
    owed = state.owed_retries
    for instance in instances:
        instance.attempts = (*instance.attempts, run_id)
        move_instance(state, instance, BUILDING, seq)  # (touches it)
        if owed:
            owed.pop(instance.uuid, None)  # the retry a split owed it has started


def _check_names_problem(names: Sequence[str]) -> str | None:
    for name in names:
        if not name or len(name) > MAX_ID_LENGTH:
            return f"a blocking check name is empty or longer than {MAX_ID_LENGTH} characters"
    if len(set(names)) != len(names):
        return "a blocking check is named more than once"
    return None


# ----------------------------------------------------------------- JobRunHeartbeat


def check_job_run_heartbeat(state: BuildState, seq: int, msg: pb.JobRunHeartbeat, event: pb.Event) -> str | JobRun:
    """Validate a heartbeat; the plan is the active run itself."""
    return _active_run(state, msg.job_run_id)


def apply_job_run_heartbeat(state: BuildState, seq: int, run: JobRun, event: pb.Event) -> None:
    """The first heartbeat moves a queued run to Running; every one records when it was alive."""
    ms = event.timestamp_ms
    if run.state == _QUEUED:  # the change to Running says when this heartbeat came
        _move_run(state, run, _RUNNING, seq, event)
    else:  # kept apart from the run's history, for reads as of a seq (history.heartbeat_at)
        beats = state.run_heartbeats.get(run.job_run_id)
        if beats is None:
            state.run_heartbeats[run.job_run_id] = bytearray(_PAIR.pack(seq, ms))
        else:
            beats += _PAIR.pack(seq, ms)
        if state.touched is not None:
            state.touched.runs.add(run.job_run_id)
    run.last_heartbeat_ms = ms


# ----------------------------------------------------------------- JobRunSuccess


def _resolve_inputs(state: BuildState, inputs: Sequence[str], built: frozenset[str] | tuple[str, ...]) -> Inputs | str:
    """The held UUID strings and the instances named by `inputs`, or why they cannot be inputs of this run.

    The held strings, not the event's copies: memory holds one string per UUID.
    """
    if not inputs:
        return _NO_INPUTS
    resolved = []
    instances = state.instances
    for uuid in inputs:
        instance = instances.get(uuid)
        if instance is None:
            return f"input instance {short(uuid)} is unknown"
        if uuid in built:
            return f"instance {uuid} is listed as an input of its own build"
        resolved.append(instance)
    held = tuple(map(_uuid_of, resolved))
    if len(held) > 1 and len(set(held)) != len(held):
        return "an input instance is listed more than once"
    return held, resolved


def check_job_run_success(state: BuildState, seq: int, msg: pb.JobRunSuccess, event: pb.Event) -> str | SuccessPlan:
    """Validate a JobRunSuccess; resolve the run, its instances, and every input instance named."""
    run = _active_run(state, msg.job_run_id)
    if isinstance(run, str):
        return run
    built = run.instance_uuids
    built_set = frozenset(built) if len(built) > 8 else built
    run_inputs = _resolve_inputs(state, msg.input_instance_uuids, built_set)
    if isinstance(run_inputs, str):
        return run_inputs
    # uuid -> (output, its own inputs); protobuf fields are read once, here.
    outputs: dict[str, OutputPlan] = {}
    for output in msg.outputs:
        uuid = output.instance_uuid
        if uuid not in built_set:
            return f"output for instance {short(uuid)}, which job run {run.job_run_id} does not build"
        if uuid in outputs:
            return f"output for instance {uuid} is listed more than once"
        if output.row_count < 0 or output.bytes < 0:
            return "row_count and bytes must not be negative"
        own_inputs = _resolve_inputs(state, output.input_instance_uuids, built_set)
        if isinstance(own_inputs, str):
            return own_inputs
        outputs[uuid] = (output, own_inputs)
    failed = _failed_outputs(msg.failed_outputs, built_set, run.job_run_id) if msg.failed_outputs else {}
    if isinstance(failed, str):
        return failed
    if failed and len(failed) == len(built):
        return "a success needs an output that did not fail: record a JobRunFailure"
    if any(uuid in failed for uuid in outputs):
        return "an output is both described as written and listed as failed"
    checks = (
        checks_problem(msg.checks, built_set, run.job_run_id, success=True, failed=failed) if msg.checks else NO_CHECKS
    )
    if isinstance(checks, str):
        return checks
    if run.blocking_checks:  # the gate, as the run's job declared it when the run was buffered
        going_live = [uuid for uuid in built if uuid not in failed]
        problem = gate_problem(run.blocking_checks, checks, going_live)
        if problem:
            return problem
    return run, _instances_of(state, run), run_inputs, outputs, checks, failed


def _failed_outputs(
    failures: Sequence[pb.OutputFailure], built: frozenset[str] | tuple[str, ...], run_id: str
) -> str | FailedOutputs:
    """The outputs an outcome says failed on their own, by UUID, or why that list is invalid."""
    failed: FailedOutputs = {}
    for failure in failures:
        uuid = failure.instance_uuid
        if uuid not in built:
            return f"failure of instance {short(uuid)}, which job run {short(run_id)} does not build"
        if uuid in failed:
            return f"instance {uuid} is listed as failed more than once"
        if len(failure.message) > MAX_NOTE:
            return f"the failure message of instance {uuid} is longer than {MAX_NOTE} characters"
        failed[uuid] = failure
    return failed


def apply_job_run_success(state: BuildState, seq: int, plan: SuccessPlan, event: pb.Event) -> None:
    """The run succeeded: its instances become Live with their outputs and provenance."""
    run, built, run_inputs, outputs, checks, failed = plan
    _move_run(state, run, JobRunState.SUCCEEDED, seq, event)
    if checks:
        record_checks(state, seq, checks, run.job_label)
    run.inputs = run_inputs[0]
    run_id = run.job_run_id
    if failed:
        run.failed_outputs = tuple(failed)
    for instance in built:
        failure = failed.get(instance.uuid) if failed else None
        if failure is not None:  # failed on its own: the others go Live all the same
            _fail_output(state, instance, failure.error_class == _PERMANENT, failure.message, seq)
            continue
        inputs = run_inputs
        described = outputs.get(instance.uuid)
        if described is not None:
            output, own_inputs = described
            if own_inputs[0]:
                inputs = own_inputs
            instance.location = output.location or None
            instance.row_count = output.row_count
            instance.byte_count = output.bytes
            if output.metadata:
                instance.metadata = dict(sorted(output.metadata.items()))
        instance.inputs = inputs[0]
        instance.built_by = run_id
        uuid = instance.uuid
        touched = state.touched
        for upstream in inputs[1]:
            if touched is not None:
                touched.instances.add(upstream.uuid)
            consumers = upstream.consumers
            if consumers is None:
                upstream.consumers = (uuid,)  # most inputs feed one build: a tuple is 16 bytes less than a list
            elif type(consumers) is list:
                consumers.append(uuid)
            else:
                upstream.consumers = [*consumers, uuid]
        changed = _changed_input(state, inputs[1])
        if changed is None:
            move_instance_and_waiters(state, instance, LIVE, seq)
        else:  # built from data replaced while it ran: recorded, never Live; a fresh instance is wanted instead
            new_canonical(state, seq, instance.ref, instance)
            move_instance(state, instance, TAINTED, seq)
            note = f"input {changed.ref} changed while it was built (it read instance {changed.uuid})"
            set_note(state, instance, note, seq)


def _fail_output(state: BuildState, instance: Instance, permanent: bool, note: str, seq: int) -> None:
    """One output failed on its own: it fails (permanent) or waits for its retry, with its own note."""
    set_note(state, instance, note or None, seq)
    move_instance_and_waiters(state, instance, FAILED if permanent else UP_FOR_RETRY, seq)


def _changed_input(state: BuildState, inputs: Sequence[Instance]) -> Instance | None:
    """The first input that changed after the run read it, as a taint or new data would have for a Live consumer.

    Tainted since, or replaced by a new version of its data (a strong version that only moved is the
    same data). Inputs replaced by observations without versions keep the rules from before versions.
    """
    for upstream in inputs:
        if upstream.state == TAINTED:
            return upstream
        if not upstream.superseded_seq:
            continue
        if serves_stale(state, upstream):  # out of date since: a successor of it is canonical
            return upstream
        current = state.canonical_instance(upstream.ref)
        if current is None or (upstream.version is None and current.version is None):
            continue
        if current.version == upstream.version and current.version is not None and current.version[1]:
            continue
        return upstream
    return None


# ----------------------------------------------------------------- JobRunFailure, JobRunCancel


def check_job_run_failure(state: BuildState, seq: int, msg: pb.JobRunFailure, event: pb.Event) -> str | FailurePlan:
    """Validate a JobRunFailure; resolve the run and its instances."""
    run = _active_run(state, msg.job_run_id, own=not msg.HasField("fence"))
    if isinstance(run, str):
        return run
    if msg.retry_after_ms < 0:
        return "retry_after_ms must not be negative"
    instances = _instances_of(state, run)
    if msg.HasField("fence"):  # a group member failing a stale run: only the owner of its partitions may
        problem = fenced_decision_problem(state, msg.fence, event, instances)
        if problem:
            return problem
    checks = checks_problem(msg.checks, run.instance_uuids, run.job_run_id, success=False) if msg.checks else NO_CHECKS
    if isinstance(checks, str):
        return checks
    failed = _failed_outputs(msg.failed_outputs, run.instance_uuids, run.job_run_id) if msg.failed_outputs else {}
    if isinstance(failed, str):
        return failed
    if msg.split and (len(instances) < 2 or failed):
        return "only a batch of several outputs that failed as a whole can be split"
    return run, msg, instances, checks, failed


def apply_job_run_failure(state: BuildState, seq: int, plan: FailurePlan, event: pb.Event) -> None:
    """The run failed: its instances fail (permanent) or wait for a retry; waiters follow."""
    run, msg, instances, checks, failed = plan
    permanent = msg.error_class == _PERMANENT and not msg.split  # a batch-mate's error fails no output for good
    _move_run(state, run, JobRunState.FAILED, seq, event)
    if checks:
        record_checks(state, seq, checks, run.job_label)
    run.error_class = "permanent" if permanent else "retryable"
    run.error_message = msg.message
    run.retry_after_ms = msg.retry_after_ms
    target = FAILED if permanent else UP_FOR_RETRY
    note = msg.message or None
    if msg.split:
        run.split = True
        note = f"retried on its own: its batch of {len(instances)} failed as a whole (job run {run.job_run_id})"
    for instance in instances:
        failure = failed.get(instance.uuid) if failed else None
        if failure is not None:
            _fail_output(state, instance, failure.error_class == _PERMANENT, failure.message, seq)
        elif msg.split:  # kept: the run's message is the batch's, not this output's
            set_note(state, instance, note, seq)
            move_instance_and_waiters(state, instance, target, seq)
            # Owed whether or not a want still names it: a batch-mate's failure may have ended the want.
            state.owed_retries[instance.uuid] = None
        else:
            instance.note = note  # not kept: a read of the past finds it in the run (state/fold/past.py)
            move_instance_and_waiters(state, instance, target, seq)


def check_job_run_cancel(state: BuildState, seq: int, msg: pb.JobRunCancel, event: pb.Event) -> str | CancelPlan:
    """Validate a JobRunCancel (an operator's); resolve the run and its instances."""
    run = _active_run(state, msg.job_run_id, own=False)
    if isinstance(run, str):
        return run
    return run, msg.reason or None, _instances_of(state, run), msg.replace_instances


def apply_job_run_cancel(state: BuildState, seq: int, plan: CancelPlan, event: pb.Event) -> None:
    """The run was canceled: its instances end Canceled and a fresh Missing instance of each ref replaces
    it, so a rebuild writes to a new location, never where the canceled job may still be writing.

    Cancels written before `replace_instances` existed put the instances back to Missing, UUIDs kept.
    """
    run, reason, instances, replace = plan
    _move_run(state, run, JobRunState.CANCELED, seq, event)
    run.cancel_reason = reason
    for instance in instances:
        if replace:
            new_canonical(state, seq, instance.ref, instance)
            move_instance(state, instance, CANCELED, seq)
        else:
            move_instance(state, instance, MISSING, seq)


# ----------------------------------------------------------------- JobRunMissingDeps


def check_job_run_missing_deps(
    state: BuildState, seq: int, msg: pb.JobRunMissingDeps, event: pb.Event
) -> str | MissingDepsPlan:
    """Validate a JobRunMissingDeps; resolve the run, its instances, and which missing refs are not Live."""
    run = _active_run(state, msg.job_run_id)
    if isinstance(run, str):
        return run
    missing = tuple(map(intern, msg.missing_refs))
    instances = _instances_of(state, run)
    problem = upstream_refs_problem(missing, {instance.ref for instance in instances})
    if problem:
        return problem
    # The run's own refs are not among them, so applying the wait cannot make any of them Live.
    still_missing = [ref for ref in missing if not is_live(state, ref)]
    return run, instances, missing, still_missing


def apply_job_run_missing_deps(state: BuildState, seq: int, plan: MissingDepsPlan, event: pb.Event) -> None:
    """The run found inputs missing: its instances wait for those not Live yet."""
    run, instances, missing, still_missing = plan
    _move_run(state, run, JobRunState.DEP_MISS, seq, event)
    run.missing_refs = missing
    # Not kept: a read of the past finds the refs a wait began with in the run's missing_refs.
    for instance in instances:
        wait_for_upstream(state, instance, still_missing, seq, keep=False)
