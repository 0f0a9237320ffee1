"""Quality checks declared with a job, the gate that runs them, and the ready-made ones.

A job may declare `checks=[Check("rows_nonzero", fn), ...]`. After the job function
returns, the executor runs every check on each output instance *before* the run's
outcome is recorded (`run_gate`), so an instance whose blocking check failed never
becomes Live. The gate judges each output on its own (`GateVerdict.failures`): what each
way a check ends means for its output:

| the check | recorded as | the output |
| --- | --- | --- |
| returns `CheckOutcome(passed=True)` | passed | may go Live (if nothing else stops it) |
| returns `passed=False`, non-blocking | a warning | may go Live, with the warning |
| returns `passed=False`, blocking | failed | failed, permanent (retryable if the check says so) |
| raises, or returns anything but a `CheckOutcome` | errored | failed, retryable; its later checks are not recorded |

The other outputs of the run are checked all the same. Retryable failures follow the job's
`RetryPolicy` like any failure (permanent once its attempts are spent). The results travel
in the outcome event (`InstanceChecks`, each with its `duration_ms`), so the log, replay,
the digest and time travel cover them (state/fold/job_runs.py keeps them).

Two kinds of check. A plain one, `Check(name, fn)`, is a function of a `CheckContext` (the
output's ref, instance UUID and location, the Spark session, started only if the check asks
for it, the locations of its declared inputs and of the ref's previous Live instance), run
on each output in turn. An aggregate one, `Check.aggregate(name, columns, evaluate)`, gives
Spark aggregate expressions instead: computed as the job writes the output if it writes with
`ctx.write` (`orchestrator/observed_writes.py`), and otherwise by the gate, for every output of
the run, in one shared Spark pass (`orchestrator/check_pass.py`); each check's `evaluate` turns
its values into the outcome. The ready-made checks are aggregate ones, so a run's checks cost
nothing more than its writes, or one pass over its outputs, rather than a Spark job per check per
output; each keeps a `fn` that computes it alone, the way they all ran before. They read outputs
as parquet, the format the jobs of the examples write (`spark.read.parquet(location)`).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from partbuild.orchestrator.check_pass import PassOutput, Share, compute
from partbuild.orchestrator.declarations import DeclarationError, bool_problem, callable_problem, number_problem
from partbuild.orchestrator.observed_writes import Observed
from partbuild.orchestrator.plan_keys import proves_unique
from partbuild.proto.v1 import events_pb2 as pb

MAX_CHECK_NAME = 256  # the fold's bound for ids (state/fold/validation.py)
MAX_DESCRIPTION = 1_000  # a description is a short sentence; longer ones are cut

logger = logging.getLogger("partbuild.checks")


class CheckDeclarationError(DeclarationError):
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
    # What the checks of each input's instance recorded when it was checked: ref -> check name -> metric -> value.
    input_metrics: Mapping[str, Mapping[str, Mapping[str, float]]] = field(default_factory=dict)

    @property
    def spark(self) -> Any:
        """The process's SparkSession (checks that need no Spark never start it)."""
        return self.open_spark()


CheckFunction = Callable[[CheckContext], CheckOutcome]
AggregateColumns = Callable[[], Mapping[str, Any]]  # name -> a pyspark aggregate Column, built at gate time
AggregateEvaluate = Callable[[Mapping[str, Any]], CheckOutcome]  # the values by name -> the outcome
RowCounts = Callable[[CheckContext], Mapping[str, Sequence[str]]]  # name -> locations counted together
Recorded = Callable[[CheckContext], Mapping[str, Any]]  # name -> a value taken from what the log recorded


