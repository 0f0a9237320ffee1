"""Code versions across processes: `partbuild run` serving weekly version v1 builds the weeklies; the same log
read with the graph at v2 (another process, as after a deploy) lists every Live weekly stale and no daily.
No Spark: the jobs of tests/data/graphs/versioned.py write plain files. In-process: tests/api/test_code_versions.py.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.process

GRAPH_FILE = Path(__file__).resolve().parents[1] / "data" / "graphs" / "versioned.py"
WEEKLIES = ["weekly/week=1", "weekly/week=2"]


def _partbuild(*args: str, version: str) -> subprocess.CompletedProcess[str]:
    exe = shutil.which("partbuild", path=str(Path(sys.executable).parent))
    assert exe is not None
    env = os.environ | {"VERSIONED_CODE_VERSION": version}
    return subprocess.run([exe, *args], capture_output=True, text=True, timeout=120, env=env)


def _stale(sqlite_url: str, job: str, version: str) -> dict[str, object]:
    done = _partbuild(
        "partitions", "stale", job, "--db", sqlite_url, "--graph", str(GRAPH_FILE), "--json", version=version
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_a_process_serving_a_new_weekly_version_finds_every_live_weekly_stale(sqlite_url: str, tmp_path: Path) -> None:
    wanted = _partbuild("want", "--db", sqlite_url, *WEEKLIES, version="v1")
    assert wanted.returncode == 0, wanted.stderr
    run = ["run", "--db", sqlite_url, "--graph", str(GRAPH_FILE), "--warehouse", str(tmp_path / "wh"), "--until-idle"]
    done = _partbuild(*run, version="v1")
    assert done.returncode == 0, done.stdout + done.stderr
    assert _stale(sqlite_url, "weekly", "v1")["stale_count"] == 0
    answer = _stale(sqlite_url, "weekly", "v2")
    assert answer["stale_count"] == 2 and answer["code_version"] == "v2"
    assert [(i["ref"], i["code_version"], i["stale"]) for i in answer["instances"]] == [  # type: ignore[attr-defined]
        ("weekly/week=2", "v1", True),
        ("weekly/week=1", "v1", True),
    ]
    assert _stale(sqlite_url, "daily", "v2")["stale_count"] == 0  # nothing upstream changed
