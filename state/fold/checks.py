"""Quality check results carried by job run outcomes (issue 24): their rules, the side table, reads as of a seq.

A JobRunSuccess or JobRunFailure may carry `checks`: the results of the job's checks on
each output instance (orchestrator/checks.py runs them before the outcome is appended).
The fold validates them with the outcome (instances the run builds, each once; names
non-empty, bounded and unique per instance; metrics finite) and rejects a success whose
results hold a failed blocking check or an errored one: the gate must not let it through.

The results live in a side table, `BuildState.check_results`: instance UUID -> one entry
per outcome that checked it, oldest first, each `(seq, results)` with `results` a tuple of
`CheckRow`s, plain values only. Not a slot on `Instance`: most instances have no checks,
and a slot would cost every one of them. An instance gets a new entry each time a run of it
ends with checks (a retried run checks it again), so a read as of seq N keeps the entries at
or before N, which is what a replay to N holds. The table is digested (an `Items` section:
empty, it hashes nothing, so logs without checks keep their digests), pickled in snapshots
with the rest of the state, and retention drops the entries of what it drops.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING

from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.fold.validation import MAX_ID_LENGTH, short

if TYPE_CHECKING:
    from partbuild.state.fold.build_state import BuildState

# (name, passed, blocking, errored, description, metrics as sorted (key, value) pairs)
CheckRow = tuple[str, bool, bool, bool, str, tuple[tuple[str, float], ...]]
# (seq of the outcome, its results on the instance)
CheckEntry = tuple[int, tuple[CheckRow, ...]]
# What an outcome records: (instance UUID, its results), in the event's order.
ChecksPlan = tuple[tuple[str, tuple[CheckRow, ...]], ...]

NO_CHECKS: ChecksPlan = ()


def checks_problem(
    checks: Sequence[pb.InstanceChecks], built: frozenset[str] | tuple[str, ...], run_id: str, success: bool
) -> str | ChecksPlan:
    """Why an outcome's checks are invalid, or what to record (pure: the check phase's part)."""
    if not checks:
        return NO_CHECKS
    plan: list[tuple[str, tuple[CheckRow, ...]]] = []
    seen: set[str] = set()
    for checked in checks:
        uuid = checked.instance_uuid
        if uuid not in built:
            return f"checks for instance {short(uuid)}, which job run {short(run_id)} does not build"
        if uuid in seen:
            return f"checks for instance {uuid} are listed more than once"
        seen.add(uuid)
        rows = check_rows(checked.results, uuid, success)
        if type(rows) is str:
            return rows
        plan.append((uuid, rows))  # type: ignore[arg-type]
    return tuple(plan)


def check_rows(results: Sequence[pb.CheckResult], uuid: str, success: bool) -> str | tuple[CheckRow, ...]:
    """Why one instance's results are invalid, or its rows; `success`: failed blocking or errored ones are refused."""
    rows: list[CheckRow] = []
    names: set[str] = set()
    for result in results:
        name = result.name
        if not name or len(name) > MAX_ID_LENGTH:
            return f"a check name on instance {uuid} is empty or longer than {MAX_ID_LENGTH} characters"
        if name in names:
            return f"check {short(name)} is listed more than once on instance {uuid}"
        names.add(name)
        if result.passed and result.errored:
            return f"check {short(name)} on instance {uuid} both passed and errored"
        if success and (result.errored or (result.blocking and not result.passed)):
            what = "errored" if result.errored else "is a failed blocking check"
            return f"a success cannot carry check {short(name)} on instance {uuid}: it {what}"
        metrics = tuple(sorted(result.metrics.items()))
        if not all(math.isfinite(value) for _, value in metrics):
            return f"check {short(name)} on instance {uuid} has a metric that is not a finite number"
        rows.append((name, result.passed, result.blocking, result.errored, result.description, metrics))
    return tuple(rows)


def record_checks(state: BuildState, seq: int, plan: ChecksPlan) -> None:
    """The apply phase's part: one entry per checked instance."""
    table = state.check_results
    for uuid, rows in plan:
        table[uuid] = (*table.get(uuid, ()), (seq, rows))


def latest_checks(entries: tuple[CheckEntry, ...]) -> CheckEntry | None:
    """The newest entry (the results of the last outcome that checked the instance), or None."""
    return entries[-1] if entries else None


class PastCheckResults(Mapping[str, tuple[CheckEntry, ...]]):
    """`check_results` as of a seq: each instance's entries at or before it (what a replay to it holds)."""

    def __init__(self, live: Mapping[str, tuple[CheckEntry, ...]], seq: int) -> None:
        self._live = live
        self._seq = seq

    def __getitem__(self, uuid: str) -> tuple[CheckEntry, ...]:
        kept = tuple(entry for entry in self._live[uuid] if entry[0] <= self._seq)
        if not kept:
            raise KeyError(uuid)
        return kept

    def __iter__(self) -> Iterator[str]:
        return (uuid for uuid, entries in self._live.items() if entries[0][0] <= self._seq)

    def __len__(self) -> int:
        return sum(1 for _ in self)
