"""Which messages an event makes for a subscription: one per ordering key it touches, filtered.

The ordering key is what keeps its order at the receiver: a partition ref (an
event about three refs is three messages), a job run, or a root want. An event
with nothing of the subscription's ordering kind (a want event under job-run
ordering) makes no message. Which refs, wants and job run an event names is its
row of the event registry (state/fold/registry.py). Each message carries its
key's hash (`key_hash`), the main storage topic its event was produced to, and
its topic partition there.
"""

from __future__ import annotations

from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Any

from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.fold.build_state import BuildState
from partbuild.state.fold.registry import BY_NAME, EventType
from partbuild.state.fold.subscription_records import Subscription
from partbuild.state.rules.topics import key_hash


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
    row = BY_NAME.get(event_type) if event_type in sub.event_types else None
    if row is None:
        return []
    msg = row.message(event)
    run_id = msg.job_run_id if row.job_run else ""
    if sub.job and (not run_id or _job_of(state, run_id) != sub.job):
        return []
    refs = tuple(dict.fromkeys(row.refs(state, msg)))  # each once, in the event's order
    if sub.ref_prefixes or sub.ref_patterns:
        refs = tuple(ref for ref in refs if _ref_passes(sub, ref))
        if not refs:
            return []
    if sub.root_want and sub.root_want not in _roots(row, msg, refs, state):
        return []
    if sub.ordering == "partition_ref":
        keys: tuple[str, ...] = refs
    elif sub.ordering == "job_run":
        keys = (run_id,) if run_id else ()
    else:
        keys = _roots(row, msg, refs, state)
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


def _roots(row: EventType, msg: Any, refs: tuple[str, ...], state: BuildState) -> tuple[str, ...]:
    """The root wants an event serves: those of the wants it names; otherwise the roots of its refs' wants."""
    roots: dict[str, None] = {}
    if row.want_ids is not None:
        for want_id in row.want_ids(msg):
            want = state.wants.get(want_id)
            if want is not None:
                roots[want.root_want_id] = None
        return tuple(roots)
    for ref in refs:
        for want_id in state.wants_by_ref.get(ref, ()):
            roots[state.wants[want_id].root_want_id] = None
    return tuple(roots)
