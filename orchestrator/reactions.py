"""Reactions declared on jobs, and the pure evaluation of what they want (the loop appends the firings).

    Job("daily", ..., reactions=[on_upstream_change(debounce=timedelta(seconds=30))])
    Job("hourly", ..., reactions=[on_source_arrival()])

`on_upstream_change`: an input of a partition of the job got a new Live instance in place of the one the
partition was built from (a new source version observed, an upstream rebuilt after a taint). The fold
already marks what was built from the old data stale or withdraws it (state/fold/instances.py); the reaction
wants those partitions again, so downstream data follows its inputs without anyone asking. It looks one level
down only: the direct consumers of the superseded instance whose job declares the reaction and that are
not Live now. In a chain daily -> weekly where both declare it, the daily reacts to the raw day, and the
weekly reacts once the daily's new instance is Live (not at once): the weekly is never built from a daily
about to change, and a weekly reading seven dailies that change within its debounce window is wanted once.
A partition that stayed Live (data moved with its strong version, or observed without versions) is not
rebuilt: the reaction follows the fold's taints and makes none of its own. A partition of the job that reads
the changed ref and failed (its own error or check, or upstream) is wanted again too: fixed input data, or a
failed upstream now Live, is what it waited for, and no person has to ask.

`on_source_arrival`: a source partition observed for the first time (no earlier instance of it was ever
Live) wants the job's partitions that read it. By default the graph inverts the job's pattern: each output
pattern whose fields the source's pattern also has is filled from the source ref, and kept if the job's
`inputs` of it name the source ref. Give `affected(source_ref) -> refs` when that cannot work (a weekly
reading seven days).

Evaluation is incremental: `Reactor.read` takes the log's events since the last step (never a scan of the
partitions); `changes_in` turns them into instance changes; `Reactor.due` debounces them per (job, wanted
ref) within each reaction's window and fires at most `max_per_step` wants a step, oldest due first, the
rest kept for the next step, never dropped. A firing stays pending until its want is in the state (an
append that conflicted is simply fired again). Each firing is one `ReactionFired` with one want whose id is
derived from the cause (state/fold/reactions.py), so two orchestrators never fire the same reaction twice.
Only the owner of the wanted ref's bucket fires it.

`on_code_change`: the job's Live partitions built by another code version than its current one (stale,
state/queries/staleness.py) are tainted and wanted again, newest partitions first (oldest last), at most
`max_per_step` a step: the taint (guarded by the instance it names, and cascading to what was built from
it, as any taint does; out of date rather than wrong, so each instance whose job serves stale data stays
readable until its rebuild goes Live) and the `ReactionFired` go in one append, so the want rebuilds the partition
instead of finding it Live. Nothing upstream is touched. It is evaluated on steps after the log moved (the
index of runs by version reads only the job's runs of other versions), not on idle ones.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from partbuild.orchestrator.declarations import DeclarationError
from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.fold.reactions import KIND_NAMES
from partbuild.state.fold.records import InstanceState
from partbuild.state.fold.registry import MAKES_LIVE
from partbuild.state.log.events import envelope

if TYPE_CHECKING:
    from partbuild.orchestrator.graph import Graph, Job, PartitionPattern
    from partbuild.state.fold.build_state import BuildState
    from partbuild.state.fold.records import Instance

logger = logging.getLogger("partbuild")

MAX_PER_STEP = 200  # firings a step; the rest wait for the next one
MAX_WALK = 32  # earlier instances of a ref looked at to find what its readers were built from
MAX_TRIES = 3  # a firing the fold keeps rejecting is given up after this many appends that landed (logged)
_WATCHED = frozenset(MAKES_LIVE)  # the events that may be changes: registry rows that can make an instance Live
_ONCE_LIVE = frozenset({InstanceState.LIVE, InstanceState.TAINTED})
_FAILED_STATES = frozenset({InstanceState.FAILED, InstanceState.UPSTREAM_FAILED})


class ReactionError(DeclarationError):
    """A reaction that cannot be declared (its message says why)."""


Affected = Callable[[str], Iterable[str]]


class AffectedError(Exception):
    """A declaration's `affected(source_ref)` raised: what its reaction owes for that change is unknown yet."""

    def __init__(self, job: str, kind: int, source_ref: str, error: str) -> None:
        super().__init__(f"affected({source_ref!r}) of job {job}'s {KIND_NAMES[kind]} raised {error}")
        self.job, self.kind, self.source_ref = job, kind, source_ref


