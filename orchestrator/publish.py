"""Publishing a job's Live instances to a table of the Spark session's catalog (write-audit-publish's "publish").

`Job(..., publish=Publish("clicks.daily"))` (or `publish="clicks.daily"`) names a table `[db.]table`. The
fields of the job's one output pattern are the table's partition columns, in pattern order, each a STRING
holding the field's text as the ref spells it (`date=2026-01-01` -> `'2026-01-01'`, `n=7` -> `'7'`, an
`isoweek` -> `'2026-W01'`): every field type, registered ones included, maps the same way and a reader casts
if it wants a date. A data column named like a partition column (case-insensitively, as Spark compares) is
left out of the table: the partition's value is the ref's.

The table is a projection of the log, not a fact in it: no event records it. A `Publisher` keeps the catalog
equal to the state: each partition of a published job points at the location of the instance readers get
(`BuildState.served_instance`: its canonical instance while Live, or a stale Live one that keeps serving
while its successor is built, failed or blocked), and has no partition otherwise. A checked rebuild going
Live moves the partition (`SET LOCATION`); new upstream data leaves it where it is (stale) until then; a
taint withdraws it until a rebuild is Live; an instance whose blocking check failed never was Live, so it is
never shown. The table is EXTERNAL: dropping a partition never deletes an instance's files.

Changes are found incrementally, never by a scan of every partition per step: a ref's canonical pointer only
moves to a newly created instance, and a job's instance only goes Live at the outcome of a run, so the refs to
look at after a step are those of the instances created since the last one and of the published jobs' runs
that were active then or were created since. (An operator's `PartitionObserved` of a job's Missing ref, which
makes it Live with neither, is picked up at the next start or the ref's next change.) On start every ref of a
published job is reconciled once, and, for a table that exists (a Hive metastore keeps it across restarts;
the in-memory catalog does not), partitions the log has nothing Live for are dropped.

The publisher runs in the orchestrator's thread, after a step's decisions and dispatch, on the process's
lazy session (the one jobs use): a graph with no published job has no publisher, and one with nothing to
publish starts no Spark for it (on start over a log that knows refs of a published job, it does, to
reconcile). Catalog calls hold that thread: a slow metastore slows the steps that publish, not the runs. A
failed call is logged and counted (`failures`) and its ref tried again after a backoff (1 s, doubling, at
most a minute); it never stops the loop and never touches the log. Every orchestrator publishing to one
shared metastore (a worker group, bucket workers) follows the same log, so they converge on the same table.

Statements take every value (table name, partition values, locations) as a parameter marker
(`IDENTIFIER(:table)`, `:p0`, `:location`; tested with Spark 4), so no SQL is built from a ref; the column
names spliced in are pattern field names (`[A-Za-z_][A-Za-z0-9_]*`) or Spark's own `StructType.toDDL`.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import unquote

from partbuild.orchestrator.declarations import DeclarationError
from partbuild.state.fold.cold import canonical_instances, created_since
from partbuild.state.fold.records import ACTIVE_RUN_STATES, InstanceState
from partbuild.state.store.cold_rows import refs_known

if TYPE_CHECKING:
    from partbuild.orchestrator.graph import Graph
    from partbuild.orchestrator.spark import LazySpark
    from partbuild.state.fold.build_state import BuildState
    from partbuild.state.log.live import LiveState
    from partbuild.state.store.records import RecordStore

logger = logging.getLogger("partbuild.publish")

_NAME = r"[A-Za-z_][A-Za-z0-9_]{0,127}"
_TABLE = re.compile(rf"(?:{_NAME}\.)?{_NAME}")
FORMATS = ("parquet", "orc")  # the file formats a table can be declared over (what the jobs write)


class PublishDeclarationError(DeclarationError):
    """A `Publish` that cannot be declared (a bad table name or format)."""


@dataclass(frozen=True)
class Publish:
    """Publish the job's Live instances as the partitions of `table` (`[db.]table`), files in `format`.

    A missing table is created (EXTERNAL, under `<warehouse>/_tables/`) from the schema of the first
    instance published; a missing database likewise (`<warehouse>/_tables/<db>.db`).
    """

    table: str
    format: str = "parquet"

    def __post_init__(self) -> None:
        if not isinstance(self.table, str) or not _TABLE.fullmatch(self.table):
            raise PublishDeclarationError(
                f"publish table {self.table!r} must be [db.]table, each part letters, digits or _ "
                "(not starting with a digit, at most 128)"
            )
        if self.format not in FORMATS:
            raise PublishDeclarationError(f"publish format {self.format!r} must be one of {', '.join(FORMATS)}")

    @property
    def database(self) -> str | None:
        return self.table.split(".")[0] if "." in self.table else None


class _Pattern(Protocol):
    @property
    def template(self) -> str: ...
    @property
    def prefix(self) -> str: ...
    @property
    def fields(self) -> Mapping[str, Any]: ...

    def match(self, ref: str) -> dict[str, Any] | None: ...


def as_publish(value: Publish | str | None) -> Publish | None:
    """A job's `publish` argument as a `Publish` (a bare string names the table)."""
    if value is None or isinstance(value, Publish):
        return value
    if isinstance(value, str):
        return Publish(value)
    raise PublishDeclarationError(f"publish must be a Publish, a table name or None, not {type(value).__name__}")


