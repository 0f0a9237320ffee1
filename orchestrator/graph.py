"""Graph declarations: partition patterns, jobs, source datasets, and resolving a ref to its producer.

Patterns hold typed fields (`{date:date}`, `{n:int}`; more by `register_field_type`).
A graph is a set of jobs and source datasets. Every ref a want names must be
produced by exactly one of them; `Graph.resolve` says which, or raises
`GraphError` with the reason (nobody produces it, or two claim it).
"""

from __future__ import annotations

import datetime as dt
import importlib.util
import re
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from partbuild.orchestrator.checks import Check
from partbuild.orchestrator.code_versions import code_version_problem, derived_code_version, graph_files
from partbuild.orchestrator.declarations import (
    DeclarationError,
    bool_problem,
    callable_problem,
    graph_file_error,
    int_problem,
    number_problem,
    sequence_problem,
    text_problem,
)
from partbuild.orchestrator.publish import Publish, as_publish, publish_problem, table_conflict
from partbuild.orchestrator.reactions import Reaction, invertible, reaction_problem
from partbuild.orchestrator.schedules import Schedule
from partbuild.state.fold.validation import id_problem

if TYPE_CHECKING:
    from partbuild.orchestrator.context import JobContext
    from partbuild.orchestrator.sources.discovery import Discovery


class GraphError(DeclarationError):
    """A graph that cannot be loaded, or a ref it cannot place."""


class GraphFileError(GraphError):
    """A graph file whose code raised: one line naming the file, the line, the declaration and what was wrong.

    Its cause is the exception the file raised (with the traceback `--debug` prints).
    """


@dataclass(frozen=True)
class _FieldType:
    regex: str
    parse: Callable[[str], Any]
    format: Callable[[Any], str]


def _format_month(day: dt.date) -> str:
    return f"{day.year:04d}-{day.month:02d}"  # not strftime: %Y does not pad years before 1000


FIELD_TYPES: dict[str, _FieldType] = {
    "str": _FieldType(r"[^/]+", str, str),
    # No leading zeros: `x/007` and `x/7` must not be two refs of one partition.
    "int": _FieldType(r"0|-?[1-9][0-9]*", int, str),
    "date": _FieldType(r"[0-9]{4}-[0-9]{2}-[0-9]{2}", dt.date.fromisoformat, dt.date.isoformat),
    # A month is the date of its first day (`2026-01`); a date of another day formats as its month.
    "month": _FieldType(r"[0-9]{4}-[0-9]{2}", lambda text: dt.date.fromisoformat(f"{text}-01"), _format_month),
    "year": _FieldType(r"[0-9]{4}", int, lambda year: f"{year:04d}"),
    # An hour is a naive datetime (UTC by convention) on the hour: `2026-01-05T13`.
    "hour": _FieldType(
        r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}",
        lambda text: dt.datetime.strptime(text, "%Y-%m-%dT%H"),
        lambda moment: f"{moment.year:04d}-{moment.month:02d}-{moment.day:02d}T{moment.hour:02d}",
    ),
}


def register_field_type(name: str, regex: str, parse: Callable[[str], Any], format: Callable[[Any], str]) -> None:
    """Make `{field:name}` usable in patterns: `regex` matches the text, `parse`/`format` convert it.

    `parse` may raise ValueError for text the regex admits but the type refuses. Registering a
    name again replaces it (a module imported twice registers twice); patterns built before keep theirs.
    """
    if not isinstance(name, str) or not re.fullmatch(r"[a-z]+", name):
        raise GraphError(f"field type name {name!r} must be lowercase letters")
    if (
        problem := text_problem(regex, "the regex")
        or callable_problem(parse, "parse")
        or callable_problem(format, "format")
    ):
        raise GraphError(f"field type {name!r}: {problem}")
    if "/" in regex or "(" in regex:
        raise GraphError(f"field type {name!r}: the regex must not match '/' nor hold groups")
    try:
        re.compile(regex)
    except re.error as exc:
        raise GraphError(f"field type {name!r}: the regex does not compile ({exc})") from None
    FIELD_TYPES[name] = _FieldType(regex, parse, format)


_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)(?::([a-z]+))?\}")