@dataclass(frozen=True)
class Reaction:
    """What makes a job want its partitions again: `kind` (pb.ReactionKind), quiet for `debounce` first."""

    kind: pb.ReactionKind
    debounce: dt.timedelta = dt.timedelta(0)
    affected: Affected | None = None  # on_source_arrival: source ref -> the job's refs that read it
    ttl: dt.timedelta | None = None
    comment: str = ""

    def __post_init__(self) -> None:
        if self.kind not in KIND_NAMES:
            raise ReactionError(f"reaction kind {self.kind!r} is not one of {sorted(KIND_NAMES)}")
        if not isinstance(self.debounce, dt.timedelta) or self.debounce < dt.timedelta(0):
            raise ReactionError(f"{self.name}: debounce is a timedelta of at least zero, not {self.debounce!r}")
        if self.affected is not None and not callable(self.affected):
            raise ReactionError(f"{self.name}: affected must be a function of a source ref")

    @property
    def name(self) -> str:
        return KIND_NAMES[self.kind]

    @property
    def inverts_pattern(self) -> bool:
        """Whether the graph must invert the job's pattern to find what a source ref affects."""
        return self.kind == pb.REACTION_KIND_SOURCE_ARRIVAL and self.affected is None

    @property
    def debounce_ms(self) -> int:
        return int(self.debounce.total_seconds() * 1000)


def on_upstream_change(
    debounce: dt.timedelta = dt.timedelta(0), ttl: dt.timedelta | None = None, comment: str = ""
) -> Reaction:
    """Want the job's partitions whose inputs got a new Live instance (see the module's docstring)."""
    return Reaction(pb.REACTION_KIND_UPSTREAM_CHANGE, debounce, None, ttl, comment)


def on_source_arrival(
    debounce: dt.timedelta = dt.timedelta(0),
    affected: Affected | None = None,
    ttl: dt.timedelta | None = None,
    comment: str = "",
) -> Reaction:
    """Want the job's partitions that read a source partition observed for the first time."""
    return Reaction(pb.REACTION_KIND_SOURCE_ARRIVAL, debounce, affected, ttl, comment)


def on_code_change(ttl: dt.timedelta | None = None, comment: str = "") -> Reaction:
    """Taint and want again the job's Live partitions built by another code version (see the module's docstring)."""
    return Reaction(pb.REACTION_KIND_CODE_CHANGE, dt.timedelta(0), None, ttl, comment)


def reaction_problem(job: Job, reactions: Sequence[object]) -> str | None:
    """Why a job's reactions cannot be declared, or None."""
    if not all(isinstance(reaction, Reaction) for reaction in reactions):
        return (
            "reactions must be made by on_upstream_change(), on_source_arrival() or on_code_change() "
            "(orchestrator/reactions.py)"
        )
    kinds = [reaction.kind for reaction in reactions]  # type: ignore[attr-defined]
    if len(set(kinds)) != len(kinds):
        return "a reaction kind is declared twice"
    return None


@dataclass(frozen=True)
class Change:
    """A partition got a new Live instance: `uuid`, in place of `previous` ("" : first observed)."""

    ref: str
    uuid: str
    previous: str
    seq: int
    at_ms: int = 0  # the time of the event that made it (a debounce window starts there)


def changes_in(state: BuildState, events: Iterable[tuple[int, pb.Event]]) -> list[Change]:
    """The instance changes the folded `events` made (rejected ones made none), the last per ref."""
    instances, canonical = state.instances, state.canonical
    found: dict[str, Change] = {}
    for seq, event in events:
        row = MAKES_LIVE.get(event.WhichOneof("payload") or "")
        if row is None:
            continue
        for ref in row.refs(state, row.message(event)):
            uuid = canonical.get(ref)
            instance = instances.get(uuid) if uuid is not None else None
            if instance is None or instance.state != InstanceState.LIVE or instance.updated_seq < seq:
                continue  # rejected, or changed again later in the batch (that event says so)
            previous = _built_from_before(state, instance)
            previous_uuid = previous.uuid if previous is not None else ""
            found[ref] = Change(ref, instance.uuid, previous_uuid, seq, event.timestamp_ms)
    return [*found.values()]


