"""A bad declaration in a graph file, through the real `partbuild` console script: exit code 2, exactly one line
on stderr, no traceback (the in-process table of every declaration error: tests/api/test_declaration_errors.py)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.process

FEBRUARY_30 = """\
from partbuild.orchestrator.graph import Graph
from partbuild.orchestrator.schedules import Schedule

graph = Graph([], schedules=[Schedule("feb", lambda tick: [], cron="0 0 30 2 *")])
"""
NEGATIVE_ROWS = """\
from partbuild.orchestrator.checks import row_count_at_least
from partbuild.orchestrator.graph import Graph, Job


def run(ctx):
    pass


graph = Graph([Job("daily", ["daily/{date:date}"], run, checks=[row_count_at_least(-1)])])
"""


def partbuild(*args: str, debug: bool = False) -> subprocess.CompletedProcess[str]:
    exe = shutil.which("partbuild", path=str(Path(sys.executable).parent))
    assert exe is not None
    env = {key: value for key, value in os.environ.items() if key != "PARTBUILD_DEBUG"}
    if debug:
        env["PARTBUILD_DEBUG"] = "1"
    return subprocess.run([exe, *args], capture_output=True, text=True, timeout=120, env=env, check=False)


@pytest.mark.parametrize(
    ("command", "text", "said"),
    [
        (["graph", "show"], FEBRUARY_30, "line 4: schedule 'feb': cron '0 0 30 2 *' never fires"),
        (["run", "--until-idle"], NEGATIVE_ROWS, "line 9: job 'daily': row_count_at_least needs an int of at least 0"),
    ],
    ids=["graph-show", "run"],
)
def test_a_bad_declaration_is_one_line_and_exit_2(tmp_path: Path, command: list[str], text: str, said: str) -> None:
    path = tmp_path / "pipeline.py"
    path.write_text(text)
    done = partbuild(*command, "--db", f"sqlite:///{tmp_path / 'x.db'}", "--graph", str(path))
    assert (done.returncode, done.stdout) == (2, ""), done.stderr
    assert "Traceback" not in done.stderr
    (line,) = done.stderr.splitlines()
    assert line.startswith(f"partbuild: error: graph file {path}, {said}")
    assert not (tmp_path / "x.db").exists()  # refused before the database was opened


def test_with_partbuild_debug_the_traceback_comes_first(tmp_path: Path) -> None:
    path = tmp_path / "pipeline.py"
    path.write_text(FEBRUARY_30)
    done = partbuild("graph", "show", "--db", f"sqlite:///{tmp_path / 'x.db'}", "--graph", str(path), debug=True)
    assert done.returncode == 2
    assert done.stderr.startswith("Traceback (most recent call last):")
    assert "ScheduleError: schedule 'feb': cron '0 0 30 2 *' never fires" in done.stderr
    assert done.stderr.splitlines()[-1].startswith(f"partbuild: error: graph file {path}, line 4: ")
