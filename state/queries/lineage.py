"""Read-only questions about a BuildState: history of a ref, provenance, lineage."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Literal

from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.fold.build_state import BuildState
from partbuild.state.fold.instances import check_partition_observed
from partbuild.state.fold.records import Instance, JobRun, Want
from partbuild.state.fold.view import StateView

Direction = Literal["upstream", "downstream", "both"]


def ref_history(state: StateView, ref: str) -> list[Instance]:
    """Every instance of `ref` still held, newest (canonical) first, following `previous_uuid`.

    The chain ends at the first instance or where retention dropped an older one.
    """
    history: list[Instance] = []
    uuid = state.canonical.get(ref)
    while uuid is not None:
        instance = state.instances.get(uuid)
        if instance is None:
            break
        history.append(instance)
        uuid = instance.previous_uuid
    return history


def builder_of(state: StateView, uuid: str) -> JobRun | None:
    """The job run whose success made this instance Live (None for source data or unbuilt)."""
    instance = state.instances.get(uuid)
    if instance is None or instance.built_by is None:
        return None
    return state.job_runs.get(instance.built_by)


def attempts_for(state: StateView, uuid: str) -> list[JobRun]:
    """Every job run buffered for this instance, oldest first."""
    instance = state.instances.get(uuid)
    return [] if instance is None else [state.job_runs[run_id] for run_id in instance.attempts]


def wants_for(state: StateView, ref: str) -> list[Want]:
    """Every want that listed `ref`, oldest first."""
    return [state.wants[want_id] for want_id in state.wants_by_ref.get(ref, ())]


@dataclass
class Lineage:
    """A lineage graph around one instance: edges point from input to output."""

    root: str
    nodes: dict[str, Instance | None] = field(default_factory=dict)  # None: dropped by retention
    edges: list[tuple[str, str]] = field(default_factory=list)
    depth_of: dict[str, int] = field(default_factory=dict)


def lineage(state: StateView, uuid: str, *, direction: Direction = "both", depth: int = 1) -> Lineage:
    """Instances upstream (inputs) and/or downstream (consumers) of `uuid`, to `depth` hops.

    Breadth-first; each node is visited once, so diamonds and long chains cost
    O(nodes + edges) of the result. Raises KeyError for an unknown UUID.
    """
    if uuid not in state.instances:
        raise KeyError(uuid)
    if depth < 0:
        raise ValueError("depth must not be negative")
    graph = Lineage(root=uuid)
    graph.nodes[uuid] = state.instances[uuid]
    graph.depth_of[uuid] = 0
    if direction in ("upstream", "both"):
        _walk(state, graph, uuid, depth, upstream=True)
    if direction in ("downstream", "both"):
        _walk(state, graph, uuid, depth, upstream=False)
    return graph


def _walk(state: StateView, graph: Lineage, start: str, depth: int, *, upstream: bool) -> None:
    queue = deque([(start, 0)])
    seen = {start}
    while queue:
        uuid, hops = queue.popleft()
        if hops == depth:
            continue
        instance = state.instances.get(uuid)
        if instance is None:
            continue
        neighbours = instance.inputs if upstream else instance.consumers or ()
        for other in neighbours:
            graph.edges.append((other, uuid) if upstream else (uuid, other))
            if other in seen:
                continue
            seen.add(other)
            graph.nodes[other] = state.instances.get(other)
            graph.depth_of.setdefault(other, hops + 1)
            queue.append((other, hops + 1))


def refs_tainted_by(state: BuildState, observed: pb.PartitionObserved) -> list[str]:
    """The refs whose Live instances `observed`, appended next, would taint (new data upstream of them).

    Asks the fold's own check (pure), so the answer is exactly what folding the event would do.
    """
    plan = check_partition_observed(state, state.head_seq + 1, observed, pb.Event())
    if isinstance(plan, str):
        return []
    return [instance.ref for instance in plan[4]]


def root_wanted(state: StateView, ref: str) -> bool:
    """Whether a person (a want with no parent) asked for `ref` at some point."""
    return any(state.wants[want_id].parent_want_id is None for want_id in state.wants_by_ref.get(ref, ()))
