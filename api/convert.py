"""Conversions from BuildState records to the API's response models (never protobuf or records outward)."""

from __future__ import annotations

from typing import Any

from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.json_format import MessageToDict
from google.protobuf.message import Message

from partbuild.api import models as m
from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.fold.build_state import BuildState
from partbuild.state.fold.records import Instance, InstanceState, JobRun, JobRunState, Want, WantState
from partbuild.state.rules.queries import Lineage
from partbuild.state.rules.redact import redacted

MAX_TREE_NODES = 1_000
WAITING_DEPTH = 4


# What a bytes field of an event holds, for its redacted text. Every bytes field of an event is a
# connector's (a scan cursor, a token): none is ever shown raw.
_BYTES_KINDS = {"after_key": "ItemKey", "last_key": "ItemKey", "resume_token": "ResumeToken"}


def event_out(event: pb.Event) -> dict[str, Any]:
    """An event as JSON for API answers, its bytes fields redacted (`ItemKey(len=N, hash=..)`)."""
    shown = MessageToDict(event, preserving_proto_field_name=True)
    _redact_bytes(event, shown)
    return shown


def _redact_bytes(message: Message, shown: dict[str, Any]) -> None:
    for field, value in message.ListFields():
        if field.type == FieldDescriptor.TYPE_BYTES:
            kind = _BYTES_KINDS.get(field.name, "Bytes")
            shown[field.name] = [redacted(kind, v) for v in value] if field.is_repeated else redacted(kind, value)
        elif field.type == FieldDescriptor.TYPE_MESSAGE and not field.message_type.GetOptions().map_entry:
            if field.is_repeated:
                for item, item_shown in zip(value, shown[field.name], strict=True):
                    _redact_bytes(item, item_shown)
            else:
                _redact_bytes(value, shown[field.name])


def name(state: InstanceState | WantState | JobRunState) -> Any:
    """An enum state as the API spells it: "upstream_building"."""
    return state.name.lower()


def want_out(want: Want, now_ms: int) -> m.Want:
    deadline = want.sla_deadline_ms
    return m.Want(
        want_id=want.want_id,
        refs=list(want.refs),
        state=name(want.state),
        created_seq=want.created_seq,
        updated_seq=want.updated_seq,
        created_ms=want.created_ms,
        data_timestamp_ms=want.data_timestamp_ms,
        ttl_seconds=want.ttl_seconds,
        sla_seconds=want.sla_seconds,
        expires_at_ms=want.expires_at_ms,
        sla_deadline_ms=deadline,
        sla_breached=deadline is not None and want.state != WantState.SUCCESSFUL and now_ms > deadline,
        comment=want.comment,
        source=want.source,
        parent_want_id=want.parent_want_id,
        root_want_id=want.root_want_id,
        children=list(want.children or ()),
        satisfied_by=list(want.satisfied_by),
        cancel_reason=want.cancel_reason,
    )


def want_detail_out(state: BuildState, want: Want, now_ms: int) -> m.WantDetail:
    """A want with where each of its refs stands and its derivative-want tree."""
    return m.WantDetail(
        **want_out(want, now_ms).model_dump(),
        refs_status=[_ref_status(state, ref, WAITING_DEPTH, set()) for ref in want.refs],
        tree=_tree(state, want, [MAX_TREE_NODES]),
    )


def instance_out(instance: Instance) -> m.Instance:
    return m.Instance(
        uuid=instance.uuid,
        ref=instance.ref,
        state=name(instance.state),
        canonical=not instance.superseded_seq,
        created_seq=instance.created_seq,
        updated_seq=instance.updated_seq,
        superseded_seq=instance.superseded_seq or None,
        previous_uuid=instance.previous_uuid,
        built_by=instance.built_by,
        attempts=list(instance.attempts),
        inputs=list(instance.inputs),
        consumers=list(instance.consumers or ()),
        location=instance.location,
        row_count=instance.row_count,
        byte_count=instance.byte_count,
        metadata=dict(instance.metadata or {}),
        waiting_on=list(instance.waiting_on or ()),
        note=instance.note,
        version=m.SourceVersion(value=instance.version[0], strong=instance.version[1]) if instance.version else None,
    )


def job_run_out(state: BuildState, run: JobRun) -> m.JobRun:
    instances = [state.instances.get(uuid) for uuid in run.instance_uuids]
    first = instances[0] if instances else None
    attempt = first.attempts.index(run.job_run_id) + 1 if first and run.job_run_id in first.attempts else 1
    return m.JobRun(
        job_run_id=run.job_run_id,
        job_label=run.job_label,
        state=name(run.state),
        instance_uuids=list(run.instance_uuids),
        refs=[instance.ref for instance in instances if instance is not None],
        created_seq=run.created_seq,
        updated_seq=run.updated_seq,
        created_ms=run.created_ms,
        updated_ms=run.updated_ms,
        last_heartbeat_ms=run.last_heartbeat_ms,
        attempt=attempt,
        inputs=run_inputs(run, instances),
        error_class=run.error_class,
        error_message=run.error_message,
        retry_after_ms=run.retry_after_ms,
        missing_refs=list(run.missing_refs),
        cancel_reason=run.cancel_reason,
    )


def run_inputs(run: JobRun, built: list[Instance | None]) -> list[str]:
    """What a run read: its run-level inputs and every input of the instances it built, once each.

    Outputs usually list their own inputs (provenance per partition), so the run's own
    `inputs` alone would say a run that read four partitions read none. Instances that
    retention dropped contribute nothing.
    """
    read = dict.fromkeys(run.inputs)
    for instance in built:
        if instance is not None and instance.built_by == run.job_run_id:
            read.update(dict.fromkeys(instance.inputs))
    return list(read)


def lineage_out(graph: Lineage, head_seq: int) -> m.Lineage:
    nodes = [
        m.LineageNode(
            uuid=node_uuid,
            ref=node.ref if node else None,
            state=name(node.state) if node else None,
            depth=graph.depth_of[node_uuid],
            built_by=node.built_by if node else None,
        )
        for node_uuid, node in graph.nodes.items()
    ]
    edges = [m.LineageEdge(input=a, output=b) for a, b in dict.fromkeys(graph.edges)]
    return m.Lineage(root=graph.root, as_of_seq=head_seq, nodes=nodes, edges=edges)


def _ref_status(state: BuildState, ref: str, depth: int, seen: set[str]) -> m.RefStatus:
    """Where `ref` stands and, while it waits, where the refs it waits for stand (to `depth`)."""
    instance = state.canonical_instance(ref)
    if instance is None:
        return m.RefStatus(ref=ref, instance_uuid=None, state=None)
    status = m.RefStatus(ref=ref, instance_uuid=instance.uuid, state=name(instance.state))
    if instance.waiting_on and depth > 0 and ref not in seen:
        seen.add(ref)
        status.waiting_on = [_ref_status(state, upstream, depth - 1, seen) for upstream in instance.waiting_on]
    return status


def _tree(state: BuildState, want: Want, budget: list[int]) -> m.WantTree:
    """The want and its derivative wants, at most MAX_TREE_NODES nodes in all."""
    budget[0] -= 1
    children = []
    for child_id in want.children or ():
        if budget[0] <= 0:
            break
        children.append(_tree(state, state.wants[child_id], budget))
    return m.WantTree(want_id=want.want_id, state=name(want.state), refs=list(want.refs), children=children)
