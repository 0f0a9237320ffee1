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
from collections.abc import Container, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING

from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.fold.validation import MAX_ID_LENGTH, short
from partbuild.state.rules.check_results import CheckResultName, check_result_name, worst_check_result

if TYPE_CHECKING:
    from partbuild.state.fold.build_state import BuildState

# (name, passed, blocking, errored, description, metrics as sorted (key, value) pairs[, duration in ms])
CheckRow = (
    tuple[str, bool, bool, bool, str, tuple[tuple[str, float], ...]]
    | tuple[str, bool, bool, bool, str, tuple[tuple[str, float], ...], int]
)
# (seq of the outcome, its results on the instance)
CheckEntry = tuple[int, tuple[CheckRow, ...]]
# What an outcome records: (instance UUID, its results), in the event's order.
ChecksPlan = tuple[tuple[str, tuple[CheckRow, ...]], ...]
# (job, check, result) -> how many results of it were recorded since the log began (`BuildState.check_totals`).
CheckTotals = dict[tuple[str, str, CheckResultName], int]

NO_CHECKS: ChecksPlan = ()


def checks_problem(
    checks: Sequence[pb.InstanceChecks],
    built: frozenset[str] | tuple[str, ...],
    run_id: str,
    success: bool,
    failed: Container[str] = (),
) -> str | ChecksPlan:
    """Why an outcome's checks are invalid, or what to record (pure: the check phase's part).

    A success refuses failed blocking or errored results, but on the outputs in `failed` (those that
    failed on their own: their checks say why)."""
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
        rows = check_rows(checked.results, uuid, success and uuid not in failed)
        if isinstance(rows, str):
            return rows
        plan.append((uuid, rows))
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
        if result.duration_ms < 0:
            return f"check {short(name)} on instance {uuid} has a negative duration"
        row = (name, result.passed, result.blocking, result.errored, result.description, metrics)
        # Since issue 34 a row may end with its duration: only when set, so older logs keep their digests.
        rows.append((*row, result.duration_ms) if result.duration_ms else row)
    return tuple(rows)


def gate_problem(required: Sequence[str], plan: ChecksPlan, outputs: Iterable[str]) -> str | None:
    """Why outputs going Live lack a passing result of a blocking check their run's job declared, if they do."""
    rows_by_uuid = dict(plan)
    for uuid in outputs:
        passed = {row[0] for row in rows_by_uuid.get(uuid, ()) if row[1] and not row[3]}
        missing = [name for name in required if name not in passed]
        if missing:
            return f"instance {uuid} cannot go Live without a passing result of blocking check {short(missing[0])}"
    return None


def record_checks(state: BuildState, seq: int, plan: ChecksPlan, job_label: str) -> None:
    """The apply phase's part: one entry per checked instance, each result tallied under `job_label` (the job
    whose run checked it: an outcome's run, or the run that built a rechecked instance)."""
    table, touched, totals = state.check_results, state.touched, state.check_totals
    for uuid, rows in plan:
        table[uuid] = (*table.get(uuid, ()), (seq, rows))
        if touched is not None:  # a recheck's results change no state: the instance's row needs them
            touched.instances.add(uuid)
        for row in rows:
            key = (job_label, row[0], check_result_name(row[1], row[2], row[3]))
            totals[key] = totals.get(key, 0) + 1


def latest_checks(entries: tuple[CheckEntry, ...]) -> CheckEntry | None:
    """The newest entry (the results of the last outcome that checked the instance), or None."""
    return entries[-1] if entries else None


def worst_latest(entries: tuple[CheckEntry, ...]) -> CheckResultName | None:
    """The worst result of an instance's latest checks (None: never checked)."""
    latest = latest_checks(entries)
    if latest is None:
        return None
    return worst_check_result(check_result_name(row[1], row[2], row[3]) for row in latest[1])


def warned(entries: tuple[CheckEntry, ...]) -> bool:
    """Whether the latest checks of an instance warned or errored (a Live one's grid cell says `warning`)."""
    return worst_latest(entries) in ("warning", "errored")


def recorded_metrics(entries: tuple[CheckEntry, ...]) -> dict[str, dict[str, float]]:
    """Check name -> metric -> value, from the instance's latest checked outcome (errored checks recorded none)."""
    latest = latest_checks(entries)
    if latest is None:
        return {}
    return {row[0]: dict(row[5]) for row in latest[1] if not row[3]}


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
