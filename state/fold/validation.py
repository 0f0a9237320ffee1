"""Pure helpers shared by the check phases: id and ref rules, and how rejection reasons quote values.

Nothing here reads or writes a BuildState; the reason texts are part of the log's
audit trail (the golden log and tests compare them), so they must not change.
"""

from __future__ import annotations

from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.rules.refs import ref_problem

MAX_ID_LENGTH = 256


def short(text: str) -> str:
    """A ref or id quoted for a rejection reason, cut so one bad event cannot bloat the state."""
    return repr(text if len(text) <= 120 else text[:117] + "...")


def id_problem(what: str, value: str) -> str | None:
    """Why a want or job run id is invalid (empty, too long), or None."""
    if not value:
        return f"{what} is empty"
    if len(value) > MAX_ID_LENGTH:
        return f"{what} is longer than {MAX_ID_LENGTH} characters"
    return None


def ref_rejection(ref: str) -> str | None:
    """The rejection reason for an invalid partition ref, or None when it is valid."""
    problem = ref_problem(ref)
    return f"{problem}: {short(ref)}" if problem else None


def upstream_refs_problem(refs: tuple[str, ...], own_refs: set[str]) -> str | None:
    """Why a list of refs to wait for is invalid (empty, bad ref, own output, duplicate), or None."""
    if not refs:
        return "no upstream refs listed"
    for ref in refs:
        problem = ref_problem(ref)
        if problem:
            return f"{problem}: {short(ref)}"
        if ref in own_refs:
            return f"{short(ref)} is listed as a missing input of its own build"
    if len(refs) > 1 and len(set(refs)) != len(refs):
        return "an upstream ref is listed more than once"
    return None


def describe_source(event: pb.Event) -> str:
    """A compact label of who appended the event: manual:<user>, job_run:<id>, system:<component>."""
    source = event.source  # read once: each read of a message field builds a wrapper
    kind = source.WhichOneof("kind")
    if kind == "manual":
        return f"manual:{source.manual.user}"
    if kind == "job_run":
        return f"job_run:{source.job_run.job_run_id}"
    if kind == "system":
        return f"system:{source.system.component}"
    return ""
