"""Quality checks declared with a job, the gate that runs them, and the ready-made ones.

A job may declare `checks=[Check("rows_nonzero", fn), ...]`. After the job function
returns, the executor runs every check on each output instance *before* the run's
outcome is recorded (`run_gate`), so an instance whose blocking check failed never
becomes Live: the run ends in a JobRunFailure naming the check. What each way a check
ends becomes:

| the check | recorded as | the run |
| --- | --- | --- |
| returns `CheckOutcome(passed=True)` | passed | JobRunSuccess (if nothing else stops it) |
| returns `passed=False`, non-blocking | a warning | JobRunSuccess, instance Live |
| returns `passed=False`, blocking | failed | JobRunFailure, permanent (retryable if the check says so) |
| raises, or returns anything but a `CheckOutcome` | errored | JobRunFailure, retryable; later checks do not run |

Retryable failures follow the job's `RetryPolicy` like any failure (permanent once its
attempts are spent). The results travel in the outcome event (`InstanceChecks`), so the
log, replay, the digest and time travel cover them (state/fold/job_runs.py keeps them).

A check function gets a `CheckContext` (the output's ref, instance UUID and location, the
Spark session, started only if the check asks for it, and the locations of the output's
declared inputs). The ready-made checks read the output as parquet, the format the jobs
of the examples write (`spark.read.parquet(location)`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from partbuild.proto.v1 import events_pb2 as pb

MAX_CHECK_NAME = 256  # the fold's bound for ids (state/fold/validation.py)
MAX_DESCRIPTION = 1_000  # a description is a short sentence; longer ones are cut


class CheckDeclarationError(ValueError):
    """A check that cannot be declared (empty or too long a name, a function that is not callable)."""


@dataclass(frozen=True)
class CheckOutcome:
    """What a check function returns: whether the output passed, a short sentence, and numbers."""

    passed: bool
    description: str = ""
    metadata: Mapping[str, float | int] = field(default_factory=dict)


@dataclass(frozen=True)
class CheckContext:
    """Handed to a check function for one output instance of one job run."""

    ref: str
    instance_uuid: str
    location: str
    job_label: str
    # The output's declared inputs that were Live for the run: ref -> location.
    input_locations: Mapping[str, str]
    # Gives the process's SparkSession, starting it if needed: read through `spark`.
    open_spark: Callable[[], Any] = field(default=lambda: None, repr=False)
    # Where the ref's latest earlier instance that went Live keeps its data (None: this is its first build).
    previous_location: str | None = None

    @property
    def spark(self) -> Any:
        """The process's SparkSession (checks that need no Spark never start it)."""
        return self.open_spark()


CheckFunction = Callable[[CheckContext], CheckOutcome]


@dataclass(frozen=True)
class Check:
    """A named check of a job's outputs. `blocking`: a failure keeps the instance from going Live.

    `retryable`: a blocking failure is retried (the job's RetryPolicy), e.g. for data that may still arrive.
    """

    name: str
    fn: CheckFunction
    blocking: bool = True
    retryable: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name or len(self.name) > MAX_CHECK_NAME:
            raise CheckDeclarationError(f"check name {self.name!r} must be 1 to {MAX_CHECK_NAME} characters")
        if not callable(self.fn):
            raise CheckDeclarationError(f"check {self.name!r}: fn must be callable")


@dataclass(frozen=True)
class CheckTarget:
    """One output instance the gate checks."""

    ref: str
    instance_uuid: str
    location: str
    input_locations: Mapping[str, str]
    previous_location: str | None = None


@dataclass(frozen=True)
class GateVerdict:
    """The checks' results by instance (the outcome event's `checks`), and why the run must fail, if it must."""

    results: list[pb.InstanceChecks]
    failure: str | None = None  # the run's failure message
    retryable: bool = False  # whether that failure may be retried


def run_gate(
    checks: Sequence[Check], targets: Sequence[CheckTarget], job_label: str, open_spark: Callable[[], Any]
) -> GateVerdict:
    """Run every check on every target, in order; stop at the first check that errors."""
    results: list[pb.InstanceChecks] = []
    failure: str | None = None
    retryable = False
    for target in targets:
        context = CheckContext(
            target.ref,
            target.instance_uuid,
            target.location,
            job_label,
            target.input_locations,
            open_spark,
            target.previous_location,
        )
        recorded = pb.InstanceChecks(instance_uuid=target.instance_uuid)
        results.append(recorded)
        for check in checks:
            result, error = _run_one(check, context)
            recorded.results.append(result)
            if error is not None:
                return GateVerdict(results, _cut(f"check {check.name} errored: {error}"), retryable=True)
            if not result.passed and check.blocking and failure is None:
                failure = _cut(f"check {check.name} failed on {target.ref}: {result.description or 'no description'}")
                retryable = check.retryable
    return GateVerdict(results, failure, retryable)


def _run_one(check: Check, context: CheckContext) -> tuple[pb.CheckResult, str | None]:
    """The check's result, and the error text if it errored."""
    result = pb.CheckResult(name=check.name, blocking=check.blocking)
    try:
        outcome = check.fn(context)
        if not isinstance(outcome, CheckOutcome):
            raise TypeError(f"a check must return a CheckOutcome, not {type(outcome).__name__}")
        if not isinstance(outcome.passed, bool):  # e.g. a numpy bool: say so rather than guess
            raise TypeError(f"CheckOutcome.passed must be a bool, not {type(outcome.passed).__name__}")
        metrics = {str(key): _number(key, value) for key, value in outcome.metadata.items()}
    except Exception as exc:  # an error of the check, never a pass
        error = f"{type(exc).__name__}: {exc}"
        result.errored = True
        result.description = _cut(error, MAX_DESCRIPTION)
        return result, error
    result.passed = outcome.passed
    result.description = _cut(str(outcome.description), MAX_DESCRIPTION)
    result.metrics.update(metrics)
    return result, None


