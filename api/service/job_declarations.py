"""What the served graph declares of its jobs, known without a log: pattern-level edges, checks, reactions, schedules.

A job's `inputs` is a function of a partition, so which producers a job reads is only known by asking it about
some partition. The declared edges ask it about synthetic partitions: for each output pattern and each anchor
time, every field gets a sample value of its type made from the anchor, found by trying the anchor's usual
renderings (`2026-01-05`, `2026-01`, `2026`, `2026-W02`, `2026-01-05T00`, `20260105`, `1`) in that order and
taking the first the type's regex and parser accept: a date is the day, a month its month, an hour its
midnight, an int the year, a registered type (the clicks example's isoweek) whatever rendering it reads. A str
field may hold anything (a carrier, or a week its inputs function parses), so a pattern with one is sampled
with `sample` and with each rendering in turn (every str field the same); at most `MAX_SAMPLES` per job.
Each input ref the answers name that resolves to one producer is an edge.

The anchors: the dates and datetimes the inputs function closes over, has as defaults, or names among its
module's globals (a graph over a range of days keeps its start there, and an inputs function may name
nothing outside that range), then today (UTC); at most `MAX_ANCHORS`. Nothing but `inputs` is called, and
only once per served graph: the graph never changes while served, so the answer is kept (`DeclaredGraph`).
Edges found this way are a sample, as the log's are: a job whose inputs name nothing for any anchor has no
declared edge (the log's partitions may still show one).

Schedules are graph-level: a want function is not called (it may be slow, or want differently each time),
so which jobs a schedule wants is what its last tick's want named, as of the seq read.
"""

from __future__ import annotations

import datetime as dt
import functools
import logging
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from partbuild.api.models.jobs import DeclaredCheckOut, DeclaredReactionOut, GraphScheduleOut
from partbuild.orchestrator.graph import FIELD_TYPES, Graph, GraphError, Job, PartitionPattern, SourceDataset
from partbuild.state.fold.view import StateView

logger = logging.getLogger("partbuild")

MAX_ANCHORS = 4  # sample partitions asked about per output pattern of a job
MAX_SAMPLES = 64  # sample partitions of one job in all
MAX_INPUTS = 10_000  # input refs of one sample resolved to their producers
MAX_WANT_REFS = 1_000  # refs of a schedule's last want resolved to their producers
STR_SAMPLE = "sample"


@dataclass(frozen=True)
class DeclaredGraph:
    """What the graph declares: its edges (producer, job) in graph order, checks and reactions."""

    edges: tuple[tuple[str, str], ...]
    checks: tuple[DeclaredCheckOut, ...]
    reactions: tuple[DeclaredReactionOut, ...]


def declared_graph(graph: Graph, today: dt.date | None = None) -> DeclaredGraph:
    """The graph's declared edges (see the module), and each job's checks and reactions."""
    anchor_today = today or dt.datetime.now(dt.UTC).date()
    edges: dict[tuple[str, str], None] = {}
    checks: list[DeclaredCheckOut] = []
    reactions: list[DeclaredReactionOut] = []
    for job in graph.jobs.values():
        for producer in declared_producers(graph, job, anchor_today):
            edges[(producer, job.label)] = None
        checks += [
            DeclaredCheckOut(job=job.label, name=c.name, blocking=c.blocking, retryable=c.retryable) for c in job.checks
        ]
        reactions += [DeclaredReactionOut(job=job.label, kind=r.name, debounce_ms=r.debounce_ms) for r in job.reactions]
    return DeclaredGraph(tuple(edges), tuple(checks), tuple(reactions))


def declared_producers(graph: Graph, job: Job, today: dt.date) -> list[str]:
    """The jobs and sources that what `job` reads for its sample partitions resolves to, in the order found."""
    found: dict[str, None] = {}
    for ref in sample_refs(graph, job, anchors(job.inputs, today)):
        found.update(dict.fromkeys(producers_read(graph, ref)))
    return list(found)


def sample_refs(graph: Graph, job: Job, times: Iterable[dt.datetime]) -> list[str]:
    """Refs of each output pattern of `job` per anchor time (those that resolve to `job`), without repeats: one,
    or one per rendering of the time for a pattern with str fields (a str may hold a week, a day...)."""
    refs: dict[str, None] = {}
    for moment in times:
        renderings = _renderings(moment)
        for pattern in job.patterns:
            has_str = any(kind is FIELD_TYPES["str"] for kind in pattern.fields.values())
            for text in renderings if has_str else renderings[-1:]:
                values = sample_values(pattern, moment, text)
                if values is None or len(refs) >= MAX_SAMPLES:
                    continue
                try:
                    ref = pattern.format(**values)
                    if graph.resolve(ref).producer is job:
                        refs[ref] = None
                except (GraphError, ValueError, TypeError):  # a registered type's formatter may refuse its sample
                    continue
    return list(refs)