class PartitionPattern:
    """A ref template with typed fields, e.g. `agg/daily_clicks/date={date:date}`.

    Field types: str (default, no slash), int, date (YYYY-MM-DD), month (YYYY-MM, a date on the 1st),
    year (YYYY, an int), hour (YYYY-MM-DDTHH, a datetime on the hour), and any registered with
    `register_field_type` (the clicks example adds isoweek, YYYY-Www).
    """

    def __init__(self, template: str) -> None:
        if not isinstance(template, str):
            raise GraphError(f"pattern {template!r} must be a str")
        self.template = template
        self.fields: dict[str, _FieldType] = {}
        parts, position = [], 0
        for match in _PLACEHOLDER.finditer(template):
            name, type_name = match.group(1), match.group(2) or "str"
            if type_name not in FIELD_TYPES:
                raise GraphError(f"pattern {template!r}: unknown field type {type_name!r} (use {sorted(FIELD_TYPES)})")
            if name in self.fields:
                raise GraphError(f"pattern {template!r}: field {name!r} appears twice")
            self.fields[name] = FIELD_TYPES[type_name]
            parts.append(re.escape(template[position : match.start()]))
            parts.append(f"(?P<{name}>{self.fields[name].regex})")
            position = match.end()
        parts.append(re.escape(template[position:]))
        if "{" in _PLACEHOLDER.sub("", template) or "}" in _PLACEHOLDER.sub("", template):
            raise GraphError(f"pattern {template!r}: unbalanced braces")
        self._regex = re.compile("".join(parts))
        # The literal text before the first field: a cheap pre-filter when resolving refs.
        first = _PLACEHOLDER.search(template)
        self.prefix = template[: first.start()] if first else template

    def match(self, ref: str) -> dict[str, Any] | None:
        """The typed fields of `ref`, or None if it does not fit this pattern."""
        found = self._regex.fullmatch(ref)
        if found is None:
            return None
        try:
            return {name: kind.parse(found.group(name)) for name, kind in self.fields.items()}
        except ValueError:
            return None  # e.g. date=2026-02-30 has the shape but is no date

    def format(self, **values: Any) -> str:
        """The ref for these field values."""
        missing = set(self.fields) - set(values)
        if missing:
            raise GraphError(f"pattern {self.template!r} needs {sorted(missing)}")
        rendered = {name: kind.format(values[name]) for name, kind in self.fields.items()}
        return _PLACEHOLDER.sub(lambda m: rendered[m.group(1)], self.template)

    def __repr__(self) -> str:
        return f"PartitionPattern({self.template!r})"


@dataclass(frozen=True)
class Partition:
    """A ref together with the typed fields its pattern extracted."""

    ref: str
    fields: Mapping[str, Any]

    def __getitem__(self, name: str) -> Any:
        return self.fields[name]


@dataclass(frozen=True)
class RetryPolicy:
    """How often a retryable failure is retried, and how long to wait before each retry."""

    max_attempts: int = 3
    backoff_ms: int = 1_000
    multiplier: float = 2.0
    max_backoff_ms: int = 60_000

    def __post_init__(self) -> None:
        problem = (
            int_problem(self.max_attempts, "max_attempts", 1)
            or int_problem(self.backoff_ms, "backoff_ms", 0)
            or number_problem(self.multiplier, "multiplier", 1)
            or int_problem(self.max_backoff_ms, "max_backoff_ms", 0)
        )
        if problem:
            raise GraphError(f"retry policy: {problem}")

    def delay_ms(self, failures: int) -> int:
        """Wait before the attempt that follows `failures` failed ones."""
        if failures <= 0:
            return 0
        # The exponent is capped so huge failure counts cannot overflow the float power.
        return int(min(self.max_backoff_ms, self.backoff_ms * self.multiplier ** min(failures - 1, 64)))


JobFunction = Callable[["JobContext"], None]
STALE_POLICIES = ("serve", "withdraw")
InputsFunction = Callable[[Partition], Sequence[str]]


def _no_inputs(_: Partition) -> Sequence[str]:
    return ()


