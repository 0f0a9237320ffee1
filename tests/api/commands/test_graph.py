"""`partbuild graph show` and `partbuild jobs summary NAME` (--db, with gridkit's graph file) over the W1 history."""

from __future__ import annotations

import pytest

from partbuild.api.cli import main

from gridkit import write_history


def test_the_cli_shows_the_graph_and_a_summary(sqlite_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    write_history(sqlite_url)
    graph_file = "tests/kits/gridkit_graph.py"
    for args in (["graph", "show"], ["jobs", "summary", "daily_clicks"]):
        with pytest.raises(SystemExit) as exited:
            main([*args, "--db", sqlite_url, "--graph", graph_file])
        assert exited.value.code in (0, None)
    out = capsys.readouterr().out
    assert "raw_clicks -> daily_clicks" in out and "daily_clicks -> weekly_clicks" in out
    assert "daily_clicks (job, agg/daily_clicks/site=0/date={date:date}): 65 partitions: " in out
    assert "failed 5, tainted 1, warning 1" in out
    with pytest.raises(SystemExit) as exited:
        main(["jobs", "summary", "nope", "--db", sqlite_url, "--graph", graph_file])
    assert exited.value.code == 2
