"""The CLI's human output (api/render.py): a table prints one line per row, piped and on a terminal, with
every column; a multi-line error shows its first meaningful line; `wants show` says why a want failed.

The history: a weekly partition waits for a daily one (a derivative want), and the daily's run fails
with py4j's error and a 30-line Java stack, as runs failed before `root_cause`.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from rich.console import Console

from partbuild.api import render
from partbuild.api.models.runs import JobRunOut
from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.database import Database
from partbuild.state.log.events import envelope, from_job_run, manual
from partbuild.state.rules.ids import instance_uuid

from clikit import run_cli

WEEKLY, DAILY = "agg/weekly/week=2026-W01", "agg/daily/date=2026-01-01"
STACK = "\n".join(f"\tat org.apache.spark.sql.execution.Foo.bar(Foo.scala:{n})" for n in range(30))
ERROR = (
    "Py4JJavaError: An error occurred while calling o125224.parquet.\n"
    ": org.apache.spark.SparkException: [FAILED_READ_FILE.CANNOT_READ_FILE_FOOTER] Encountered error while "
    "reading file file:/data/raw/part-0.parquet. Could not read footer.\n" + STACK
)
RUN_COLUMNS = ["JOB RUN", "JOB", "STATE", "ATTEMPT", "REFS", "CREATED SEQ", "ERROR"]


@pytest.fixture
def failed_db(tmp_path: Path) -> str:
    """A SQLite log: the weekly waits for the daily, whose run fails with a 30-line error."""
    url = f"sqlite:///{tmp_path / 'partbuild.db'}"
    events = [
        envelope(pb.WantCreate(want_id="weekly", partition_refs=[WEEKLY]), source=manual("ann")),
        envelope(pb.JobRunBuffer(job_run_id="run-w", job_label="weekly", instance_uuids=[instance_uuid(1, WEEKLY)])),
        envelope(pb.JobRunMissingDeps(job_run_id="run-w", missing_refs=[DAILY])),
        envelope(
            pb.WantCreate(want_id="daily", partition_refs=[DAILY], parent_want_id="weekly"),
            source=from_job_run("run-w"),
        ),
        envelope(pb.JobRunBuffer(job_run_id="run-d", job_label="daily", instance_uuids=[instance_uuid(4, DAILY)])),
        envelope(pb.JobRunFailure(job_run_id="run-d", error_class=pb.ERROR_CLASS_PERMANENT, message=ERROR)),
    ]
    with Database.open(url, auto_upgrade=True) as db:
        db.log.append(events, expected_head=0)
    return url


def _lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]


def test_a_failed_run_with_a_30_line_error_is_one_line_in_the_runs_table_piped(
    capsys: pytest.CaptureFixture[str], failed_db: str
) -> None:
    """Piped (capsys is no terminal): every column, one line per run, the error's meaningful line."""
    code, out, _ = run_cli(capsys, "runs", "--state", "failed", "--db", failed_db)
    assert code == 0
    header, *rows = _lines(out)
    assert header.split() == " ".join(RUN_COLUMNS).split()
    assert len(rows) == 1 and "run-d" in rows[0] and "failed" in rows[0]
    assert "[FAILED_READ_FILE.CANNOT_READ_FILE_FOOTER]" in rows[0]
    assert "An error occurred while calling" not in out and "\tat" not in out and "Foo.scala" not in out


def _run(number: int, **fields: object) -> JobRunOut:
    values: dict[str, object] = {
        "job_run_id": f"run-{number}-0123456789abcdef",
        "job_label": "daily_clicks",
        "state": "failed",
        "instance_uuids": ["u"],
        "refs": [f"agg/daily_clicks/site=0/date=2026-01-0{number}", "agg/daily_clicks/site=0/date=2026-01-09"],
        "created_seq": 10 + number,
        "updated_seq": 20,
        "created_ms": 0,
        "updated_ms": 0,
        "last_heartbeat_ms": 0,
        "attempt": 1,
        "inputs": [],
        "error_class": "permanent",
        "error_message": ERROR,
        "retry_after_ms": 0,
        "missing_refs": [],
        "cancel_reason": None,
    }
    return JobRunOut.model_validate({**values, **fields})


@pytest.mark.parametrize(("width", "terminal"), [(200, False), (120, True), (80, True)])
def test_each_run_is_one_line_with_every_column_at_any_width(width: int, terminal: bool) -> None:
    """Narrower than the table, rich narrows the text columns (cut with "…"), never a row onto two lines,
    and drops no column (it would give a column nothing left of its width)."""
    out = io.StringIO()
    console = Console(file=out, width=width, force_terminal=terminal, color_system=None)
    console.print(render.runs_table([_run(1), _run(2, error_message="RuntimeError: one line")]))
    header, *rows = _lines(out.getvalue())
    assert header.split() == " ".join(RUN_COLUMNS).split()
    assert [row.split()[0] for row in rows] == ["run-1-0123456789abcdef", "run-2-0123456789abcdef"]
    assert all(len(line) <= width for line in (header, *rows))
    assert "\tat" not in out.getvalue()


def test_multi_line_notes_and_refs_stay_on_their_row() -> None:
    """The history table's notes and the wants table's refs: the first line, the count of the others."""
    out = io.StringIO()
    console = Console(file=out, width=200, color_system=None)
    failed = _run(3).model_copy(update={"refs": [f"r/{n}" for n in range(400)], "error_message": "\n\n  boom  \n"})
    console.print(render.runs_table([failed]))
    (row,) = _lines(out.getvalue())[1:]
    assert "r/0 (+399 more)" in row and "permanent: boom" in row
    assert render.one_line("x" * 500).endswith("…") and len(render.one_line("x" * 500)) == render.MAX_CELL


def test_wants_show_names_the_upstream_partition_that_failed_the_want(
    capsys: pytest.CaptureFixture[str], failed_db: str
) -> None:
    """The partition that really failed, what it failed upstream of, its instance, its error's line."""
    code, out, _ = run_cli(capsys, "wants", "show", "weekly", "--db", failed_db)
    assert code == 0
    lines = out.splitlines()
    at = next(index for index, line in enumerate(lines) if line.startswith("failed because"))
    assert f"{DAILY} failed, upstream of {WEEKLY} (instance {instance_uuid(4, DAILY)})" in lines[at]
    assert "org.apache.spark.SparkException: [FAILED_READ_FILE.CANNOT_READ_FILE_FOOTER]" in lines[at + 1]
    assert "\tat" not in out and "An error occurred while calling" not in out

    code, out, _ = run_cli(capsys, "wants", "show", "weekly", "--db", failed_db, "--json")
    (failure,) = json.loads(out)["failures"]
    assert (failure["ref"], failure["via"], failure["reason"]) == (DAILY, WEEKLY, ERROR)
