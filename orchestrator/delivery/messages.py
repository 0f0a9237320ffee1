"""Which messages an event makes for a subscription: one per ordering key it touches, filtered.

The ordering key is what keeps its order at the receiver: a partition ref (an
event about three refs is three messages), a job run, or a root want. An event
with nothing of the subscription's ordering kind (a want event under job-run
ordering) makes no message. Each message carries its key's hash (`key_hash`),
the main storage topic its event was produced to, and its topic partition there.
"""

from __future__ import annotations

from dataclasses import dataclass
from fnmatch import fnmatchcase

from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.fold.build_state import BuildState
from partbuild.state.rules.subscriptions import Subscription
from partbuild.state.rules.topics import key_hash

_RUN_EVENTS = {
    "job_run_buffer",
    "job_run_heartbeat",
    "job_run_success",
    "job_run_failure",
    "job_run_cancel",
    "job_run_missing_deps",
}


@dataclass(frozen=True)
class Message:
    """One event for one ordering key of one subscription."""

    seq: int
    event_type: str
    ordering_key: str
    key_hash: int
    main_topic: int  # the main storage topic the event was produced to (by its seq)
    topic_partition: int  # its virtual partition there


def messages_for(sub: Subscription, seq: int, event: pb.Event, state: BuildState) -> list[Message]:
    """The messages `event` (at `seq`) makes for `sub`, in a stable order. The caller holds the read lock."""
    event_type = event.WhichOneof("payload")
    if event_type not in sub.event_types:
        return []
    run_id = getattr(event, event_type).job_run_id if event_type in _RUN_EVENTS else ""
    if sub.job and (not run_id or _job_of(state, run_id) != sub.job):
        return []
    refs = _refs(event, event_type, state)
    if sub.ref_prefixes or sub.ref_patterns:
        refs = tuple(ref for ref in refs if _ref_passes(sub, ref))
        if not refs:
            return []
    if sub.root_want and sub.root_want not in _roots(event, event_type, refs, state):
        return []
    if sub.ordering == "partition_ref":
        keys: tuple[str, ...] = refs
    elif sub.ordering == "job_run":
        keys = (run_id,) if run_id else ()
    else:
        keys = _roots(event, event_type, refs, state)
    topic_index = sub.main_topic_index(seq)
    topic = sub.main.storage_topics[topic_index]
    found = []
    for key in keys:
        h = key_hash(key)
        found.append(Message(seq, event_type, key, h, topic_index, topic.partition_for(h)))
    return found


def _ref_passes(sub: Subscription, ref: str) -> bool:
    return any(ref.startswith(prefix) for prefix in sub.ref_prefixes) or any(
        fnmatchcase(ref, pattern) for pattern in sub.ref_patterns
    )


def _job_of(state: BuildState, run_id: str) -> str | None:
    run = state.job_runs.get(run_id)
    return run.job_label if run is not None else None


def _refs(event: pb.Event, event_type: str, state: BuildState) -> tuple[str, ...]:
    """The partition refs an event is about, each once, in the event's order."""
    if event_type == "want_create":
        refs: list[str] = list(event.want_create.partition_refs)
    elif event_type == "want_cancel":
        want = state.wants.get(event.want_cancel.want_id)
        refs = list(want.refs) if want is not None else []
    elif event_type in _RUN_EVENTS:
        run = state.job_runs.get(getattr(event, event_type).job_run_id)
        refs = _instance_refs(state, run.instance_uuids) if run is not None else []
    elif event_type in ("partition_taint", "partition_observed"):
        refs = [getattr(event, event_type).partition_ref]
    elif event_type == "instances_wait_upstream":
        refs = _instance_refs(state, [wait.instance_uuid for wait in event.instances_wait_upstream.waits])
    else:
        refs = []
    return tuple(dict.fromkeys(refs))


def _instance_refs(state: BuildState, uuids: object) -> list[str]:
    instances = state.instances
    return [instances[uuid].ref for uuid in uuids if uuid in instances]  # type: ignore[attr-defined]


def _roots(event: pb.Event, event_type: str, refs: tuple[str, ...], state: BuildState) -> tuple[str, ...]:
    """The root wants an event serves: a want event's own root; otherwise the roots of its refs' wants."""
    if event_type in ("want_create", "want_cancel"):
        want = state.wants.get(getattr(event, event_type).want_id)
        return (want.root_want_id,) if want is not None else ()
    roots: dict[str, None] = {}
    for ref in refs:
        for want_id in state.wants_by_ref.get(ref, ()):
            roots[state.wants[want_id].root_want_id] = None
    return tuple(roots)