def publish_problem(patterns: Sequence[_Pattern]) -> str | None:
    """Why a job with these output patterns cannot publish (None: it can).

    One pattern, so one ref is one partition of the table; at least one field, so there are partitions;
    field names distinct as Spark compares column names (case-insensitively).
    """
    if len(patterns) != 1:
        return "a published job must have exactly one output pattern (its fields are the table's partition columns)"
    fields = [name.lower() for name in patterns[0].fields]
    if not fields:
        return f"the published pattern {patterns[0].template!r} has no field to partition the table by"
    if len(set(fields)) != len(fields):
        return f"the published pattern {patterns[0].template!r} has fields that differ only in case"
    return None


def table_conflict(publishes: Iterable[tuple[str, Publish]]) -> str | None:
    """Two jobs publishing one table (names compared as Spark does, case-insensitively), if any."""
    seen: dict[str, str] = {}
    for label, publish in publishes:
        key = publish.table.lower()
        if key in seen:
            return f"jobs {seen[key]!r} and {label!r} both publish table {publish.table!r}"
        seen[key] = label
    return None


@dataclass(frozen=True)
class Table:
    """A published job's table: its declaration, the job's pattern, the partition columns (its fields, in order)."""

    publish: Publish
    pattern: _Pattern
    fields: tuple[str, ...]

    def values(self, ref: str) -> tuple[str, ...]:
        """The partition values of `ref`: each field's text as the ref spells it (the pattern's type checked it)."""
        parsed = self.pattern.match(ref)
        if parsed is None:
            raise ValueError(f"{ref!r} does not fit {self.pattern.template!r}")
        kinds = self.pattern.fields
        return tuple(kinds[name].format(parsed[name]) for name in self.fields)