@dataclass(frozen=True)
class Aggregation:
    """A check's part of the gate's shared pass (`Check.aggregate`): expressions over the output, and a verdict.

    `columns()` gives name -> aggregate Column (`F.count(F.lit(1))`, `F.max("ts")`, ...), unaliased: the
    pass aliases them. It is called once per gate and the same expressions are evaluated over each
    output (which is what lets every output share one grouped aggregation), so an output-specific
    threshold belongs in a plain `Check`. `row_counts(context)` names locations whose rows to count,
    e.g. `{"rows": [context.location], "input_rows": list(context.input_locations.values())}` (each
    name's locations together; counting reads no column, so a check that only counts never makes the
    pass read the outputs' columns). `recorded(context)` gives values the log already holds (e.g. what the
    inputs' checks measured, `context.input_metrics`), so they need no read at all. `evaluate(values)` gets
    them all, by name, and returns the outcome. `observable`: the expressions may be computed in the job's
    own write (`orchestrator/observed_writes.py`); False for expressions Spark cannot observe (DISTINCT).
    """

    columns: AggregateColumns
    evaluate: AggregateEvaluate
    row_counts: RowCounts | None = None
    recorded: Recorded | None = None
    observable: bool = True
    # The expressions to observe in the write of a given frame instead of `columns()` (None: not observed);
    # e.g. `unique`, which only counts rows when the frame's plan proves its key (orchestrator/plan_keys.py).
    observed_in: Callable[[Any], Mapping[str, Any] | None] | None = None

    def observed_columns(self, frame: Any) -> Mapping[str, Any] | None:
        """What a write of `frame` observes for this check (None: the gate's pass computes it)."""
        if self.observed_in is not None:
            return self.observed_in(frame)
        return self.columns() if self.observable else None


@dataclass(frozen=True)
class Check:
    """A named check of a job's outputs. `blocking`: a failure keeps the instance from going Live.

    `retryable`: a blocking failure is retried (the job's RetryPolicy), e.g. for data that may still arrive.
    `aggregation`: set by `Check.aggregate`; the gate then computes the check in its shared pass, and
    `fn` is the same check computed alone (one output, one pass of its own).
    """

    name: str
    fn: CheckFunction
    blocking: bool = True
    retryable: bool = False
    aggregation: Aggregation | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name or len(self.name) > MAX_CHECK_NAME:
            raise CheckDeclarationError(f"check name {self.name!r} must be 1 to {MAX_CHECK_NAME} characters")
        if not callable(self.fn):
            raise CheckDeclarationError(f"check {self.name!r}: fn must be callable")
        if problem := bool_problem(self.blocking, "blocking") or bool_problem(self.retryable, "retryable"):
            raise CheckDeclarationError(f"check {self.name!r}: {problem}")
        if self.aggregation is not None and not isinstance(self.aggregation, Aggregation):
            raise CheckDeclarationError(f"check {self.name!r}: aggregation must be made by Check.aggregate")
        if self.aggregation is not None and not (
            callable(self.aggregation.columns) and callable(self.aggregation.evaluate)
        ):
            raise CheckDeclarationError(f"check {self.name!r}: columns and evaluate must be callable")
        if self.aggregation is not None and (
            problem := callable_problem(self.aggregation.row_counts, "row_counts", optional=True)
            or callable_problem(self.aggregation.recorded, "recorded", optional=True)
            or bool_problem(self.aggregation.observable, "observable")
            or callable_problem(self.aggregation.observed_in, "observed_in", optional=True)
        ):
            raise CheckDeclarationError(f"check {self.name!r}: {problem}")

    @classmethod
    def aggregate(
        cls,
        name: str,
        columns: AggregateColumns,
        evaluate: AggregateEvaluate,
        *,
        row_counts: RowCounts | None = None,
        recorded: Recorded | None = None,
        observable: bool = True,
        blocking: bool = True,
        retryable: bool = False,
    ) -> Check:
        """A check computed in the gate's one pass over the run's outputs (see `Aggregation`).

        For example, no click in the future, sharing the pass with the ready-made checks:
        `Check.aggregate("no_future", lambda: {"late": F.count(F.when(F.col("ts") > F.current_timestamp(), 1))},
        lambda v: CheckOutcome(v["late"] == 0, f"{v['late']} rows in the future", {"late": v["late"]}))`.
        """
        aggregation = Aggregation(columns, evaluate, row_counts, recorded, observable)
        return cls(name, partial(_alone, name, aggregation), blocking, retryable, aggregation)


def _alone(name: str, aggregation: Aggregation, context: CheckContext) -> CheckOutcome:
    """An aggregate check computed on its own: a pass over one output for one check."""
    output = PassOutput(context.location, {0: aggregation.row_counts(context)} if aggregation.row_counts else {})
    share = compute(context.spark, [output], {0: aggregation.columns()}, logging.getLogger("partbuild.checks"))
    computed = share[(0, 0)]
    if computed.values is None:
        raise CheckPassError(computed.error or f"check {name} could not be computed")
    return aggregation.evaluate(_with_recorded(aggregation, computed.values, context))