@dataclass(frozen=True)
class Job:
    """A PySpark job: the partitions it produces, what each reads, how it runs."""

    label: str
    outputs: Sequence[PartitionPattern | str]
    run: JobFunction
    inputs: InputsFunction = _no_inputs
    batch_size: int = 1  # how many partitions one run may build together
    max_concurrency: int = 1  # job runs of this job at once
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    # If set, a run also reads at most this many input bytes (the byte_count of its
    # partitions' Live inputs); a partition whose inputs alone exceed it runs alone.
    batch_bytes: int | None = None
    # Quality checks run on each output before the run's outcome is recorded (orchestrator/checks.py):
    # a failed blocking one keeps the instance from going Live.
    checks: Sequence[Check] = ()
    # A catalog table whose partitions follow this job's canonical Live instances (orchestrator/publish.py).
    publish: Publish | str | None = None
    # What makes it want its partitions again without anyone asking (orchestrator/reactions.py).
    reactions: Sequence[Reaction] = ()
    # What each run records as the code that built its instances; None: derived from `run`'s source and the
    # helpers, classes and constants it reaches in the graph's own files (comments and formatting leave it, a
    # change of that code moves it, libraries do not: see orchestrator/code_versions.py). Live instances built
    # by another version are stale (state/queries/staleness.py).
    code_version: str | None = None
    # Its runs use `ctx.spark`: a `partbuild run` with work to do starts the session in the background at
    # once, while it reads the log and decides, rather than when the first run asks (seconds later).
    uses_spark: bool = False
    # When an input gets new data or the code changes: "serve" keeps its Live instances readable, marked stale,
    # until a rebuilt successor passes its checks; "withdraw" taints them at once (where stale data is wrong).
    stale_policy: str = "serve"

    def __post_init__(self) -> None:
        if not isinstance(self.label, str) or not self.label or "/" in self.label:
            raise GraphError(f"job label {self.label!r} must be a non-empty str and contain no slash")
        if problem := _settings_problem(self):  # first: the rules below need the right types
            raise GraphError(f"job {self.label!r}: {problem}")
        object.__setattr__(self, "checks", tuple(self.checks))
        object.__setattr__(self, "reactions", tuple(self.reactions))
        if problem := reaction_problem(self, self.reactions):
            raise GraphError(f"job {self.label!r}: {problem}")
        names = [check.name for check in self.checks if isinstance(check, Check)]
        if len(names) != len(self.checks):
            raise GraphError(f"job {self.label!r}: checks must be Check objects (orchestrator/checks.py)")
        if len(set(names)) != len(names):
            raise GraphError(f"job {self.label!r}: two checks share a name")
        patterns = tuple(p if isinstance(p, PartitionPattern) else PartitionPattern(p) for p in self.outputs)
        object.__setattr__(self, "outputs", patterns)
        if not patterns:
            raise GraphError(f"job {self.label!r} declares no output patterns")
        if self.stale_policy not in STALE_POLICIES:
            raise GraphError(f"job {self.label!r}: stale_policy is 'serve' or 'withdraw', not {self.stale_policy!r}")
        limit = self.batch_bytes
        if limit is not None and (type(limit) is not int or limit < 1):  # type(): True is an int too
            raise GraphError(f"job {self.label!r}: batch_bytes must be None or an int of at least 1, not {limit!r}")
        object.__setattr__(self, "publish", as_publish(self.publish))
        if self.publish is not None and (problem := publish_problem(patterns)):
            raise GraphError(f"job {self.label!r}: {problem}")
        if self.code_version is None:
            object.__setattr__(self, "code_version", derived_code_version(self.run))
            if self.code_version is None:
                raise GraphError(f"job {self.label!r}: its run function has no source nor code; declare code_version")
        elif problem := code_version_problem(self.code_version):
            raise GraphError(f"job {self.label!r}: {problem}")

    @property
    def patterns(self) -> tuple[PartitionPattern, ...]:
        """`outputs` as `__post_init__` left them: patterns (the field takes strs too)."""
        return cast("tuple[PartitionPattern, ...]", self.outputs)


