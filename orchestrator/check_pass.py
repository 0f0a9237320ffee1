"""The shared pass of a gate's aggregate checks: every output of a run, every check, one Spark action.

`orchestrator/checks.py` hands over the aggregate checks' expressions (`Check.aggregate`) and, per
output, its location and the row counts its checks want (of the output itself, its inputs, its
previous instance). One action computes them all:

- if any check has expressions, the outputs are read together (one listing, one schema inference,
  none when their writes gave the schema: the outputs of one run share their schema, and a column
  missing from one of them reads as nulls there), each row tagged with its output, then grouped by
  the tag, every check's expressions in one aggregation; an ungrouped aggregation over no rows gives
  an empty output its values (grouping gives it no row; not computed when every output read is
  known to hold rows);
- the counted locations (each once, however many outputs and checks want it) on the driver's local file
  system are counted from their parquet footers (`parquet_rows`: no Spark job); the others are read
  together with a one-column schema (counting reads no column, and a given schema spares the inference job),
  tagged the same way and counted per tag;
- the frames are unioned and collected: one action, whatever the number of outputs and checks.

Checks that only count rows (the ready-made ones but `no_nulls` and `unique`) never read a column;
when the outputs' columns are read anyway, their own row counts come from that read.
A row's tag comes from its file: the files Spark listed are assigned to their locations once, on
the driver, and each row looks its file up (`_tagged`); one read per location would cost a listing
and tasks of its own each, which on small outputs cost more than the work.

What the job's write observed (`orchestrator/observed_writes.py`: an output written with `ctx.write`)
is not computed again: such an output is read only for the checks Spark could not observe, and its
own row count is known; a gate whose every value was observed runs no Spark job.

When the pass fails, each output is computed in a pass of its own (its own schema, each counted
location read on its own), and if that fails, each of its checks alone: an error is charged only
to the output and check that cause it, and the others keep their answers.

The pass's time is shared out evenly among the (output, check) pairs it computed (Spark does not
say which expression took what); a pair that errored gets the time of its last attempt.
"""

from __future__ import annotations

import json
import logging
import os
import posixpath
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import reduce
from typing import Any
from urllib.parse import unquote, urlsplit

from partbuild.orchestrator.parquet_rows import footer_rows

KEY = "__partbuild_key"  # the output (or counted location) a row belongs to
ROWS = "__partbuild_rows"  # the rows of a group: what a counted location's count is read from
EMPTY = -1  # the key of the aggregation over no rows: an empty output's values
NO_COLUMN = "__partbuild_none int"  # the schema counted locations are read with: no column is read
# scheme:[//authority]path; a scheme of two letters at least (`C:` would be a drive)
_LOCATION = re.compile(r"^(?P<scheme>[A-Za-z][A-Za-z0-9+.-]+):(//(?P<host>[^/]*))?(?P<path>.*)$")

logger = logging.getLogger("partbuild.checks")


class UnmatchedRows(RuntimeError):
    """The pass read a file under none of the locations it was given, or under two nested in each other."""


@dataclass(frozen=True)
class PassOutput:
    """One output of the pass: its location, per check index the row counts wanted (name -> locations), and
    what its write already observed."""

    location: str
    counts: Mapping[int, Mapping[str, Sequence[str]]] = field(default_factory=dict)
    # What the job's write observed (`orchestrator/observed_writes.py`): per check index its values, and the rows.
    known: Mapping[int, Mapping[str, Any]] = field(default_factory=dict)
    rows: int | None = None
    schema: str | None = None  # the written frame's schema (JSON), when its write was observed


@dataclass(frozen=True)
class Share:
    """One check's values on one output (None if it errored), the error's text, and its share of the time."""

    values: dict[str, Any] | None
    error: str | None
    seconds: float


def compute(
    spark: Any,
    outputs: Sequence[PassOutput],
    columns: Mapping[int, Mapping[str, Any]],
    log: logging.Logger | None = None,
) -> dict[tuple[int, int], Share]:
    """Every check's values (`columns`: check index -> name -> Column) on every output, in as few passes as may be.

    Returns (output index, check index) -> `Share`.
    """
    shares: dict[tuple[int, int], Share] = {}
    if outputs and columns:
        _attempt(spark, outputs, columns, list(range(len(outputs))), sorted(columns), shares, log or logger)
    return shares


