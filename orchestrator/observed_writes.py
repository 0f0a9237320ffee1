"""A job's checks computed in its own write: `ctx.write(ref, frame)` observes the frame as Spark writes it.

The gate's aggregate checks (`Check.aggregate`, the ready-made ones) are aggregations over an output's
rows. When a job writes an output with `JobContext.write`, those aggregations are attached to the
written frame (`DataFrame.observe`): Spark computes them as the rows pass on their way to the files,
in the write's own action, so the gate has the output's values without reading it back (no listing,
no schema inference, no Spark job of its own). The output's row count is observed too; it becomes the
instance's recorded `row_count` and the count the ready-made checks use for the output itself.

What cannot be observed is left to the gate's shared pass (`check_pass`), as for an output the job
wrote by itself: a check declared `observable=False`, a check whose expressions Spark refuses to
observe (found once, on the first write, then remembered), and `unique` (it counts distinct keys,
which Spark does not allow in observed metrics) unless the written frame's plan proves the key
(`plan_keys`), when counting rows is all it needs. An observation that did not complete (the write failed, or ran on
an engine that reports none) leaves the whole output to the pass: the gate never judges on values
Spark did not compute.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from partbuild.orchestrator.checks import Check

ROWS = "__partbuild_rows"  # the observed row count's name among the observed values

logger = logging.getLogger("partbuild.checks")


@dataclass(frozen=True)
class Observed:
    """What the write of one output observed: its rows, and per check position the values by name."""

    rows: int
    values: Mapping[int, Mapping[str, Any]] = field(default_factory=dict)
    # The written frame's schema (JSON, every field nullable, as parquet reads it back): a read of the
    # output for what was not observed needs no schema inference.
    schema: str | None = None


class WriteObserver:
    """Attaches a job's observable aggregate checks to the frames its runs write, and reads their values back.

    One per job's checks in a process: which checks Spark refused to observe is learned once.
    """

    def __init__(self, checks: Sequence[Check]) -> None:
        self._checks = {position: check for position, check in enumerate(checks) if check.aggregation is not None}
        self._refused: set[int] = set()  # positions Spark would not observe (found on a first write)

    def observe(self, frame: Any) -> tuple[Any, Watch]:
        """`frame` with the observations attached, and the watch that reads them after the write."""
        from pyspark.sql import functions as F

        named: dict[int, dict[str, Any]] = {}
        for position, check in self._checks.items():
            if position in self._refused:
                continue
            assert check.aggregation is not None
            try:  # the check's own Python: if it fails here, the pass computes (and charges) it
                columns = check.aggregation.observed_columns(frame)
            except Exception:
                logger.debug("check %s: no expressions to observe", check.name, exc_info=True)
                continue
            if columns is not None:
                named[position] = dict(columns)
        rows = F.count(F.lit(1)).alias(ROWS)
        try:
            return self._attach(frame, rows, named)
        except Exception as exc:
            if not _is_analysis_error(exc) or not named:
                raise
        for position in list(named):  # which check Spark refuses: each alone, once per process
            try:
                self._attach(frame, rows, {position: named[position]})
            except Exception as exc:
                if not _is_analysis_error(exc):
                    raise
                name = self._checks[position].name
                logger.info("check %s cannot be observed in the write; the gate computes it", name)
                self._refused.add(position)
                del named[position]
        return self._attach(frame, rows, named)

    @staticmethod
    def _attach(frame: Any, rows: Any, named: Mapping[int, Mapping[str, Any]]) -> tuple[Any, Watch]:
        from pyspark.sql import Observation

        aliases = {(at, name): f"c{at}_{n}" for at, columns in named.items() for n, name in enumerate(columns)}
        exprs = [rows, *(named[position][name].alias(alias) for (position, name), alias in aliases.items())]
        observation = Observation()
        return frame.observe(observation, *exprs), Watch(observation, aliases, _nullable(frame.schema.jsonValue()))


@dataclass
class Watch:
    """One write's observation and the names its values go back to."""

    observation: Any
    aliases: Mapping[tuple[int, str], str]
    schema: str | None = None
    _found: Observed | None = field(default=None, init=False, repr=False)  # read once: a completed one stays

    def observed(self) -> Observed | None:
        """The values, once the write completed them (None: not observed; the gate's pass computes them)."""
        if self._found is not None:  # the gate and the outcome both ask: Spark is asked once
            return self._found
        try:
            found = _completed(self.observation)
        except Exception:  # an engine that observed nothing: the pass reads the output instead
            logger.debug("a write's observation has no values", exc_info=True)
            return None
        if found is None or found.get(ROWS) is None:
            return None
        values: dict[int, dict[str, Any]] = {}
        for (position, name), alias in self.aliases.items():
            values.setdefault(position, {})[name] = found[alias]
        self._found = Observed(int(found[ROWS]), values, self.schema)
        return self._found


def _completed(observation: Any) -> dict[str, Any] | None:
    """The observation's values without waiting: None if no action completed it (PySpark's `get` would block)."""
    java = getattr(observation, "_jo", None)
    if java is not None and not java.future().isCompleted():
        return None
    return dict(observation.get)  # Spark Connect's `get` answers at once, or raises if nothing was observed


def _nullable(schema: Any) -> str:
    """A schema's JSON with every field, element and value nullable: what reading the parquet gives back."""
    return json.dumps(_loosened(schema), sort_keys=True)


def _loosened(node: Any) -> Any:
    if isinstance(node, dict):
        return {k: True if k in _NULLABILITY else _loosened(v) for k, v in node.items()}
    if isinstance(node, list):
        return [_loosened(item) for item in node]
    return node


_NULLABILITY = frozenset({"nullable", "containsNull", "valueContainsNull"})


def _is_analysis_error(exc: Exception) -> bool:
    from pyspark.errors import AnalysisException

    return isinstance(exc, AnalysisException)
