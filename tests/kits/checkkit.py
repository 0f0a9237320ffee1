"""Quality checks on real Spark for the tests: outputs written as parquet, a user aggregate check, W1-like
checks of every kind, and each check computed alone (the answers the gate's pass must give)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from partbuild.orchestrator.checks import (
    Check,
    CheckContext,
    CheckOutcome,
    CheckTarget,
    no_nulls,
    row_count_at_least,
    row_count_within_ratio_of_inputs,
    row_count_within_ratio_of_previous,
    unique,
)
from partbuild.proto.v1 import events_pb2 as pb


def written(spark: Any, path: Path, rows: list[tuple[Any, ...]], schema: str) -> str:
    spark.createDataFrame(rows, schema).coalesce(1).write.mode("overwrite").parquet(str(path))
    return str(path)


def no_future_clicks() -> Check:
    """A user's aggregate check, sharing the pass with the ready-made ones."""

    def columns() -> dict[str, Any]:
        from pyspark.sql import functions as F

        return {"late": F.count(F.when(F.col("k") > 100, 1)), "top": F.max("k")}

    def evaluate(values: dict[str, Any]) -> CheckOutcome:
        return CheckOutcome(
            values["late"] == 0, f"{values['late']} late, top {values['top']}", {"late": values["late"]}
        )

    return Check.aggregate("no_late", columns, evaluate)


def six_and_one() -> list[Check]:
    return [
        row_count_at_least(1),
        no_nulls("k", "v"),
        unique("k"),
        row_count_within_ratio_of_inputs(0.1, 1),
        row_count_within_ratio_of_previous(0.5, 2),
        row_count_at_least(3, name="three_rows", blocking=False),
        no_future_clicks(),
    ]


def answers(results: pb.InstanceChecks) -> dict[str, CheckOutcome]:
    return {r.name: CheckOutcome(r.passed, r.description, dict(r.metrics)) for r in results.results}


def alone(spark: Any, checks: list[Check], target: CheckTarget) -> dict[str, CheckOutcome]:
    """Each check computed alone, as checks ran before the shared pass (metrics as the event keeps them)."""
    ctx = CheckContext(
        target.ref, "u", target.location, "x", target.input_locations, lambda: spark, target.previous_location
    )
    found = {check.name: check.fn(ctx) for check in checks}
    return {
        name: CheckOutcome(o.passed, o.description, {k: float(v) for k, v in o.metadata.items()})
        for name, o in found.items()
    }