def _with_recorded(aggregation: Aggregation, values: Mapping[str, Any], context: CheckContext) -> Mapping[str, Any]:
    """The pass's values and those the check takes from the log (`recorded`)."""
    return values if aggregation.recorded is None else {**values, **aggregation.recorded(context)}


class CheckPassError(RuntimeError):
    """The Spark pass computing an aggregate check failed (its text is Spark's error)."""


@dataclass(frozen=True)
class CheckTarget:
    """One output instance the gate checks."""

    ref: str
    instance_uuid: str
    location: str
    input_locations: Mapping[str, str]
    previous_location: str | None = None
    # ref -> check name -> metric -> value: what each input's checks recorded (`CheckContext.input_metrics`)
    input_metrics: Mapping[str, Mapping[str, Mapping[str, float]]] = field(default_factory=dict)
    # What the job's write observed of this output (`JobContext.write`): the pass need not read it again.
    observed: Observed | None = None


@dataclass(frozen=True)
class GateVerdict:
    """The checks' results by instance (the outcome event's `checks`), and the outputs that failed them.

    `failures`: instance UUID -> (one line naming the check and the output's ref, whether retrying may
    help), in the targets' order; outputs not in it passed. `failure` and `retryable` are the first's.
    """

    results: list[pb.InstanceChecks]
    failures: dict[str, tuple[str, bool]] = field(default_factory=dict)

    @property
    def failure(self) -> str | None:
        """The first failed output's message (None: every output passed)."""
        return next(iter(self.failures.values()))[0] if self.failures else None

    @property
    def retryable(self) -> bool:
        """Whether the first failure may be retried."""
        return next(iter(self.failures.values()))[1] if self.failures else False


def run_gate(
    checks: Sequence[Check],
    targets: Sequence[CheckTarget],
    job_label: str,
    open_spark: Callable[[], Any],
    log: logging.Logger | None = None,
) -> GateVerdict:
    """Run every check on every target: the aggregate ones first, in one shared pass, then the others.

    Results are listed in the checks' order. On each output, a check that errors fails it (retryable)
    and its later checks are not recorded (plain ones do not run); the other outputs go on. Each
    result's `duration_ms` is its own time, or for an aggregate check its share of the pass's time
    (shared out evenly, see `check_pass`) plus its `evaluate`. With `log`, one line per check per
    output and one per pass.
    """
    log = log or logger
    contexts = [_context(target, job_label, open_spark) for target in targets]
    shared = _shared_pass(checks, contexts, [target.observed for target in targets], log)
    results: list[pb.InstanceChecks] = []
    failures: dict[str, tuple[str, bool]] = {}
    for index, context in enumerate(contexts):
        recorded = pb.InstanceChecks(instance_uuid=context.instance_uuid)
        results.append(recorded)
        for position, check in enumerate(checks):
            if check.aggregation is not None:
                result, error = _from_pass(check, shared[(index, position)], context)
            else:
                result, error = _run_one(check, partial(check.fn, context))
            recorded.results.append(result)
            _log_result(log, check, context.ref, result)
            if error is not None:
                failures.setdefault(context.instance_uuid, (_message(check, context.ref, "errored", error), True))
                break
            if not result.passed and check.blocking and context.instance_uuid not in failures:
                said = result.description or "no description"
                failures[context.instance_uuid] = (_message(check, context.ref, "failed", said), check.retryable)
    return GateVerdict(results, failures)


def _context(target: CheckTarget, job_label: str, open_spark: Callable[[], Any]) -> CheckContext:
    return CheckContext(
        target.ref,
        target.instance_uuid,
        target.location,
        job_label,
        target.input_locations,
        open_spark,
        target.previous_location,
        target.input_metrics,
    )


