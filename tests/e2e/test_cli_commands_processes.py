"""`partbuild serve` and `partbuild up` as real processes, driven by the CLI over `--server`: a want made through
`serve` is recorded, and `up` builds a wanted W1 weekly on local Spark and stops cleanly on SIGTERM."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from partbuild.state.database import Database

from clikit import run_cli
from sparkkit import CLICKS_DAYS, CLICKS_START
from upkit import free_port, partbuild_exe, started, stop_with_sigterm, wait_healthy
from waitkit import wait_for

pytestmark = pytest.mark.process

REPO_ROOT = Path(__file__).resolve().parents[2]
PIPELINE = REPO_ROOT / "examples/clicks/pipeline.py"


def head_of(db_url: str) -> int:
    with Database.open(db_url) as db:
        return db.log.head()


def watermark_of(db_url: str) -> int:
    with Database.open(db_url) as db:
        return db.changes.watermark()


def test_serve_as_a_process(capsys: pytest.CaptureFixture[str], sqlite_url: str, tmp_path: Path) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log_file = tmp_path / "serve.log"
    with started([partbuild_exe(), "serve", "--db", sqlite_url, "--port", str(port)], log_file) as process:
        wait_healthy(url, process, 30, log_file)
        code, out, err = run_cli(capsys, "want", "x/y", "--want-id", "served", "--server", url, "--json")
        assert code == 0, err
        assert json.loads(out)["want_id"] == "served"
        wait_for("projected into the state store by the server", lambda: watermark_of(sqlite_url) == 1, 30)
        code, out, err = run_cli(capsys, "changes", "0", "--server", url, "--json")
        assert code == 0, err
        assert {(c["kind"], c["id"]) for c in json.loads(out)["items"]} >= {("want_state", "served")}
        assert stop_with_sigterm(process, 30, log_file) == 0
    output = log_file.read_text()
    assert f"partbuild API on {url}" in output and "Application shutdown complete" in output
    assert head_of(sqlite_url) == 1


def test_up_builds_a_wanted_weekly_partition(
    capsys: pytest.CaptureFixture[str], clicks_root: Path, sqlite_url: str, tmp_path: Path
) -> None:
    from examples.clicks.pipeline import weekly_ref, weeks_in_range

    week = weekly_ref(weeks_in_range(CLICKS_DAYS, CLICKS_START)[0])
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = os.environ | {
        "PARTBUILD_CLICKS_ROOT": str(clicks_root),
        "PARTBUILD_CLICKS_DAYS": str(CLICKS_DAYS),
        "PARTBUILD_SPARK_MASTER": "local[2]",
        "PARTBUILD_SPARK_CONF": "spark.sql.shuffle.partitions=3\nspark.ui.enabled=false",
    }
    command = [
        partbuild_exe(), "up", "--db", sqlite_url, "--graph", str(PIPELINE),
        "--warehouse", str(tmp_path / "warehouse"), "--port", str(port),
    ]  # fmt: skip
    log_file = tmp_path / "up.log"
    with started(command, log_file, env) as process:
        wait_healthy(url, process, 120, log_file)
        code, out, err = run_cli(capsys, "want", week, "--server", url, "--json")
        assert code == 0, err
        want_id = json.loads(out)["want_id"]

        def successful() -> bool:
            assert process.poll() is None, log_file.read_text()[-3000:]
            code, out, err = run_cli(capsys, "wants", "show", want_id, "--server", url, "--json")
            assert code == 0, err
            state = json.loads(out)["state"]
            assert state not in ("failed", "upstream_failed"), log_file.read_text()[-3000:]
            return bool(state == "successful")

        wait_for("successful", successful, 120)
        code, out, _ = run_cli(capsys, "lineage", week, "--direction", "upstream", "--depth", "2", "--server", url)
        assert code == 0 and "raw/clicks/date=2026-01-01" in out and "agg/daily_clicks/date=2026-01-04" in out
        assert stop_with_sigterm(process, 60, log_file) == 0
    output = log_file.read_text()
    assert f"partbuild up: API on {url}, orchestrator on Spark local[2]" in output and "SIGTERM" in output
    # The environment's settings go to the session builder, over the small-data default of 4 partitions.
    assert "spark.sql.shuffle.partitions=3, spark.ui.enabled=false" in output