def _attempt(
    spark: Any,
    outputs: Sequence[PassOutput],
    columns: Mapping[int, Mapping[str, Any]],
    which: list[int],
    checks: list[int],
    shares: dict[tuple[int, int], Share],
    log: logging.Logger,
) -> None:
    """One pass over the outputs `which` for the checks `checks`; on failure, smaller passes."""
    started = time.perf_counter()
    noun = "1 output" if len(which) == 1 else f"{len(which)} outputs"
    chosen, wanted = [outputs[i] for i in which], {c: columns[c] for c in checks}
    try:
        values, ran = _aggregate(spark, chosen, wanted)
    except Exception as exc:
        seconds = time.perf_counter() - started
        error = f"{type(exc).__name__}: {exc}"
        if len(which) == 1 and len(checks) == 1:
            shares[(which[0], checks[0])] = Share(None, error, seconds)
            return
        alone = "each output" if len(which) > 1 else "each check"
        log.warning(
            "checks of %s failed in one pass after %.2f s (%s): computing %s alone",
            noun,
            seconds,
            _first_line(error),
            alone,
        )
        for part_which, part_checks in _smaller(which, checks):
            _attempt(spark, outputs, columns, part_which, part_checks, shares, log)
        return
    seconds = time.perf_counter() - started
    if ran:
        log.info("checks of %s computed in one pass in %.2f s", noun, seconds)
    else:
        log.info("checks of %s computed in their writes: no pass (%.3f s)", noun, seconds)
    each = seconds / (len(which) * len(checks))  # shared out evenly: the pass has no per-check times
    for position, index in enumerate(which):
        for check in checks:
            shares[(index, check)] = Share(values[position][check], None, each)


def _smaller(which: list[int], checks: list[int]) -> list[tuple[list[int], list[int]]]:
    """The smaller passes after a failed one: each output alone, or (one output) each check alone."""
    if len(which) > 1:
        return [([index], checks) for index in which]
    return [(which, [check]) for check in checks]


def _aggregate(
    spark: Any, outputs: Sequence[PassOutput], columns: Mapping[int, Mapping[str, Any]]
) -> tuple[list[dict[int, dict[str, Any]]], bool]:
    """One action: per output (in order), per check, its values by name (its columns' and its row counts), and
    whether a Spark action ran.

    What an output's write observed (`PassOutput.known`, `PassOutput.rows`) is taken as is: only the
    outputs still missing a check's columns are read, and only the locations whose rows are not known
    are counted. When nothing is left to compute, no Spark job runs at all.
    """
    from pyspark.sql import functions as F

    read = [p for p, output in enumerate(outputs) if any(_unknown(output, c, named) for c, named in columns.items())]
    computed = sorted({c for p in read for c, named in columns.items() if _unknown(outputs[p], c, named)})
    aliases = {(check, name): f"c{check}_{n}" for check in computed for n, name in enumerate(columns[check])}
    frames = []
    same: dict[int, int] = {}  # a key -> the key its rows were tagged with (one place spelled twice)
    key_of: dict[int, int] = {}  # output position -> the key of its rows, for the outputs read
    rows_of: dict[str, int] = {o.location: o.rows for o in outputs if o.rows is not None}  # location -> rows
    if read:  # checks that only count rows need no read of the outputs' columns (nor their schema)
        exprs = [F.count(F.lit(1)).alias(ROWS), *(columns[c][name].alias(a) for (c, name), a in aliases.items())]
        locations = [outputs[p].location for p in read]
        reader = _reader(spark, {outputs[p].schema for p in read})  # one listing, at most one schema inference
        data = _tagged(lambda at: reader.parquet(*at), locations, 0, same)
        frames.append(data.groupBy(KEY).agg(*exprs))
        if any(outputs[p].rows in (None, 0) for p in read):
            # Grouping gives an empty output no row: the same aggregation over no rows gives its values.
            frames.append(data.where(F.lit(False)).agg(*exprs).withColumn(KEY, F.lit(EMPTY)))
        key_of = {p: key for key, p in enumerate(read)}
    whole = {outputs[p].location: key for p, key in key_of.items()}  # an output's own rows come with its columns
    wanted = {loc for output in outputs for check in columns for loc in _counted(output, check)}
    rows_of.update(footer_rows(spark, sorted(wanted - whole.keys() - rows_of.keys())))  # no Spark job for these
    counted = sorted(wanted - whole.keys() - rows_of.keys())
    base = len(read)  # counted locations are keyed after the outputs read
    if counted:
        frames.append(_counted_rows(spark, counted, base, same, together=len(outputs) > 1))
    found = {row[KEY]: row for row in reduce(_union, frames).collect()} if frames else {}
    if None in found:
        raise UnmatchedRows("rows of the pass were read from a file Spark did not list")
    for loc, key in {**whole, **{loc: base + i for i, loc in enumerate(counted)}}.items():
        key = same.get(key, key)
        rows_of.setdefault(loc, int(found[key][ROWS]) if key in found else 0)
    answers = []
    for position, output in enumerate(outputs):
        row = found.get(same.get(key_of[position], key_of[position]), found.get(EMPTY)) if position in key_of else None
        per_check = {}
        for check, named in columns.items():
            if check in output.known:
                values = dict(output.known[check])
            else:
                values = {name: row[aliases[(check, name)]] for name in named} if row is not None else {}
            for name, locs in output.counts.get(check, {}).items():
                values[name] = sum(rows_of[loc] for loc in locs)
            per_check[check] = values
        answers.append(per_check)
    return answers, bool(frames)


def _reader(spark: Any, schemas: set[str | None]) -> Any:
    """A parquet reader: given the schema the outputs were written with, if they all share a known one."""
    if len(schemas) != 1 or (schema := next(iter(schemas))) is None:
        return spark.read
    from pyspark.sql.types import StructType

    return spark.read.schema(StructType.fromJson(json.loads(schema)))


