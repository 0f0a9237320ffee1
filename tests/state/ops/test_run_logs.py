"""The run-log store (`Database.run_logs`) on both backends: paging, counting, the age cap, a reopened database."""

from __future__ import annotations

from partbuild.state.database import Database
from partbuild.state.ops.run_logs import RunLogLine


def _lines(run_id: str, first: int, count: int, time_ms: int) -> list[RunLogLine]:
    return [RunLogLine(run_id, n, time_ms, "INFO", f"line {n}") for n in range(first, first + count)]


def test_lines_are_paged_by_line_number_per_run(database: Database) -> None:
    store = database.run_logs
    store.append(_lines("run-a", 1, 5, 1_000) + _lines("run-b", 1, 2, 1_000))
    assert [x.line_no for x in store.lines("run-a", limit=3)] == [1, 2, 3]
    assert [x.text for x in store.lines("run-a", after=3)] == ["line 4", "line 5"]
    assert store.lines("run-a", after=5) == []
    assert store.lines("run-c") == []
    assert store.last_line_no("run-a") == 5
    assert store.last_line_no("run-c") == 0
    assert store.size("run-b") == (2, len("line 1") * 2)
    assert store.size() == (7, len("line 1") * 7)


def test_prune_drops_only_lines_older_than_the_cutoff(database: Database) -> None:
    store = database.run_logs
    store.append(_lines("old", 1, 3, 1_000) + _lines("new", 1, 2, 5_000) + _lines("mixed", 1, 1, 1_000))
    store.append(_lines("mixed", 2, 1, 9_000))
    assert store.prune(older_than_ms=5_000) == 4
    assert store.lines("old") == []
    assert [x.line_no for x in store.lines("new")] == [1, 2]
    assert [x.line_no for x in store.lines("mixed")] == [2]
    assert store.prune(older_than_ms=5_000) == 0


def test_lines_survive_reopening_the_database(db: str) -> None:
    """An orchestrator restart opens the database again: the lines are still there."""
    with Database.open(db) as first:
        first.run_logs.append(_lines("run-a", 1, 3, 1_000))
    with Database.open(db) as second:
        assert [x.text for x in second.run_logs.lines("run-a")] == ["line 1", "line 2", "line 3"]