def _settings_problem(job: Job) -> str | None:
    """Why a job's settings are not of their types (a str of outputs, "10" for an int, ...), or None."""
    return (
        sequence_problem(job.outputs, "outputs")
        or next(filter(None, map(_output_problem, job.outputs)), None)
        or callable_problem(job.run, "run")
        or callable_problem(job.inputs, "inputs")
        or int_problem(job.batch_size, "batch_size", 1)
        or int_problem(job.max_concurrency, "max_concurrency", 1)
        or (None if isinstance(job.retry, RetryPolicy) else f"retry must be a RetryPolicy, not {job.retry!r}")
        or sequence_problem(job.checks, "checks")
        or sequence_problem(job.reactions, "reactions")
        or bool_problem(job.uses_spark, "uses_spark")
    )


def _output_problem(output: object) -> str | None:
    """Why an output is not a pattern (a str or a PartitionPattern), or None."""
    if isinstance(output, str | PartitionPattern):
        return None
    return f"an output must be a pattern (a str or a PartitionPattern), not {output!r}"


@dataclass(frozen=True)
class SourceDataset:
    """Data that arrives from outside (no job builds it), and how partbuild learns it is there.

    Two ways, either or both: `locate` returns the location of a present partition, or None
    while it is absent (asked for wanted partitions only); `discovery` scans a connector and
    records every complete partition with its size and version, so rewritten data is noticed
    (`orchestrator/sources/`).
    """

    name: str
    pattern: PartitionPattern | str
    locate: Callable[[Partition], str | None] | None = None
    discovery: Discovery | None = None

    def __post_init__(self) -> None:
        problem = id_problem("source name", self.name) if isinstance(self.name, str) else "source name must be a str"
        if problem:  # the fold's rule for the names its scan events carry
            raise GraphError(problem)
        if isinstance(self.pattern, str):
            object.__setattr__(self, "pattern", PartitionPattern(self.pattern))
        if problem := _source_problem(self):
            raise GraphError(f"source {self.name!r}: {problem}")
        if self.locate is None and self.discovery is None:
            raise GraphError(f"source {self.name!r} needs a locate function or a discovery (or both)")
        if self.discovery is not None and self.discovery.keys is not None:
            keys = PartitionPattern(self.discovery.keys)
            own = self.partition_pattern
            if {name: kind.regex for name, kind in keys.fields.items()} != {n: k.regex for n, k in own.fields.items()}:
                raise GraphError(
                    f"source {self.name!r}: the discovery's key pattern {keys.template!r} must have the fields "
                    f"of {own.template!r} with the same types"
                )

    @property
    def partition_pattern(self) -> PartitionPattern:
        """`pattern` as `__post_init__` left it: a PartitionPattern (the field takes a str too)."""
        return cast(PartitionPattern, self.pattern)


def _source_problem(source: SourceDataset) -> str | None:
    """Why a source's pattern, locate or discovery is not of its type, or None."""
    if not isinstance(source.pattern, PartitionPattern):
        return f"pattern must be a str or a PartitionPattern, not {source.pattern!r}"
    if problem := callable_problem(source.locate, "locate", optional=True):
        return problem
    if source.discovery is not None:
        from partbuild.orchestrator.sources.discovery import Discovery  # only for a source that has one

        if not isinstance(source.discovery, Discovery):
            return f"discovery must be a Discovery (orchestrator/sources/discovery.py), not {source.discovery!r}"
    return None


Producer = Job | SourceDataset


@dataclass(frozen=True)
class Resolution:
    producer: Producer
    partition: Partition