def _built_from_before(state: BuildState, instance: Instance) -> Instance | None:
    """The earlier instance of the ref this one replaces for its readers: the nearest that was Live once (Live
    still, or tainted) and fed a build, else the nearest Live once; None if none was (a first arrival).

    Versions v1, v2, v3 observed before anything read v2: v3 replaces v1, what the daily was built from, so a
    debounced reaction restarts its window and names v3 (was v1).
    """
    instances = state.instances
    nearest: Instance | None = None
    uuid = instance.previous_uuid
    steps = 0
    while uuid is not None and (earlier := instances.get(uuid)) is not None and steps < MAX_WALK:
        if earlier.state in _ONCE_LIVE:
            if earlier.consumers:
                return earlier
            nearest = nearest or earlier
        uuid = earlier.previous_uuid
        steps += 1
    return nearest


def code_change_events(
    label: str,
    reaction: Reaction,
    instance: Instance,
    built: str,
    current: str,
    want_id: str,
    now_ms: int,
    source: pb.EventSource,
) -> list[pb.Event]:
    """The taint of a stale instance (only while it is canonical) and the firing that wants its ref again."""
    reason = f"code version of job {label} changed: built by {built}, the job's is {current} (on_code_change)"
    # Out of date, not wrong: the fold keeps it serving, stale, until the rebuild goes Live, unless its job withdraws.
    taint = pb.PartitionTaint(partition_ref=instance.ref, reason=reason, instance_uuid=instance.uuid, keep_serving=True)
    want = pb.WantCreate(
        want_id=want_id,
        partition_refs=[instance.ref],
        ttl_seconds=int(reaction.ttl.total_seconds()) if reaction.ttl is not None else 0,
        comment=reaction.comment,
    )
    fired = pb.ReactionFired(
        job=label,
        kind=reaction.kind,
        cause_ref=instance.ref,
        cause_instance_uuid=instance.uuid,
        want=want,
        built_version=built,
        current_version=current,
    )
    return [envelope(taint, source=source, timestamp_ms=now_ms), envelope(fired, source=source, timestamp_ms=now_ms)]


def affected_refs(graph: Graph, job: Job, reaction: Reaction, source_ref: str) -> list[str]:
    """The job's refs that read `source_ref`: the declaration's function, or the pattern inverted."""
    if reaction.affected is not None:
        try:
            refs = [ref for ref in reaction.affected(source_ref) if isinstance(ref, str)]
        except Exception as exc:  # the user's function: the reactor records it and reads the change again later
            raise AffectedError(job.label, reaction.kind, source_ref, f"{type(exc).__name__}: {exc}") from exc
        return [ref for ref in dict.fromkeys(refs) if _produced_by(graph, ref, job)]
    fields = graph.resolve(source_ref).partition.fields
    found = []
    for pattern in job.patterns:
        if set(pattern.fields) <= set(fields):
            ref = pattern.format(**fields)
            if _produced_by(graph, ref, job) and source_ref in graph.inputs_of(ref):
                found.append(ref)
    return found


def invertible(job: Job, source_patterns: Iterable[PartitionPattern]) -> bool:
    """Whether some output pattern of the job can be filled from some source's fields (the default inversion)."""
    return any(set(output.fields) <= set(pattern.fields) for output in job.patterns for pattern in source_patterns)


def _produced_by(graph: Graph, ref: str, job: Job) -> bool:
    return _producer(graph, ref) is job


def _producer(graph: Graph, ref: str) -> object | None:
    """The job or source that produces `ref`, or None when none (or several) does."""
    try:
        return graph.resolve(ref).producer
    except DeclarationError:  # the graph's GraphError: a ref it cannot place (graph.py imports this module)
        return None


def _live(state: BuildState, ref: str) -> bool:
    uuid = state.canonical.get(ref)
    return uuid is not None and state.instances[uuid].state == InstanceState.LIVE