def _shared_pass(
    checks: Sequence[Check],
    contexts: Sequence[CheckContext],
    observed: Sequence[Observed | None],
    log: logging.Logger,
) -> dict[tuple[int, int], Share]:
    """(output index, check position) -> the aggregate check's values in the pass (or observed in the job's
    write), or why it has none."""
    aggregate = [position for position, check in enumerate(checks) if check.aggregation is not None]
    if not aggregate or not contexts:
        return {}
    try:
        spark = contexts[0].spark  # first: building a Column needs the session
    except Exception as exc:  # no session: every aggregate check errors, on every output
        return {(index, position): _errored(exc) for index in range(len(contexts)) for position in aggregate}
    shares: dict[tuple[int, int], Share] = {}
    columns: dict[int, Mapping[str, Any]] = {}
    counts: list[dict[int, Mapping[str, Sequence[str]]]] = [{} for _ in contexts]
    for position in aggregate:
        aggregation = checks[position].aggregation
        assert aggregation is not None
        try:  # the check's own Python: an error here is the check's, on every output
            columns[position] = dict(aggregation.columns())
            if aggregation.row_counts is not None:
                for index, context in enumerate(contexts):
                    counts[index][position] = dict(aggregation.row_counts(context))
        except Exception as exc:
            columns.pop(position, None)
            shares.update({(index, position): _errored(exc) for index in range(len(contexts))})
    outputs = [
        _pass_output(context.location, counts[index], observed[index], columns)
        for index, context in enumerate(contexts)
    ]
    shares.update(compute(spark, outputs, columns, log))
    return shares


def _pass_output(
    location: str,
    counts: Mapping[int, Mapping[str, Sequence[str]]],
    observed: Observed | None,
    columns: Mapping[int, Mapping[str, Any]],
) -> PassOutput:
    """An output of the pass, with what its write observed: its rows and the checks' values (those it has)."""
    if observed is None:
        return PassOutput(location, counts)
    known = {check: observed.values[check] for check in columns if check in observed.values}
    return PassOutput(location, counts, known, observed.rows, observed.schema)


def _errored(exc: Exception) -> Share:
    return Share(None, f"{type(exc).__name__}: {exc}", 0.0)


def _from_pass(check: Check, share: Share, context: CheckContext) -> tuple[pb.CheckResult, str | None]:
    """An aggregate check's result from its values in the pass (or the pass's error) and those it takes from the log."""
    aggregation = check.aggregation
    assert aggregation is not None
    values = share.values
    if values is None:
        error = share.error or "no values"
        description = _cut(error, MAX_DESCRIPTION)
        errored = pb.CheckResult(name=check.name, blocking=check.blocking, errored=True, description=description)
        errored.duration_ms = _ms(share.seconds)
        return errored, error
    return _run_one(check, lambda: aggregation.evaluate(_with_recorded(aggregation, values, context)), share.seconds)


def _run_one(check: Check, produce: Callable[[], object], already_s: float = 0.0) -> tuple[pb.CheckResult, str | None]:
    """The check's result (its duration: its own time plus `already_s`), and the error text if it errored."""
    result = pb.CheckResult(name=check.name, blocking=check.blocking)
    started = time.perf_counter()
    try:
        outcome = produce()
        if not isinstance(outcome, CheckOutcome):
            raise TypeError(f"a check must return a CheckOutcome, not {type(outcome).__name__}")
        if not isinstance(outcome.passed, bool):  # e.g. a numpy bool: say so rather than guess
            raise TypeError(f"CheckOutcome.passed must be a bool, not {type(outcome.passed).__name__}")
        metrics = {str(key): _number(key, value) for key, value in outcome.metadata.items()}
    except Exception as exc:  # an error of the check, never a pass
        error = f"{type(exc).__name__}: {exc}"
        result.errored = True
        result.description = _cut(error, MAX_DESCRIPTION)
        result.duration_ms = _ms(already_s + time.perf_counter() - started)
        return result, error
    result.passed = outcome.passed
    result.description = _cut(str(outcome.description), MAX_DESCRIPTION)
    result.metrics.update(metrics)
    result.duration_ms = _ms(already_s + time.perf_counter() - started)
    return result, None


def _ms(seconds: float) -> int:
    # Rounded up: a measured check never reads as 0, which the event reserves for "unknown".
    return max(1, math.ceil(seconds * 1000))


def _message(check: Check, ref: str, what: str, said: str) -> str:
    """One line: `check NAME failed on REF: ...` or `check NAME errored on REF: ...`."""
    lines = said.strip().splitlines()
    return _cut(f"check {check.name} {what} on {ref}: {lines[0] if lines else said}")