def _number(key: object, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise TypeError(f"metadata {key!r} must be a finite int or float, not {value!r}")
    return float(value)


def _cut(text: str, limit: int = 2_000) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


# ----------------------------------------------------------------- ready-made checks


def _read(context: CheckContext) -> Any:
    return context.spark.read.parquet(context.location)


def row_count_at_least(n: int, *, name: str | None = None, blocking: bool = True) -> Check:
    """The output holds at least `n` rows (`n=1`: not empty)."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise CheckDeclarationError(f"row_count_at_least needs an int of at least 0, not {n!r}")

    def check(context: CheckContext) -> CheckOutcome:
        rows = _read(context).count()
        return CheckOutcome(rows >= n, f"{rows} rows (at least {n} wanted)", {"rows": rows})

    return Check(name or f"row_count_at_least_{n}", check, blocking=blocking)


def no_nulls(*columns: str, name: str | None = None, blocking: bool = True) -> Check:
    """None of `columns` holds a null."""
    _need_columns("no_nulls", columns)

    def check(context: CheckContext) -> CheckOutcome:
        from pyspark.sql import functions as F

        frame = _read(context)
        counts = frame.select([F.count(F.when(F.col(c).isNull(), 1)).alias(c) for c in columns]).first()
        nulls = {column: int(counts[column]) for column in columns}
        bad = [f"{column}: {count}" for column, count in nulls.items() if count]
        text = f"nulls in {', '.join(bad)}" if bad else f"no nulls in {', '.join(columns)}"
        return CheckOutcome(not bad, text, {f"nulls.{column}": count for column, count in nulls.items()})

    return Check(name or f"no_nulls_{'_'.join(columns)}", check, blocking=blocking)


def unique(*columns: str, name: str | None = None, blocking: bool = True) -> Check:
    """No two rows share the same values of `columns` (a key)."""
    _need_columns("unique", columns)

    def check(context: CheckContext) -> CheckOutcome:
        from pyspark.sql import functions as F

        frame = _read(context)
        dupes = frame.groupBy(*columns).count().where(F.col("count") > 1)
        found = dupes.agg(F.count(F.lit(1)).alias("keys"), F.sum("count").alias("rows")).first()
        keys, rows = int(found["keys"] or 0), int(found["rows"] or 0)
        key = ", ".join(columns)
        text = f"{keys} values of ({key}) appear more than once, in {rows} rows" if keys else f"({key}) is unique"
        return CheckOutcome(keys == 0, text, {"duplicate_keys": keys, "duplicate_rows": rows})

    return Check(name or f"unique_{'_'.join(columns)}", check, blocking=blocking)


def row_count_within_ratio_of_inputs(
    low: float, high: float, *, name: str | None = None, blocking: bool = True
) -> Check:
    """The output's rows are between `low` and `high` times the rows of its declared inputs together."""
    _need_ratio("row_count_within_ratio_of_inputs", low, high)

    def check(context: CheckContext) -> CheckOutcome:
        if not context.input_locations:
            return CheckOutcome(False, "no input to compare with")
        rows = _read(context).count()
        inputs = context.spark.read.parquet(*context.input_locations.values()).count()
        return _ratio_outcome(rows, inputs, "input rows", low, high, "input_rows")

    return Check(name or "row_count_within_ratio_of_inputs", check, blocking=blocking)


def row_count_within_ratio_of_previous(
    low: float, high: float, *, name: str | None = None, blocking: bool = True
) -> Check:
    """The output's rows are between `low` and `high` times those of the ref's previous Live instance.

    A first build has nothing to compare with and passes, saying so: the check guards against a
    rebuild that silently lost (or multiplied) data, not against a partition's first appearance.
    """
    _need_ratio("row_count_within_ratio_of_previous", low, high)

    def check(context: CheckContext) -> CheckOutcome:
        rows = _read(context).count()
        if context.previous_location is None:
            return CheckOutcome(True, f"{rows} rows; no earlier Live instance to compare with", {"rows": rows})
        previous = context.spark.read.parquet(context.previous_location).count()
        return _ratio_outcome(rows, previous, "rows of the previous instance", low, high, "previous_rows")

    return Check(name or "row_count_within_ratio_of_previous", check, blocking=blocking)


def _need_ratio(what: str, low: float, high: float) -> None:
    if not (0 <= low <= high) or not math.isfinite(high):
        raise CheckDeclarationError(f"{what} needs 0 <= low <= high, not {low}, {high}")


def _ratio_outcome(rows: int, base: int, base_text: str, low: float, high: float, base_key: str) -> CheckOutcome:
    ratio = rows / base if base else (0.0 if rows == 0 else math.inf)
    passed = low <= ratio <= high
    text = f"{rows} rows from {base} {base_text}: ratio {ratio:.4g} ({'' if passed else 'not '}in [{low}, {high}])"
    metrics: dict[str, float | int] = {"rows": rows, base_key: base}
    if math.isfinite(ratio):
        metrics["ratio"] = ratio
    return CheckOutcome(passed, text, metrics)


def _need_columns(what: str, columns: Sequence[str]) -> None:
    if not columns or not all(isinstance(column, str) and column for column in columns):
        raise CheckDeclarationError(f"{what} needs one or more column names")
