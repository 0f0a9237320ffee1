"""Reactions (issue 25): ReactionFired, and the cause of the want it created.

A reaction is declared on a job (orchestrator/reactions.py); the log holds what it did. Each
firing is one `ReactionFired` carrying the one want it created, so the want and its cause land
together or not at all. The fold's rules:

- the kind is one the schema names, the job and the cause's ref and instance are given;
- the want names exactly one ref, and its id is the firing's (`reaction_want_id`, derived from
  the job, the kind, the cause instance and the ref): a copy of a firing (a second orchestrator,
  a restart that saw the same change) names a want that exists already and is rejected;
- the cause instance, while the state still holds it, is an instance of the cause's ref;
- an on_code_change (since the kind was added) wants its cause's own ref, and names the code version that
  built the cause instance and the job's current one, which differ (the orchestrator taints the instance
  in the same append, so the want rebuilds it rather than finding it Live);
- the want is checked as a WantCreate would be (a want of its own: no parent, root or fence).

No side table: `BuildState.want_causes` says why the want exists ("reaction on_upstream_change of
job daily: raw/date=... got instance B (was A)"), set with the want and never changed, so a read
as of any seq at which the want exists finds it as it was. The apply phase is in reaction_notes.py
(it settles what the reactions owed, and that module reads this one's ids and kinds).
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING, Literal

from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.fold.validation import MAX_ID_LENGTH, id_problem, short
from partbuild.state.fold.wants import WantCreatePlan, check_want_create

if TYPE_CHECKING:
    from partbuild.state.fold.build_state import BuildState

ReactionKindName = Literal["on_upstream_change", "on_source_arrival", "on_code_change"]
KIND_NAMES: dict[int, ReactionKindName] = {
    pb.REACTION_KIND_UPSTREAM_CHANGE: "on_upstream_change",
    pb.REACTION_KIND_SOURCE_ARRIVAL: "on_source_arrival",
    pb.REACTION_KIND_CODE_CHANGE: "on_code_change",
}

ReactionPlan = tuple[WantCreatePlan, str]  # (the want's plan, its cause in words)


def reaction_want_id(job: str, kind: int, cause_uuid: str, ref: str) -> str:
    """The id of the want a firing creates: the same from every writer, so a copy collides."""
    digest = hashlib.blake2b(f"{cause_uuid}\0{ref}".encode(), digest_size=12).hexdigest()
    return f"reaction:{job}:{KIND_NAMES.get(kind, kind)}:{digest}"


def reaction_cause(msg: pb.ReactionFired) -> str:
    """Why a firing's want exists, in words."""
    head = f"reaction {KIND_NAMES[msg.kind]} of job {msg.job}: {msg.cause_ref}"
    if msg.kind == pb.REACTION_KIND_CODE_CHANGE:
        return (
            f"{head} instance {msg.cause_instance_uuid} was built by code version {msg.built_version}, "
            f"the job's is {msg.current_version}"
        )
    if msg.previous_instance_uuid:
        return f"{head} got instance {msg.cause_instance_uuid} (was {msg.previous_instance_uuid})"
    return f"{head} first observed as instance {msg.cause_instance_uuid}"


def check_reaction_fired(state: BuildState, seq: int, msg: pb.ReactionFired, event: pb.Event) -> str | ReactionPlan:
    """Validate a firing; check its want as a WantCreate."""
    problem = id_problem("job", msg.job) or id_problem("cause ref", msg.cause_ref)
    problem = problem or id_problem("cause instance", msg.cause_instance_uuid)
    if problem:
        return problem
    if msg.kind not in KIND_NAMES:
        return f"reaction kind {msg.kind} is not one of {', '.join(KIND_NAMES.values())}"
    if msg.kind == pb.REACTION_KIND_SOURCE_ARRIVAL and msg.previous_instance_uuid:
        return "a source's arrival supersedes no instance"
    if msg.kind == pb.REACTION_KIND_CODE_CHANGE:
        problem = _code_change_problem(msg)
        if problem:
            return problem
    elif msg.built_version or msg.current_version:
        return "only on_code_change names code versions"
    cause = state.instances.get(msg.cause_instance_uuid)
    if cause is not None and cause.ref != msg.cause_ref:  # None: dropped by retention since (a late writer)
        return f"instance {short(msg.cause_instance_uuid)} is not an instance of {short(msg.cause_ref)}"
    if not msg.HasField("want"):
        return "a reaction fires with a want"
    want = msg.want
    if len(want.partition_refs) != 1:
        return "a reaction's want names one partition"
    expected = reaction_want_id(msg.job, msg.kind, msg.cause_instance_uuid, want.partition_refs[0])
    if want.want_id != expected:
        return f"a reaction's want is named {short(expected)}, not {short(want.want_id)}"
    if want.parent_want_id or want.root_want_id or want.HasField("fence"):
        return "a reaction's want is a want of its own: no parent, root or fence"
    checked = check_want_create(state, seq, want, event)  # an existing id (the copy) is rejected here
    if isinstance(checked, str):
        return checked
    return checked, reaction_cause(msg)


def _code_change_problem(msg: pb.ReactionFired) -> str | None:
    """An on_code_change wants its cause's own ref again, naming the two versions, which differ."""
    if msg.previous_instance_uuid:
        return "a code change supersedes no instance: it names the instance built by the old version"
    if not msg.built_version or not msg.current_version or msg.built_version == msg.current_version:
        return "a code change names the version that built the instance and a different current one"
    if max(len(msg.built_version), len(msg.current_version)) > MAX_ID_LENGTH:
        return f"a code version is at most {MAX_ID_LENGTH} characters"
    if msg.HasField("want") and list(msg.want.partition_refs) != [msg.cause_ref]:
        return "a code change wants its cause's ref again"
    return None