def _unknown(output: PassOutput, check: int, named: Mapping[str, Any]) -> bool:
    """Whether the pass must read `output` for `check`'s columns (it has some, and the write did not observe them)."""
    return bool(named) and check not in output.known


def _counted_rows(spark: Any, counted: Sequence[str], base: int, same: dict[int, int], *, together: bool) -> Any:
    """The rows of each counted location, keyed from `base`, read with a one-column schema (counting reads
    no column, and a given schema spares the inference job).

    `together`: in one read, rows tagged by their files (`_tagged`); otherwise (a pass over one output,
    the last resort) one read per location, each tagged as read.
    """
    from pyspark.sql import functions as F

    if together:
        frame = _tagged(lambda at: spark.read.schema(NO_COLUMN).parquet(*at), counted, base, same)
    else:
        reads = [
            spark.read.schema(NO_COLUMN).parquet(at).withColumn(KEY, F.lit(base + i)) for i, at in enumerate(counted)
        ]
        frame = reduce(lambda left, right: left.union(right), reads)
    return frame.groupBy(KEY).agg(F.count(F.lit(1)).alias(ROWS))


def _tagged(read: Callable[[Sequence[str]], Any], locations: Sequence[str], base: int, same: dict[int, int]) -> Any:
    """`read(locations)` with KEY: `base` + the index of the location each row was read from.

    The files Spark listed (`inputFiles`) are assigned to their locations here, by their decoded paths;
    each row then finds its file among its location's (`_metadata.file_path`, a hash lookup per
    location, no string parsing per row). A file under none of them fails the pass (`UnmatchedRows`).
    A place given twice (`/w/x` and `file:///w/x`) would be read twice: it is read again under its
    first spelling only, and `same` says the others have its rows.
    """
    from pyspark.sql import functions as F

    frame = read(locations)
    if len(locations) == 1:
        return frame.withColumn(KEY, F.lit(base))
    files: dict[int, list[str]] = {}
    for file in frame.inputFiles():
        first, *others = _owners(file, locations)
        files.setdefault(first, []).extend(_spellings(file))
        same.update({base + other: base + first for other in others})
    if any(base <= key < base + len(locations) for key in same):
        frame = read([at for index, at in enumerate(locations) if base + index not in same])
    # One SQL expression, not a Column per file: each Column is a call into the JVM, and a batch's files
    # number in the hundreds. Names go in as hex (decoded once, by constant folding): no quoting to get
    # wrong whatever a path holds. A row of no listed file gets no tag: the pass refuses it.
    branches = " ".join(
        f"WHEN _metadata.file_path IN ({', '.join(map(_sql_string, names))}) THEN {base + index}"
        for index, names in files.items()
    )
    return frame.withColumn(KEY, F.expr(f"CASE {branches} END"))


def _owners(file: str, locations: Sequence[str]) -> list[int]:
    """The indexes of the locations `file` (a URI, as Spark lists it) is under (several: one place spelled
    several ways)."""
    parts = urlsplit(file)
    scheme, host, path = parts.scheme.lower(), parts.netloc, posixpath.normpath(unquote(parts.path) or "/")
    under: dict[int, int] = {}  # index -> its path's length
    for index, location in enumerate(locations):
        its_scheme, its_host, its_path = _location_parts(location)
        inside = path == its_path or path.startswith(its_path.rstrip("/") + "/")
        if inside and (not its_scheme or (its_scheme.lower(), its_host) == (scheme, host)):
            under[index] = len(its_path)
    if not under:
        raise UnmatchedRows(f"Spark listed {file}, under none of the {len(locations)} locations read")
    if len(set(under.values())) > 1:  # one location inside another: read together, its rows would come twice
        raise UnmatchedRows(f"{file} is under locations nested in each other: they are read one by one")
    return list(under)


def _location_parts(location: str) -> tuple[str, str, str]:
    """(scheme, authority, absolute path) of a location as Hadoop reads one: a bare path has no scheme
    (it is on the default file system), and the path is taken as written (`#`, `?` and `%` included)."""
    found = _LOCATION.match(location)
    if found is None:
        return "", "", posixpath.normpath(os.path.abspath(location))
    return found["scheme"], found["host"] or "", posixpath.normpath(found["path"] or "/")


def _sql_string(text: str) -> str:
    """A Spark SQL expression giving `text`, whatever characters it holds."""
    return f"decode(unhex('{text.encode().hex()}'), 'UTF-8')"


def _spellings(file: str) -> list[str]:
    """How a row may name `file`: as listed, and the local file system's `file:/` form of `file:///`."""
    return [file, "file:/" + file[len("file:///") :]] if file.startswith("file:///") else [file]


def _counted(output: PassOutput, check: int) -> set[str]:
    return {loc for locs in output.counts.get(check, {}).values() for loc in locs}


def _union(left: Any, right: Any) -> Any:
    return left.unionByName(right, allowMissingColumns=True)


def _first_line(text: str) -> str:
    lines = text.strip().splitlines()
    return lines[0] if lines else ""
