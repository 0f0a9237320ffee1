"""What a quality check's result is called, and the worst of several: shared by the fold's reads, the store's
grid cells and the API's models (which load no protobuf: a CLI read through a server imports them)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal

# What a check's result means: passed; warning (a non-blocking check failed: the instance may be Live);
# failed (a blocking check failed: it kept the instance from going Live); errored (the check raised).
CheckResultName = Literal["passed", "warning", "failed", "errored"]
# Worst first: a lineage node's badge shows the worst result of its checks.
CHECK_RESULTS_WORST_FIRST: tuple[CheckResultName, ...] = ("failed", "errored", "warning", "passed")


def check_result_name(passed: bool, blocking: bool, errored: bool) -> CheckResultName:
    """passed, warning, failed or errored (an errored check never counts as passed)."""
    if errored:
        return "errored"
    if passed:
        return "passed"
    return "failed" if blocking else "warning"


def worst_check_result(results: Iterable[CheckResultName]) -> CheckResultName | None:
    """The worst of some checks' results (None for no checks)."""
    found = set(results)
    return next((name for name in CHECK_RESULTS_WORST_FIRST if name in found), None)