def producers_read(graph: Graph, ref: str) -> list[str]:
    """The jobs and sources producing what building `ref` reads (unresolvable inputs are left out)."""
    found: dict[str, None] = {}
    try:
        inputs = graph.inputs_of(ref)
    except Exception as exc:  # the user's inputs function, whatever it raised for an odd ref: no edge from it
        logger.debug("inputs of %r raised %s: no edge drawn from it", ref, exc)
        return []
    for input_ref in inputs[:MAX_INPUTS]:
        try:
            producer = graph.resolve(input_ref).producer
        except (GraphError, TypeError):
            continue
        found[producer_name(producer)] = None
    return list(found)


def producer_name(producer: Job | SourceDataset) -> str:
    return producer.label if isinstance(producer, Job) else producer.name


def anchors(inputs: Callable[..., Any], today: dt.date) -> list[dt.datetime]:
    """The times to sample a job's partitions at: the dates its inputs function holds (closure, defaults, the
    globals it names; a partial's arguments), then `today`; at most `MAX_ANCHORS`, naive (hours are naive)."""
    found: dict[dt.datetime, None] = {}
    for value in _held_values(inputs):
        moment = _as_time(value)
        if moment is not None and len(found) < MAX_ANCHORS - 1:
            found[moment] = None
    found[dt.datetime(today.year, today.month, today.day)] = None
    return list(found)


def _held_values(function: Any) -> Iterator[Any]:
    """The values a function holds without being called: a partial's arguments, closure cells, defaults, and the
    module globals its code names (one level: not those of the functions it calls)."""
    if isinstance(function, functools.partial):
        yield from function.args
        yield from function.keywords.values()
        function = function.func
    for cell in getattr(function, "__closure__", None) or ():
        try:
            yield cell.cell_contents
        except ValueError:  # an empty cell
            continue
    yield from getattr(function, "__defaults__", None) or ()
    yield from (getattr(function, "__kwdefaults__", None) or {}).values()
    code, names = getattr(function, "__code__", None), getattr(function, "__globals__", None)
    if code is not None and isinstance(names, dict):
        yield from (names[name] for name in code.co_names if name in names)


def _as_time(value: Any) -> dt.datetime | None:
    if isinstance(value, dt.datetime):
        return value.replace(tzinfo=None, minute=0, second=0, microsecond=0)
    if isinstance(value, dt.date):
        return dt.datetime(value.year, value.month, value.day)
    return None


def sample_values(pattern: PartitionPattern, moment: dt.datetime, text: str = STR_SAMPLE) -> dict[str, Any] | None:
    """A value of each field of `pattern` made from `moment`, `text` for its str fields (None: a field's type reads
    none of the time's renderings)."""
    values: dict[str, Any] = {}
    renderings = _renderings(moment)
    for name, kind in pattern.fields.items():
        if kind is FIELD_TYPES["str"]:
            values[name] = text
            continue
        for text in renderings:
            if re.fullmatch(kind.regex, text):
                try:
                    values[name] = kind.parse(text)
                    break
                except (ValueError, TypeError):
                    continue
        else:
            return None
    return values


def _renderings(moment: dt.datetime) -> list[str]:
    year, week, _ = moment.isocalendar()
    day = moment.date().isoformat()
    return [
        day,
        f"{moment.year:04d}-{moment.month:02d}",
        f"{moment.year:04d}",
        f"{year:04d}-W{week:02d}",
        f"{day}T{moment.hour:02d}",
        day.replace("-", ""),
        "1",
        STR_SAMPLE,
    ]


def schedules_out(
    graph: Graph | None, state: StateView, resolve: Callable[[str], str | None]
) -> list[GraphScheduleOut]:
    """The graph's schedules and those only the log knows (as of the state's seq), by name; `resolve`: a ref's
    producer (None: none), for what each one's last tick wanted."""
    declared = graph.schedules if graph is not None else {}
    rows: Mapping[str, Any] = state.schedules
    out = []
    for name in sorted({*declared, *rows}):
        schedule, row = declared.get(name), rows.get(name)
        wanted: dict[str, None] = {}
        want = state.wants.get(row.last_want_id) if row is not None and row.last_want_id else None
        for ref in want.refs[:MAX_WANT_REFS] if want is not None else ():
            producer = resolve(ref)
            if producer is not None:
                wanted[producer] = None
        out.append(
            GraphScheduleOut(
                name=name,
                declared=schedule is not None,
                when=schedule.describe if schedule is not None else None,
                paused=row.paused if row is not None else False,
                ticks=row.ticks if row is not None else 0,
                last_want_jobs=list(wanted),
            )
        )
    return out