class Publisher:
    """Keeps the catalog tables of a graph's published jobs equal to their canonical Live instances."""

    def __init__(self, targets: Mapping[str, Table], spark: LazySpark, warehouse: str) -> None:
        self._targets = dict(targets)  # job label -> its table
        self._spark = spark
        self._warehouse = warehouse.rstrip("/")
        self._seen_seq = -1  # the head last looked at; -1: not yet (the first step reconciles every ref)
        self.records: RecordStore | None = None  # a working set's rows, where its cold refs are (`_every_ref`)
        self._watched: dict[str, None] = {}  # runs of published jobs active at _seen_seq
        self._serving: dict[str, str] = {}  # the state's stale instances still serving, at _seen_seq
        self._shown: dict[str, str] = {}  # ref -> the location its partition points at (absent: no partition)
        self._retry: dict[str, None] = {}  # refs whose last change failed: looked at again each step
        self._unswept = {target.publish.table for target in self._targets.values()}  # start sweep still due
        self._ready: set[str] = set()  # tables known to exist
        self._backoff_s = 0.0  # after a failure: how long until the next try (doubling, at most a minute)
        self._retry_after = 0.0  # time.monotonic() before which nothing is tried
        self.applied = 0  # partitions added, moved or dropped
        self.failures = 0  # catalog calls that failed (each retried at a later step)

    @classmethod
    def for_graph(cls, graph: Graph, spark: LazySpark, warehouse: str) -> Publisher | None:
        """The graph's publisher, or None when no job publishes (then nothing here ever runs)."""
        targets = {}
        for label, job in graph.jobs.items():
            if isinstance(job.publish, Publish):  # a str too before `Job.__post_init__`
                pattern = job.patterns[0]
                targets[label] = Table(job.publish, pattern, tuple(pattern.fields))
        return cls(targets, spark, warehouse) if targets else None

    @property
    def tables(self) -> Mapping[str, Table]:
        """Job label -> the table it publishes."""
        return self._targets

    # ----------------------------------------------------------------- finding what changed

    def step(self, live: LiveState) -> int:
        """Bring the tables up to the live state; returns how many partitions changed. Never raises.

        After a failure, nothing is tried before the backoff ends (a metastore that is down is not asked
        every 50 ms); what changed meanwhile is found then, since `_seen_seq` stays where it was.
        """
        if time.monotonic() < self._retry_after:
            return 0
        try:
            return self._step(live)
        except Exception:  # a bug here must not stop the loop that builds: say it, back off, go on
            self.failures += 1
            self._back_off()
            logger.exception("publishing failed")
            return 0

    def _back_off(self) -> None:
        self._backoff_s = min(60.0, self._backoff_s * 2) if self._backoff_s else 1.0
        self._retry_after = time.monotonic() + self._backoff_s

    def _step(self, live: LiveState) -> int:
        if self._seen_seq == live.head_seq and not self._retry and not self._unswept:
            return 0
        with live.read() as state:
            starting = self._seen_seq < 0
            refs = self._every_ref(state) if starting else self._changed_refs(state)
            refs.update(self._retry)
            # A stale instance withdrawn while its successor is canonical makes no instance: compare who serves.
            serving = state.serving
            refs.update((ref, None) for ref in self._serving.keys() ^ serving.keys())
            self._serving = dict(serving)
            wanted = self._wanted(state, refs)
            self._watched = {
                run_id: None for run_id in state.active_run_ids if state.job_runs[run_id].job_label in self._targets
            }
            self._seen_seq = state.head_seq
        if starting:  # a job the log knows no ref of has nothing to reconcile: start no Spark for it
            known = {label for label, _ in wanted.values()}
            self._unswept = {t.publish.table for label, t in self._targets.items() if label in known}
        retry = self._retry
        self._retry = {}
        changed = self._apply(
            [
                (ref, label, location)
                for ref, (label, location) in wanted.items()
                if label is not None and (ref in retry or location != self._shown.get(ref) or (starting and location))
            ]
        )
        if self._unswept:
            self._sweep()
        if self._retry or self._unswept:
            self._back_off()
        else:
            self._backoff_s = 0.0
        return changed

    @property
    def seen_seq(self) -> int:
        """The head last looked at (-1: not yet): what was created after it is still to be looked at."""
        return self._seen_seq

    def _every_ref(self, state: BuildState) -> dict[str, None]:
        """At start: every ref the state knows (a scan, once)."""
        return dict.fromkeys(refs_known(state, self.records))

    def _changed_refs(self, state: BuildState) -> dict[str, None]:
        """Refs whose canonical instance may have changed since `_seen_seq` (O(what happened since))."""
        seen, instances, runs = self._seen_seq, state.instances, state.job_runs
        refs = {instance.ref: None for instance in created_since(instances, seen)}
        watched = dict(self._watched)
        watched.update((run.job_run_id, None) for run in created_since(runs, seen) if run.job_label in self._targets)
        for run_id in watched:
            found = runs.get(run_id)
            if found is not None and found.state not in ACTIVE_RUN_STATES:
                refs.update((instances[uuid].ref, None) for uuid in found.instance_uuids if uuid in instances)
        return refs

    def _wanted(self, state: BuildState, refs: Iterable[str]) -> dict[str, tuple[str | None, str | None]]:
        """For each ref: (the publishing job's label or None, the location the table should show or None). The
        instance shown is the one readers get: the canonical one if Live, or a stale one serving until it is
        replaced (`served_instance`); a working set reads the canonical ones it left cold a chunk at a time,
        holding none (`canonical_instances`: at start every ref is looked at)."""
        labels = {ref: self._label_of(ref) for ref in refs}
        serving = state.serving
        shown = {ref: state.instances[uuid] for ref, label in labels.items() if label and (uuid := serving.get(ref))}
        rest = (ref for ref, label in labels.items() if label is not None and ref not in shown)
        shown.update((ref, one) for ref, one in canonical_instances(state, rest) if one.state == InstanceState.LIVE)
        return {ref: (label, shown[ref].location or None if ref in shown else None) for ref, label in labels.items()}

    def _label_of(self, ref: str) -> str | None:
        for label, target in self._targets.items():
            if ref.startswith(target.pattern.prefix) and target.pattern.match(ref) is not None:
                return label
        return None

    # ----------------------------------------------------------------- changing the catalog

    def _apply(self, changes: list[tuple[str, str, str | None]]) -> int:
        done = 0
        for ref, label, location in changes:
            target = self._targets[label]
            try:
                catalog = _Catalog(self._spark.get(), target)
                if location is None:
                    if self._table_exists(catalog):
                        catalog.drop(target.values(ref))
                else:
                    self._ensure_table(catalog, location)
                    catalog.point(target.values(ref), location)
            except Exception as exc:  # Spark down, a metastore hiccup: the next step tries again
                self.failures += 1
                self._retry[ref] = None
                self._ready.discard(target.publish.table)  # someone may have dropped it: look again, recreate
                logger.warning("publishing %s to table %s failed: %s", ref, target.publish.table, _first_line(exc))
                continue
            if self._shown.get(ref) != location:
                done += 1
            if location is None:  # no entry is no partition: memory only for what the tables show
                self._shown.pop(ref, None)
            else:
                self._shown[ref] = location
        self.applied += done
        return done

    def _table_exists(self, catalog: _Catalog) -> bool:
        table = catalog.target.publish.table
        if table not in self._ready and catalog.exists():
            self._ready.add(table)
        return table in self._ready

    def _ensure_table(self, catalog: _Catalog, location: str) -> None:
        if self._table_exists(catalog):
            return
        publish = catalog.target.publish
        if publish.database is not None:
            catalog.create_database(f"{self._warehouse}/_tables/{publish.database}.db")
        catalog.create(f"{self._warehouse}/_tables/{publish.table}", location)
        self._ready.add(publish.table)

    def _sweep(self) -> None:
        """At start: drop the partitions of an existing table that the log has nothing Live for.

        Every Live ref of a published job is shown or waits to be retried (the start reconciled them all,
        and each change since went through `_apply`), so those are kept; a failed sweep is retried.
        """
        for target in self._targets.values():
            table = target.publish.table
            if table not in self._unswept:
                continue
            keep = {target.values(ref) for ref in [*self._shown, *self._retry] if target.pattern.match(ref) is not None}
            try:
                catalog = _Catalog(self._spark.get(), target)
                if self._table_exists(catalog):
                    for values in catalog.partitions():
                        if values not in keep:
                            catalog.drop(values)
                            self.applied += 1
            except Exception as exc:
                self.failures += 1
                logger.warning("reconciling table %s failed: %s", table, _first_line(exc))
                continue
            self._unswept.discard(table)