def _log_result(log: logging.Logger, check: Check, ref: str, result: pb.CheckResult) -> None:
    state = "errored" if result.errored else "passed" if result.passed else "failed"
    said = result.description.strip().splitlines()[0] if result.description.strip() else "no description"
    level = logging.INFO if result.passed or not (result.errored or check.blocking) else logging.WARNING
    log.log(level, "check %s on %s: %s in %.2f s: %s", check.name, ref, state, result.duration_ms / 1000, said)


def _number(key: object, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise TypeError(f"metadata {key!r} must be a finite int or float, not {value!r}")
    return float(value)


def _cut(text: str, limit: int = 2_000) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


# ----------------------------------------------------------------- ready-made checks
# Each is an aggregate check (its expressions join the gate's pass) whose `fn` computes it alone
# with plain DataFrame calls, as every check ran before the shared pass: the same `evaluate` judges
# both, so the two answers can be compared (tests/e2e/test_checks_spark.py, bench/checks_gate.py).


def _read(context: CheckContext) -> Any:
    return context.spark.read.parquet(context.location)


def _functions() -> Any:
    from pyspark.sql import functions as F  # imported at gate time: declaring a check needs no Spark

    return F


def _rows() -> Any:
    return _functions().count(_functions().lit(1))


def row_count_at_least(n: int, *, name: str | None = None, blocking: bool = True) -> Check:
    """The output holds at least `n` rows (`n=1`: not empty). Metric: `rows`."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise CheckDeclarationError(f"row_count_at_least needs an int of at least 0, not {n!r}")

    def evaluate(values: Mapping[str, Any]) -> CheckOutcome:
        rows = int(values["rows"])
        return CheckOutcome(rows >= n, f"{rows} rows (at least {n} wanted)", {"rows": rows})

    def alone(context: CheckContext) -> CheckOutcome:
        return evaluate({"rows": _read(context).count()})

    aggregation = Aggregation(dict, evaluate, own_rows)
    return Check(name or f"row_count_at_least_{n}", alone, blocking=blocking, aggregation=aggregation)


def own_rows(context: CheckContext) -> dict[str, list[str]]:
    """`row_counts` of the output's own rows, as `rows` (counted as a location: no column read, no schema
    inferred; or observed as the job wrote it)."""
    return {"rows": [context.location]}


def no_nulls(*columns: str, name: str | None = None, blocking: bool = True) -> Check:
    """None of `columns` holds a null. Metrics: `nulls.COLUMN` for each column."""
    _need_columns("no_nulls", columns)

    def expressions() -> dict[str, Any]:
        F = _functions()
        return {f"nulls.{column}": F.count(F.when(F.col(column).isNull(), 1)) for column in columns}

    def evaluate(values: Mapping[str, Any]) -> CheckOutcome:
        nulls = {column: int(values[f"nulls.{column}"]) for column in columns}
        bad = [f"{column}: {count}" for column, count in nulls.items() if count]
        text = f"nulls in {', '.join(bad)}" if bad else f"no nulls in {', '.join(columns)}"
        return CheckOutcome(not bad, text, {f"nulls.{column}": count for column, count in nulls.items()})

    def alone(context: CheckContext) -> CheckOutcome:
        return evaluate(_read(context).agg(*(c.alias(k) for k, c in expressions().items())).first().asDict())

    aggregation = Aggregation(expressions, evaluate)
    return Check(name or f"no_nulls_{'_'.join(columns)}", alone, blocking=blocking, aggregation=aggregation)


def unique(*columns: str, name: str | None = None, blocking: bool = True) -> Check:
    """No two rows share the same values of `columns` (a key; nulls count as a value).

    Counted as distinct keys against rows, which joins the gate's pass (a groupBy of its own would
    not). Spark cannot observe a DISTINCT aggregation in a write: for an output written with `ctx.write`,
    the check is settled in the write only when Spark's plan of the written frame proves the key (it is
    grouped by it, or made distinct: `plan_keys`), and the pass computes it otherwise. Metrics: `rows`,
    `distinct_keys` (distinct values of the key) and `extra_rows` (rows that repeat a key seen before:
    rows - distinct_keys; 0 when unique).
    """
    _need_columns("unique", columns)

    def expressions() -> dict[str, Any]:
        F = _functions()
        # A struct is never null, so a key holding nulls still counts (as groupBy would count it).
        return {"rows": _rows(), "distinct_keys": F.count_distinct(F.struct(*columns))}

    def evaluate(values: Mapping[str, Any]) -> CheckOutcome:
        rows, keys = int(values["rows"]), int(values["distinct_keys"])
        key = ", ".join(columns)
        extra = rows - keys
        text = f"({key}) is unique" if not extra else f"{extra} of {rows} rows repeat a value of ({key}) seen before"
        return CheckOutcome(extra == 0, text, {"rows": rows, "distinct_keys": keys, "extra_rows": extra})

    def alone(context: CheckContext) -> CheckOutcome:
        F = _functions()
        found = _read(context).groupBy(*columns).count().agg(F.sum("count"), F.count(F.lit(1))).first()
        return evaluate({"rows": found[0] or 0, "distinct_keys": found[1]})

    def proven(frame: Any) -> dict[str, Any] | None:
        # Every row has a key of its own when the plan proves the columns unique: counting rows is enough.
        return {"rows": _rows(), "distinct_keys": _rows()} if proves_unique(frame, columns) else None

    aggregation = Aggregation(expressions, evaluate, observable=False, observed_in=proven)
    return Check(name or f"unique_{'_'.join(columns)}", alone, blocking=blocking, aggregation=aggregation)


def row_count_within_ratio_of_inputs(
    low: float, high: float, *, name: str | None = None, blocking: bool = True
) -> Check:
    """The output's rows are between `low` and `high` times the rows of its declared inputs together.

    Metrics: `rows`, `input_rows`, `ratio` (when finite).
    """
    _need_ratio("row_count_within_ratio_of_inputs", low, high)

    def row_counts(context: CheckContext) -> dict[str, list[str]]:
        locations = list(context.input_locations.values())
        return {**own_rows(context), "input_rows": locations} if locations else {}

    def evaluate(values: Mapping[str, Any]) -> CheckOutcome:
        if "input_rows" not in values:
            return CheckOutcome(False, "no input to compare with")
        return _ratio_outcome(int(values["rows"]), int(values["input_rows"]), "input rows", low, high, "input_rows")

    def alone(context: CheckContext) -> CheckOutcome:
        if not context.input_locations:
            return evaluate({})
        inputs = context.spark.read.parquet(*context.input_locations.values()).count()
        return evaluate({"rows": _read(context).count(), "input_rows": inputs})

    aggregation = Aggregation(dict, evaluate, row_counts)
    return Check(name or "row_count_within_ratio_of_inputs", alone, blocking=blocking, aggregation=aggregation)


def row_count_within_ratio_of_previous(
    low: float, high: float, *, name: str | None = None, blocking: bool = True
) -> Check:
    """The output's rows are between `low` and `high` times those of the ref's previous Live instance.

    A first build has nothing to compare with and passes, saying so: the check guards against a
    rebuild that silently lost (or multiplied) data, not against a partition's first appearance.
    Metrics: `rows`, `previous_rows`, `ratio` (when finite).
    """
    _need_ratio("row_count_within_ratio_of_previous", low, high)

    def row_counts(context: CheckContext) -> dict[str, list[str]]:
        previous = context.previous_location
        return {**own_rows(context), **({"previous_rows": [previous]} if previous is not None else {})}

    def evaluate(values: Mapping[str, Any]) -> CheckOutcome:
        rows = int(values["rows"])
        if "previous_rows" not in values:
            return CheckOutcome(True, f"{rows} rows; no earlier Live instance to compare with", {"rows": rows})
        previous = int(values["previous_rows"])
        return _ratio_outcome(rows, previous, "rows of the previous instance", low, high, "previous_rows")

    def alone(context: CheckContext) -> CheckOutcome:
        values = {"rows": _read(context).count()}
        if context.previous_location is not None:
            values["previous_rows"] = context.spark.read.parquet(context.previous_location).count()
        return evaluate(values)

    aggregation = Aggregation(dict, evaluate, row_counts)
    return Check(name or "row_count_within_ratio_of_previous", alone, blocking=blocking, aggregation=aggregation)


def _need_ratio(what: str, low: float, high: float) -> None:
    if problem := number_problem(low, "low", 0) or number_problem(high, "high", 0):  # "1", True, NaN, inf, -1
        raise CheckDeclarationError(f"{what} needs 0 <= low <= high (finite numbers): {problem}")
    if low > high:
        raise CheckDeclarationError(f"{what} needs 0 <= low <= high (finite numbers), not {low}, {high}")


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
