"""What job runs logged (`Database.run_logs`), on SQLite and PostgreSQL: bounded, readable while a run goes on.

One row per line: (run id, line number, time, level, text). The executor's writer
(`orchestrator/run_logs.py`) numbers a run's lines from 1, redacts them, batches
them (one transaction per flush, not per line) and keeps each run under its cap;
this store only writes, pages, counts and prunes. Lines are not history: the age
cap (`prune`) drops every line older than the cutoff, whichever run it belongs to.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from partbuild.state.db import begin_write
from partbuild.state.schema import run_log_lines as table


@dataclass(frozen=True, slots=True)
class RunLogLine:
    """One line a run logged: `line_no` counts from 1 within the run (the paging cursor)."""

    job_run_id: str
    line_no: int
    time_ms: int
    level: str
    text: str


class RunLogStore:
    """The `run_log_lines` table of one database; see the module docstring."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    def append(self, lines: Sequence[RunLogLine]) -> None:
        """Write these lines (of any runs) in one transaction."""
        if not lines:
            return
        rows = [
            {"job_run_id": x.job_run_id, "line_no": x.line_no, "time_ms": x.time_ms, "level": x.level, "text": x.text}
            for x in lines
        ]
        with begin_write(self._engine) as conn:
            conn.execute(sa.insert(table), rows)

    def lines(self, job_run_id: str, *, after: int = 0, limit: int = 1000) -> list[RunLogLine]:
        """The run's lines numbered above `after`, in order, at most `limit`."""
        query = (
            sa.select(table.c.line_no, table.c.time_ms, table.c.level, table.c.text)
            .where(table.c.job_run_id == job_run_id, table.c.line_no > after)
            .order_by(table.c.line_no)
            .limit(limit)
        )
        with self._engine.connect() as conn:
            return [RunLogLine(job_run_id, r.line_no, r.time_ms, r.level, r.text) for r in conn.execute(query)]

    def last_line_no(self, job_run_id: str) -> int:
        """The run's highest line number (0: no lines)."""
        query = sa.select(sa.func.max(table.c.line_no)).where(table.c.job_run_id == job_run_id)
        with self._engine.connect() as conn:
            return int(conn.execute(query).scalar() or 0)

    def size(self, job_run_id: str | None = None) -> tuple[int, int]:
        """(lines, characters of text) kept for one run, or for all runs."""
        query = sa.select(sa.func.count(), sa.func.coalesce(sa.func.sum(sa.func.length(table.c.text)), 0))
        if job_run_id is not None:
            query = query.where(table.c.job_run_id == job_run_id)
        with self._engine.connect() as conn:
            count, chars = conn.execute(query).one()
        return int(count), int(chars)

    def prune(self, older_than_ms: int) -> int:
        """Delete every line logged before `older_than_ms` (the age cap); returns how many."""
        with begin_write(self._engine) as conn:
            return int(conn.execute(sa.delete(table).where(table.c.time_ms < older_than_ms)).rowcount or 0)
