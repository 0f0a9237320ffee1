"""What reactions owe (issue 35): ReactionsNoted, the pending firings, the reactors' cursors, each reaction's row.

A reactor (orchestrator/reactions.py) reads the changes the log folded and turns them into firings. So
that nothing it was told to do lives only in its memory, it records what it owes: `ReactionsNoted` says
"I examined every change up to `upto_seq` for these scopes; these firings wait for their window; these
ended without firing". After a restart, a crash or a change of a bucket's owner, the next reactor fires
the pending firings it finds here and reads the changes after its scopes' cursors, so every change fires
its reaction once (a copy of a firing names a want that exists already and is rejected).

The fold's rules:

- `upto_seq` is a seq before the event's own (nobody examined what was not folded yet), scopes and firings
  are well formed (ids, a kind the schema names, on_code_change excluded: it is evaluated from the state
  itself, stale instances, and owes nothing between steps);
- a firing is kept per (job, kind, partition): a newer cause replaces an older one (the debounce window
  starts again), an older one, noted late by a slow writer, changes nothing, and one whose want exists
  already (it fired) is not pending again;
- a settled firing leaves the pending ones (if it names the cause still pending); a failed one is counted
  as an error of its reaction, with its reason;
- a scope's cursor only moves forward.

`BuildState.reaction_pending` (key: `pending_key`) and `BuildState.reaction_cursors` are `Items` sections:
empty in every older log, so those keep their digests. `BuildState.reactions` holds one `ReactionRow` per
(job, kind) that ever fired, was pending or failed: derived from the log, it is a `Lookup` (older logs'
`ReactionFired` would otherwise change their digests). Versions of the pending firings and the rows are kept
(history.py), so `/automation` as of any seq shows what was pending then.
"""

from __future__ import annotations

import pickle
from typing import TYPE_CHECKING, NamedTuple

from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.fold.history import touch_version
from partbuild.state.fold.reactions import KIND_NAMES, ReactionPlan, reaction_want_id
from partbuild.state.fold.validation import MAX_ID_LENGTH, id_problem
from partbuild.state.fold.wants import apply_want_create

if TYPE_CHECKING:
    from partbuild.state.fold.build_state import BuildState

MAX_NOTED = 10_000  # firings (pending and settled) one event may carry
MAX_SCOPES = 4_096
MAX_REASON_CHARS = 1_024
MAX_DUE_MS = 2**62  # a due time that still fits SQL's integers with room to add to it
_SEP = "\x00"  # never in an id (id_problem refuses control characters)


class PendingRow(NamedTuple):
    """A firing waiting for its window (plain values: digested as a tuple, pickled as a version)."""

    job: str
    kind: int
    partition_ref: str
    cause_ref: str
    cause_instance_uuid: str
    previous_instance_uuid: str
    cause_seq: int
    due_ms: int
    noted_seq: int


class ReactionRow(NamedTuple):
    """What the log says of one reaction (job, kind): firings, the last one, errors."""

    fired: int = 0
    last_fired_seq: int = 0
    last_cause_ref: str = ""
    last_cause_instance_uuid: str = ""
    last_want_id: str = ""
    failed: int = 0  # firings that could not fire (settled as failed)
    last_error: str = ""
    last_error_seq: int = 0


def pending_key(job: str, kind: int, ref: str) -> str:
    """The key of a firing: one per (job, kind, partition)."""
    return f"{job}{_SEP}{kind}{_SEP}{ref}"


def reaction_key(job: str, kind: int) -> str:
    return f"{job}{_SEP}{kind}"


def split_reaction_key(key: str) -> tuple[str, int]:
    """(job, kind) of a `reaction_key`."""
    job, kind = key.split(_SEP)
    return job, int(kind)


NotedPlan = tuple[dict[str, PendingRow], list[tuple[str, pb.ReactionSettled]]]


def check_reactions_noted(state: BuildState, seq: int, msg: pb.ReactionsNoted, event: pb.Event) -> str | NotedPlan:
    """Validate a reactor's notes; plan the pending firings it adds or replaces and those it settles."""
    if not 0 <= msg.upto_seq < seq:
        return f"notes examine changes before their own seq {seq}, not up to {msg.upto_seq}"
    if len(msg.scopes) > MAX_SCOPES or len(msg.pending) + len(msg.settled) > MAX_NOTED:
        return f"notes carry at most {MAX_SCOPES} scopes and {MAX_NOTED} firings"
    for scope in msg.scopes:
        if scope and (problem := id_problem("scope", scope)):
            return problem
    added: dict[str, PendingRow] = {}
    for firing in msg.pending:
        problem = _firing_problem(firing.job, firing.kind, firing.partition_ref, firing.cause_instance_uuid)
        problem = problem or id_problem("cause ref", firing.cause_ref)
        if problem:
            return problem
        if not 0 < firing.cause_seq <= msg.upto_seq or not 0 <= firing.due_ms <= MAX_DUE_MS:
            return f"a pending firing's cause is a seq up to {msg.upto_seq} and its due time fits SQL"
        key = pending_key(firing.job, firing.kind, firing.partition_ref)
        kept = added.get(key) or state.reaction_pending.get(key)
        if kept is not None and kept.cause_seq > firing.cause_seq:
            continue  # a newer cause was noted already: this one's window was restarted
        if reaction_want_id(firing.job, firing.kind, firing.cause_instance_uuid, firing.partition_ref) in state.wants:
            continue  # it fired already (a slow writer noting what another one fired)
        added[key] = _row(firing, seq)
    settled = []
    for done in msg.settled:
        problem = _firing_problem(done.job, done.kind, done.partition_ref, done.cause_instance_uuid)
        if problem:
            return problem
        if len(done.reason) > MAX_REASON_CHARS:
            return f"a reason is at most {MAX_REASON_CHARS} characters"
        settled.append((pending_key(done.job, done.kind, done.partition_ref), done))
    return added, settled


