"""Each job run's code version in a row of its own, so the runs a code change made stale are found by range.

A replica counts a job's stale partitions (Live, built by a run of a code version other than the job's
current one) from the store. Reading every run to learn its version made its first job page cost every run
of the log (211,860 decoded at 1M instances). So every run that names a code version has a row of the kind
`RUN_VERSION` in `state_records`, written with the run's own row, with an empty body; its id sorts one job's
runs by version: `<len(job)>:<job><len(version)>:<version>/<run id>`. The lengths make each part end where
it says, so the runs of a job under one version are exactly the ids with that version's prefix, and the runs
of every other version are the two ranges either side of it. A run's job and version never change, and
runs are never dropped, so a row, once written, stays as it is.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any, Final

import sqlalchemy as sa

from partbuild.state.schema import state_records as table
from partbuild.state.store.driver import DriverQuery

if TYPE_CHECKING:
    from sqlalchemy.engine import Connection

    from partbuild.state.fold.build_state import BuildState
    from partbuild.state.fold.records import JobRun


def _part(text: str) -> str:
    return f"{len(text)}:{text}"


def run_version_key(job_label: str, code_version: str, run_id: str) -> str:
    """The id of a run's version row."""
    return f"{_part(job_label)}{_part(code_version)}/{run_id}"


def run_version_keys(runs: Iterable[JobRun]) -> Iterator[str]:
    """The version rows' ids of those of `runs` that name a code version."""
    for run in runs:
        if run.code_version is not None:
            yield run_version_key(run.job_label, run.code_version, run.job_run_id)


def parse_key(key: str) -> tuple[str, str, str] | None:
    """(job, version, run id) of a version row's id; None for an id this kind is never written with."""
    parts: list[str] = []
    at = 0
    for _ in range(2):
        colon = key.find(":", at)
        if colon < 0 or not (key[at:colon].isascii() and key[at:colon].isdigit()):
            return None
        end = colon + 1 + int(key[at:colon])
        if end >= len(key):
            return None
        parts.append(key[colon + 1 : end])
        at = end
    if key[at] != "/":
        return None
    return parts[0], parts[1], key[at + 1 :]


def run_of_key(state: BuildState, key: str) -> JobRun | None:
    """The run a version row's id names, if `state` holds it with that job and version."""
    parsed = parse_key(key)
    if parsed is None:
        return None
    label, version, run_id = parsed
    run = state.job_runs.get(run_id)
    if run is None or run.job_label != label or run.code_version != version or key != run_version_key(*parsed):
        return None
    return run


def version_value(state: BuildState, key: str) -> tuple[Any, ...] | None:
    """A version row's body: empty (its id says it all), for a run `state` holds; else None."""
    return None if run_of_key(state, key) is None else ()


_ident = table.c.id
_RANGE: Final = DriverQuery(
    sa.select(table.c.created, _ident)
    .where(
        table.c.kind == sa.bindparam("kind", type_=table.c.kind.type),
        _ident >= sa.bindparam("low", type_=_ident.type),
        _ident < sa.bindparam("high", type_=_ident.type),
        table.c.created > sa.bindparam("after", type_=table.c.created.type),
        table.c.created <= sa.bindparam("upto", type_=table.c.created.type),
    )
    .order_by(_ident)
)


def runs_of_other_versions(
    conn: Connection, kind: int, job_label: str, current: str, after: int, upto: int
) -> list[str]:
    """The ids of the runs of `job_label` created in seqs (`after`, `upto`] whose code version is not `current`,
    from their version rows (`kind`): two range scans, either side of the current version's runs; in creation
    order (created seq, then id), as the runs' own rows list them."""
    # A job's ids are its part then a version's length (digits, below ':'); the current version's, its prefix
    # `mine` (ending in '/', just below '0').
    job = _part(job_label)
    mine = f"{job}{_part(current)}/"
    found: list[tuple[int, str]] = []
    for low, high in ((f"{job}0", mine), (f"{mine[:-1]}0", f"{job}:")):
        params = {"kind": kind, "low": low, "high": high, "after": after, "upto": upto}
        for created, key in _RANGE.all(conn, params):
            parsed = parse_key(key)
            if parsed is not None:
                found.append((created, parsed[2]))
    return [run_id for _, run_id in sorted(found)]