class Graph:
    """A validated set of jobs and source datasets."""

    def __init__(
        self, jobs: Iterable[Job], sources: Iterable[SourceDataset] = (), schedules: Iterable[Schedule] = ()
    ) -> None:
        self.jobs: dict[str, Job] = {}
        self.sources: dict[str, SourceDataset] = {}
        self.schedules: dict[str, Schedule] = {}
        for schedule in schedules:
            if not isinstance(schedule, Schedule):
                raise GraphError(f"schedules must be Schedule objects (orchestrator/schedules.py), not {schedule!r}")
            if schedule.name in self.schedules:
                raise GraphError(f"two schedules are named {schedule.name!r}")
            self.schedules[schedule.name] = schedule
        self._claims: list[tuple[PartitionPattern, Producer]] = []
        seen_templates: dict[str, str] = {}
        for job in jobs:
            if not isinstance(job, Job):
                raise GraphError(f"jobs must be Job objects, not {job!r}")
            if job.label in self.jobs:
                raise GraphError(f"two jobs are labelled {job.label!r}")
            self.jobs[job.label] = job
            for pattern in job.patterns:
                self._claim(pattern, job, f"job {job.label!r}", seen_templates)
        for source in sources:
            if not isinstance(source, SourceDataset):
                raise GraphError(f"sources must be SourceDataset objects, not {source!r}")
            if source.name in self.sources:
                raise GraphError(f"two source datasets are named {source.name!r}")
            self.sources[source.name] = source
            self._claim(source.partition_pattern, source, f"source {source.name!r}", seen_templates)
        published = ((job.label, job.publish) for job in self.jobs.values() if isinstance(job.publish, Publish))
        if conflict := table_conflict(published):
            raise GraphError(conflict)
        source_patterns = [source.partition_pattern for source in self.sources.values()]
        for job in self.jobs.values():
            if any(r.inverts_pattern for r in job.reactions) and not invertible(job, source_patterns):
                raise GraphError(
                    f"job {job.label!r}: on_source_arrival needs affected= (no output fits a source's fields)"
                )
        self._cache: dict[str, Resolution] = {}

    def _claim(self, pattern: PartitionPattern, producer: Producer, who: str, seen: dict[str, str]) -> None:
        # Same template up to field names: certainly the same refs. Overlaps between
        # different shapes (x/{a} and x/{n:int}) are caught when a ref is resolved.
        shape = _PLACEHOLDER.sub(lambda m: "{" + (m.group(2) or "str") + "}", pattern.template)
        if shape in seen:
            raise GraphError(f"{who} and {seen[shape]} both produce {pattern.template!r}")
        seen[shape] = who
        self._claims.append((pattern, producer))

    def resolve(self, ref: str) -> Resolution:
        """The one job or source that produces `ref`; GraphError if none or several do."""
        cached = self._cache.get(ref)
        if cached is not None:
            return cached
        found = []
        for pattern, producer in self._claims:
            if not ref.startswith(pattern.prefix):
                continue
            fields = pattern.match(ref)
            if fields is not None:
                found.append(Resolution(producer, Partition(ref, fields)))
        if not found:
            raise GraphError(f"no job or source dataset produces {ref!r}")
        if len(found) > 1:
            names = " and ".join(_producer_name(r.producer) for r in found)
            raise GraphError(f"{ref!r} is claimed by {names}")
        if len(self._cache) < 1_000_000:
            self._cache[ref] = found[0]
        return found[0]

    def inputs_of(self, ref: str) -> list[str]:
        """The refs a job reads to build `ref` (empty for source data)."""
        resolution = self.resolve(ref)
        if isinstance(resolution.producer, SourceDataset):
            return []
        return list(resolution.producer.inputs(resolution.partition))


def _producer_name(producer: Producer) -> str:
    return f"job {producer.label!r}" if isinstance(producer, Job) else f"source {producer.name!r}"


def load_graph(path: str | Path, attribute: str = "graph") -> Graph:
    """Import the Python file at `path` and return its `graph` (a Graph, or a function returning one).

    Whatever the file's code raises becomes a `GraphFileError` of one line (orchestrator/declarations.py).
    """
    path = Path(path)
    if not path.is_file():
        raise GraphError(f"no graph file at {path}")
    module_name = f"partbuild_graph_{abs(hash(path.resolve()))}"
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise GraphError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        with graph_files(path):  # derived code versions count the code under the graph file's directory
            spec.loader.exec_module(module)
            found = getattr(module, attribute, None)
            if callable(found) and not isinstance(found, Graph):
                found = found()
    except Exception as exc:  # the user's code, whatever it raised: one line, the traceback kept as its cause
        sys.modules.pop(module_name, None)
        raise GraphFileError(graph_file_error(path, exc)) from exc
    if not isinstance(found, Graph):
        raise GraphError(f"{path} defines no Graph named {attribute!r}")
    return found
