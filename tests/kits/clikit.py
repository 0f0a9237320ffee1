"""The `partbuild` CLI run in-process, for tests that check its exit code and output."""

from __future__ import annotations

import pytest

from partbuild.api.cli import main
from partbuild.examples.clicks.simulate import SimulationPlan, simulate
from partbuild.state.database import Database


def run_cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """Run the CLI in-process; returns (exit code, stdout, stderr)."""
    with pytest.raises(SystemExit) as exited:
        main(list(args))
    out, err = capsys.readouterr()
    return int(exited.value.code or 0), out, err


def simulated_database(tmp_path_factory: pytest.TempPathFactory, name: str, plan: SimulationPlan) -> str:
    """The URL of a fresh SQLite database holding the simulated W1 history of `plan`."""
    url = f"sqlite:///{tmp_path_factory.mktemp(name) / 'partbuild.db'}"
    with Database.open(url, auto_upgrade=True) as db:
        db.log.append(list(simulate(plan)), expected_head=0)
    return url
