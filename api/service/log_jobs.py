"""Jobs, source data and their dependencies as the log tells them: the job graph of a server with no graph.

Without the graph, a job is a label its runs carry: its partitions are the refs of the instances its runs
were buffered for, and its edges are what its succeeded runs read (the run's inputs and each output's own:
instances built by another job's run, or by none, source data). Source data is named after its refs' path:
the segments before the first `key=value` one (`raw/clicks/date=2026-01-05` is `raw/clicks`), the whole ref
but its last segment without one.

`LogJobs` follows a BuildState as it grows (as `state/queries/staleness.StaleIndex` does): the runs added since
the last update (dicts keep creation order) are taken in once, and the runs still queued or running are looked
at again until they end; each job, source and edge keeps the first seq it was known at, so a read as of a seq
lists what was known then (a node's refs are all it ever had: the grid's reads skip those with no instance
then). Reads take a node's refs as a sorted list never changed once handed out.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Final

from partbuild.api.models.jobs import NodeKind
from partbuild.state.fold.build_state import BuildState
from partbuild.state.fold.cold import created_since
from partbuild.state.fold.records import ACTIVE_RUN_STATES, JobRun, JobRunState
from partbuild.state.fold.view import StateView

JOB: Final = "job"
SOURCE: Final = "source"


def dataset_of(ref: str) -> str:
    """The name of the source data `ref` belongs to (see the module)."""
    parts = ref.split("/")
    keyed = next((index for index, part in enumerate(parts) if "=" in part), None)
    kept = parts[:keyed] if keyed is not None else parts[:-1]
    return "/".join(kept) or ref


@dataclass
class _Node:
    kind: NodeKind
    first_seq: int
    refs: dict[str, None] = field(default_factory=dict)  # its refs, in the order first known
    listed: list[str] = field(default_factory=list)  # the refs, sorted: replaced (never changed) when refs come


class LogJobs:
    """The jobs, sources and edges the log's runs show, updated by readers (`update`, under the state's lock)."""

    def __init__(self) -> None:
        self._seen_head = -1
        self._pending: list[str] = []  # runs queued or running when last looked at, in creation order
        self._nodes: dict[str, _Node] = {}
        self._edges: dict[tuple[str, str], int] = {}  # (producer, job) -> the seq of the first run that read it
        self._lock = threading.Lock()

    def update(self, state: BuildState) -> None:
        """Take in what the live `state` gained since the last update."""
        with self._lock:
            if state.head_seq == self._seen_head:
                return
            for run in created_since(state.job_runs, max(self._seen_head, 0)):
                self._add_run(state, run)
            self._look_again(state)

    def follow(self, state: StateView, created: Callable[[int], Iterable[JobRun]]) -> None:
        """Take in what `state` (the state store's records, of a read replica) gained since the last call:
        `created(seq)` gives the runs created after that seq, oldest first."""
        with self._lock:
            if state.head_seq == self._seen_head:
                return
            for run in created(max(self._seen_head, 0)):
                self._add_run(state, run)
            self._look_again(state)

    def _look_again(self, state: StateView) -> None:
        """Look at the runs that were active when last looked at, and note the seq looked at."""
        pending, self._pending = self._pending, []
        for run_id in pending:
            pending_run = state.job_runs.get(run_id)
            if pending_run is not None:
                self._look_at(state, pending_run)
        self._seen_head = state.head_seq

    def nodes(self, as_of_seq: int) -> list[tuple[str, NodeKind]]:
        """(name, kind) of the sources then the jobs known as of `as_of_seq`, each in the order first known."""
        with self._lock:
            known = [(name, node.kind) for name, node in self._nodes.items() if node.first_seq <= as_of_seq]
        return [item for item in known if item[1] == SOURCE] + [item for item in known if item[1] == JOB]

    def kind(self, name: str, as_of_seq: int) -> NodeKind | None:
        """The kind of node `name` as of `as_of_seq` (None: not known then)."""
        with self._lock:
            node = self._nodes.get(name)
            return node.kind if node is not None and node.first_seq <= as_of_seq else None

    def refs(self, name: str) -> list[str]:
        """Every ref known of node `name`, sorted (a list never changed once handed out)."""
        with self._lock:
            node = self._nodes.get(name)
            if node is None:
                return []
            if len(node.listed) != len(node.refs):
                node.listed = sorted(node.refs)
            return node.listed

    def edges(self, as_of_seq: int) -> list[tuple[str, str]]:
        """The (producer, job) pairs known as of `as_of_seq`, in the order first found."""
        with self._lock:
            return [edge for edge, seq in self._edges.items() if seq <= as_of_seq]

    def _add_run(self, state: StateView, run: JobRun) -> None:
        node = self._node(run.job_label, JOB, run.created_seq)
        for uuid in run.instance_uuids:
            instance = state.instances.get(uuid)
            if instance is not None:
                node.refs[instance.ref] = None
        self._look_at(state, run)

    def _look_at(self, state: StateView, run: JobRun) -> None:
        """A run that ended: its edges if it succeeded; one still active is looked at again next time."""
        if run.state in ACTIVE_RUN_STATES:
            self._pending.append(run.job_run_id)
            return
        if run.state != JobRunState.SUCCEEDED:
            return
        seq, instances = run.updated_seq, state.instances
        read: dict[str, None] = dict.fromkeys(run.inputs)  # the run's inputs, and each output's own
        for built in (instances.get(uuid) for uuid in run.instance_uuids):
            if built is not None and built.built_by == run.job_run_id:
                read.update(dict.fromkeys(built.inputs))
        for uuid in read:
            instance = instances.get(uuid)
            if instance is None:  # dropped by retention since
                continue
            builder = state.job_runs.get(instance.built_by) if instance.built_by is not None else None
            if builder is not None:
                producer = builder.job_label
            else:
                producer = dataset_of(instance.ref)
                if producer in self._nodes and self._nodes[producer].kind == JOB:
                    producer += " (data)"  # a job of that name exists: keep the two apart
                self._node(producer, SOURCE, seq).refs[instance.ref] = None
            self._edges.setdefault((producer, run.job_label), seq)

    def _node(self, name: str, kind: NodeKind, seq: int) -> _Node:
        node = self._nodes.get(name)
        if node is None:
            node = self._nodes[name] = _Node(kind, seq)
        return node