def _firing_problem(job: str, kind: int, ref: str, cause_uuid: str) -> str | None:
    problem = id_problem("job", job) or id_problem("partition ref", ref) or id_problem("cause instance", cause_uuid)
    if problem:
        return problem
    if kind not in KIND_NAMES or kind == pb.REACTION_KIND_CODE_CHANGE:
        return f"a noted firing is on_upstream_change or on_source_arrival, not kind {kind}"
    if max(len(job), len(ref)) > MAX_ID_LENGTH:
        return f"a job and a ref are at most {MAX_ID_LENGTH} characters"
    return None


def _row(firing: pb.ReactionPending, seq: int) -> PendingRow:
    return PendingRow(
        firing.job,
        firing.kind,
        firing.partition_ref,
        firing.cause_ref,
        firing.cause_instance_uuid,
        firing.previous_instance_uuid,
        firing.cause_seq,
        firing.due_ms,
        seq,
    )


def apply_reactions_noted(state: BuildState, seq: int, plan: NotedPlan, event: pb.Event) -> None:
    added, settled = plan
    msg = event.reactions_noted
    cursors = state.reaction_cursors
    for scope in msg.scopes:
        if cursors.get(scope, -1) < msg.upto_seq:
            cursors[scope] = msg.upto_seq
    for key, row in added.items():
        state.reaction_pending[key] = row
        _keep(state, seq, "reaction_pending", key)
        _touch(state, seq, row.job, row.kind)
    for key, done in settled:
        pending = state.reaction_pending.get(key)
        if pending is not None and pending.cause_instance_uuid == done.cause_instance_uuid:
            del state.reaction_pending[key]
            _keep(state, seq, "reaction_pending", key)
        if done.failed:
            kept = state.reactions.get(reaction_key(done.job, done.kind)) or ReactionRow()
            failure = kept._replace(failed=kept.failed + 1, last_error=done.reason, last_error_seq=seq)
            _set_row(state, seq, done.job, done.kind, failure)


def apply_reaction_fired(state: BuildState, seq: int, plan: ReactionPlan, event: pb.Event) -> None:
    """The want a firing made (reactions.check_reaction_fired checked it), its cause, and what it settles.

    Here rather than in reactions.py, whose ids and kinds this module reads: no import circle."""
    want_plan, cause = plan
    apply_want_create(state, seq, want_plan, event)
    state.want_causes[want_plan[0].want_id] = cause
    fired(state, seq, event.reaction_fired)


def fired(state: BuildState, seq: int, msg: pb.ReactionFired) -> None:
    """A firing landed (`ReactionFired` applied): it is pending no more, and its reaction's row says so."""
    key = pending_key(msg.job, msg.kind, msg.want.partition_refs[0])
    row = state.reaction_pending.get(key)
    if row is not None and _fired_covers(state, row, msg.cause_instance_uuid):
        del state.reaction_pending[key]
        _keep(state, seq, "reaction_pending", key)
    kept = state.reactions.get(reaction_key(msg.job, msg.kind)) or ReactionRow()
    new = kept._replace(
        fired=kept.fired + 1,
        last_fired_seq=seq,
        last_cause_ref=msg.cause_ref,
        last_cause_instance_uuid=msg.cause_instance_uuid,
        last_want_id=msg.want.want_id,
    )
    _set_row(state, seq, msg.job, msg.kind, new)


def _fired_covers(state: BuildState, row: PendingRow, fired_uuid: str) -> bool:
    """Whether a firing for `fired_uuid` settles the pending `row`: its own cause, or a newer one."""
    if row.cause_instance_uuid == fired_uuid:
        return True
    pending, fired_cause = state.instances.get(row.cause_instance_uuid), state.instances.get(fired_uuid)
    return pending is not None and fired_cause is not None and pending.created_seq < fired_cause.created_seq


def _touch(state: BuildState, seq: int, job: str, kind: int) -> None:
    """A reaction with a pending firing has a row (shown, with what it owes, even before it fired)."""
    if reaction_key(job, kind) not in state.reactions:
        _set_row(state, seq, job, kind, ReactionRow())


def _set_row(state: BuildState, seq: int, job: str, kind: int, row: ReactionRow) -> None:
    key = reaction_key(job, kind)
    state.reactions[key] = row
    _keep(state, seq, "reactions", key)


def _keep(state: BuildState, seq: int, name: str, key: str) -> None:
    """Keep the record's value as of `seq` (None once deleted), for reads of the past (history.versions_at)."""
    copy = pickle.dumps(getattr(state, name).get(key), protocol=pickle.HIGHEST_PROTOCOL)
    versions = state.versions.setdefault(name, {}).setdefault(key, [])
    if versions and versions[-1][0] == seq:
        versions[-1] = (seq, copy)
    elif not versions or versions[-1][1] != copy:
        versions.append((seq, copy))
    else:
        return
    touch_version(state, name, key)
