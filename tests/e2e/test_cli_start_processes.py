"""`partbuild --version` and `--help` start lean: in a fresh interpreter they import none of the heavy
libraries (a command's module, with SQLAlchemy, FastAPI, pydantic or Spark, loads only when it runs); a
`--server` read imports no database, Spark or server library, and of the API's models only those of what
it reads. Times are in bench/cli_start.py; here only what is imported, which does not depend on the load."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytestmark = pytest.mark.process

HEAVY = (
    "alembic",
    "fastapi",
    "google.protobuf",
    "httpx",
    "py4j",
    "pydantic",
    "pygments",
    "pyspark",
    "rich",
    "sqlalchemy",
    "starlette",
    "uvicorn",
    "partbuild.api.commands.common",
    "partbuild.api.models.subscriptions",
    "partbuild.api.service",
    "partbuild.state.log.store",
)
# What a read through a server never needs: the database, migrations, the service, Spark, the server (FastAPI
# included: the client reads the API's own parameter markers), the log's protobuf, httpx's command line, and
# the models of a resource it does not read.
NOT_FOR_SERVER_READS = {
    "alembic",
    "fastapi",
    "google.protobuf",
    "py4j",
    "pygments",
    "pyspark",
    "sqlalchemy",
    "starlette",
    "uvicorn",
    "partbuild.api.models.subscriptions",
    "partbuild.api.service",
    "partbuild.state.log.store",
}

_PROBE = """
import json, sys
from partbuild.api.cli import main
try:
    main(sys.argv[1:])
except SystemExit as exit:
    code = exit.code
print(json.dumps({"code": code, "heavy": sorted(m for m in json.loads(HEAVY) if m in sys.modules)}))
"""


def _start(*args: str) -> tuple[int, list[str], str]:
    probe = _PROBE.replace("json.loads(HEAVY)", repr(list(HEAVY)))
    done = subprocess.run([sys.executable, "-c", probe, *args], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    *printed, last = done.stdout.strip().splitlines()
    answer = json.loads(last)
    return answer["code"], answer["heavy"], "\n".join(printed)


@pytest.mark.parametrize("args", [["--version"], ["--help"], ["-h"], []])
def test_version_and_help_import_no_heavy_library(args: list[str]) -> None:
    code, heavy, printed = _start(*args)
    assert code == 0 and heavy == []
    assert "partbuild" in printed


def test_the_probe_sees_heavy_imports_when_a_command_runs() -> None:
    """The same probe on a command that reads a database: it does load them (so the check above can fail)."""
    code, heavy, _ = _start("db", "--help")
    assert code == 0
    assert {"sqlalchemy", "partbuild.api.commands.common"} <= set(heavy)


@pytest.mark.parametrize("args", [["runs"], ["wants"], ["partitions", "show", "a/b"], ["lineage", "a/b"]])
def test_a_server_read_imports_no_database_nor_spark(args: list[str]) -> None:
    code, heavy, _ = _start(*args, "--server", "http://127.0.0.1:9")  # nothing listens: exit 1, after the imports
    assert code == 1
    assert {"partbuild.api.commands.common", "httpx", "pydantic"} <= set(heavy)  # the command did load and call
    assert NOT_FOR_SERVER_READS.isdisjoint(heavy), heavy