class _Catalog:
    """The statements the publisher sends for one table, every value a parameter marker."""

    def __init__(self, session: Any, target: Table) -> None:
        if session is None:
            raise RuntimeError("this orchestrator has no Spark session to publish with")
        self.session = session
        self.target = target

    def _sql(self, text: str, **args: str) -> Any:
        return self.session.sql(text, args={"table": self.target.publish.table, **args})

    def _spec(self, values: tuple[str, ...]) -> tuple[str, dict[str, str]]:
        spec = ", ".join(f"`{name}` = :p{index}" for index, name in enumerate(self.target.fields))
        return spec, {f"p{index}": value for index, value in enumerate(values)}

    def exists(self) -> bool:
        return bool(self.session.catalog.tableExists(self.target.publish.table))

    def create_database(self, location: str) -> None:
        self.session.sql(
            "CREATE DATABASE IF NOT EXISTS IDENTIFIER(:db) LOCATION :location",
            args={"db": self.target.publish.database, "location": location},
        )

    def create(self, location: str, first: str) -> None:
        """The table, from the schema of the instance at `first`, partition columns last (as Spark lists them)."""
        from pyspark.sql.types import StructType

        publish, fields = self.target.publish, self.target.fields
        schema = self.session.read.format(publish.format).load(first).schema
        names = {name.lower() for name in fields}
        data = StructType([column for column in schema.fields if column.name.lower() not in names])
        if not data.fields:
            raise ValueError(f"the instance at {first} has no column but the partition columns")
        partitions = ", ".join(f"`{name}`" for name in fields)
        columns = ", ".join([data.toDDL(), *(f"`{name}` STRING" for name in fields)])
        self._sql(
            f"CREATE TABLE IF NOT EXISTS IDENTIFIER(:table) ({columns}) USING {publish.format} "
            f"PARTITIONED BY ({partitions}) LOCATION :location",
            location=location,
        )

    def point(self, values: tuple[str, ...], location: str) -> None:
        """Add the partition at `location`, or move it there.

        Both statements, always: whether ADD IF NOT EXISTS moves an existing partition differs between
        Spark versions, and a shared metastore may hold what another process left.
        """
        spec, args = self._spec(values)
        self._sql(
            f"ALTER TABLE IDENTIFIER(:table) ADD IF NOT EXISTS PARTITION ({spec}) LOCATION :location",
            location=location,
            **args,
        )
        self._sql(
            f"ALTER TABLE IDENTIFIER(:table) PARTITION ({spec}) SET LOCATION :location", location=location, **args
        )

    def drop(self, values: tuple[str, ...]) -> None:
        spec, args = self._spec(values)
        self._sql(f"ALTER TABLE IDENTIFIER(:table) DROP IF EXISTS PARTITION ({spec})", **args)

    def partitions(self) -> list[tuple[str, ...]]:
        """The table's partitions as values in the table's order (`SHOW PARTITIONS` escapes them as paths)."""
        found = []
        for row in self._sql("SHOW PARTITIONS IDENTIFIER(:table)").collect():
            found.append(tuple(unquote(part.split("=", 1)[1]) for part in row[0].split("/")))
        return found


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0] if text else ''}"
