"""Shared fixtures: storage backends (real SQLite files and real PostgreSQL), one SparkSession, API
servers; the test markers, applied from the fixtures a test uses, and a guard that keeps them honest.

Storage: every storage test runs on a real SQLite file and real PostgreSQL (tests/kits/pgkit.py): each
test gets a fresh schema. When the server is unreachable the postgres cases skip, or fail if
`PARTBUILD_REQUIRE_POSTGRES=1` (CI).

Markers (registered in pyproject.toml): `postgres` (applied here to the `postgres` case of `db_url` and
to users of `pg_server`), `spark` (applied here to users of the `spark` fixture; set by hand on a test
that starts a SparkSession itself), `process` and `browser` (set by hand). `make test-fast` runs what has
none of `process`, `spark`, `browser`.
"""

from __future__ import annotations

import multiprocessing.process
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import croniter  # noqa: F401  (its import runs `file -b` on the interpreter: here, before any test is charged with it)
import pytest
import sqlalchemy as sa

from partbuild.state.database import Database
from partbuild.state.db import normalize_url
from partbuild.state.log.store import EventLog

from pgkit import PgServer, pg_base_url, postgres_url
from serverkit import ApiServer, graphless_api_server, orchestrated_api
from sparkkit import CLICKS_DAYS, CLICKS_ROWS, CLICKS_START, TEST_JVM_OPTIONS, TEST_SPARK_CONF

# Every JVM the tests start (the shared session, each `partbuild run` child, Spark's own servers) lives
# seconds and runs tiny jobs: on two cores, C2 compiling and parallel GC threads cost more CPU than they
# save (measured: a child's Spark start-up and two small jobs 35 s -> 22 s of wall time under CI's load).
# Inherited by every child through the environment; a JVM prints "NOTE: Picked up JDK_JAVA_OPTIONS".
os.environ.setdefault("JDK_JAVA_OPTIONS", TEST_JVM_OPTIONS)
# Every Spark driver the tests start (SPARK_SUBMIT_OPTS reaches the drivers only, not Spark's launcher) maps
# the classes of the archive `make test` records (tests/kits/spark_cds.py): half a driver's CPU on two cores.
SPARK_CLASS_ARCHIVE = Path(sys.prefix) / "spark-classes.jsa"
if SPARK_CLASS_ARCHIVE.is_file():
    os.environ.setdefault("SPARK_SUBMIT_OPTS", f"-XX:SharedArchiveFile={SPARK_CLASS_ARCHIVE} -Xlog:cds*=off")
# The W1 example's nightly schedule would tick in a run that crosses 02:30 UTC: the tests' runs of it leave it out.
os.environ["PARTBUILD_CLICKS_SCHEDULE"] = "0"

# tests/kits/browserkit.py holds fixtures (loaded with `pytest_plugins`) and asserts: rewrite them too.
pytest.register_assert_rewrite("browserkit")

BACKENDS = [pytest.param("sqlite", id="sqlite"), pytest.param("postgres", id="postgres")]


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PgServer]:
    url = normalize_url(pg_base_url())
    engine = sa.create_engine(url, isolation_level="AUTOCOMMIT", connect_args={"connect_timeout": 3})
    try:
        with engine.connect() as conn:
            conn.execute(sa.text("SELECT 1"))
    except sa.exc.OperationalError as exc:
        engine.dispose()
        error = str(exc.orig or exc).strip().splitlines()[0]
        reason = f"PostgreSQL unreachable at {url.render_as_string()} ({error})"
    else:
        yield PgServer(engine)
        engine.dispose()
        return
    if os.environ.get("PARTBUILD_REQUIRE_POSTGRES") == "1":
        pytest.fail(f"{reason}; PARTBUILD_REQUIRE_POSTGRES=1 makes this a failure", pytrace=False)
    yield PgServer(None, reason)


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    """A URL of a fresh SQLite file."""
    return f"sqlite:///{tmp_path / 'partbuild.db'}"


@pytest.fixture(params=BACKENDS)
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A URL of an empty database on each backend (ids `sqlite`, `postgres`)."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'partbuild.db'}"
    else:
        yield from postgres_url(request.getfixturevalue("pg_server"))


@pytest.fixture
def database(db_url: str) -> Iterator[Database]:
    """A Database on `db_url`, schema migrated to head."""
    with Database.open(db_url, auto_upgrade=True) as db:
        yield db
        kit = sys.modules.get("workingsetkit")
        if kit is not None:
            kit.leave_all()


@pytest.fixture
def event_log(database: Database) -> EventLog:
    """The EventLog of `database`."""
    return database.log


@pytest.fixture
def db(db_url: str) -> Iterator[str]:
    """The URL of a migrated empty database on `db_url`'s backend, for tests whose processes open it."""
    with Database.open(db_url, auto_upgrade=True):
        pass
    yield db_url


# --- Spark: one local[2] session per test process, started on first use ----------------------------


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """The SparkSession every Spark test shares (start-up costs seconds); stopped at the end."""
    from partbuild.orchestrator.spark import spark_session

    session = spark_session(master="local[2]", app_name="partbuild-tests", conf=TEST_SPARK_CONF)
    session.sparkContext.setLogLevel("ERROR")  # keep WARN chatter out of failing-test output
    try:
        yield session
    finally:
        session.stop()


@pytest.fixture(scope="session")
def clicks_root(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """W1 raw data, D=10 days from 2026-01-01 with R=1000 rows a day, generated once (read-only)."""
    from examples.clicks.generate import generate_raw

    root = tmp_path_factory.mktemp("clicks-data")
    generate_raw(spark, root, days=CLICKS_DAYS, rows_per_day=CLICKS_ROWS, start=CLICKS_START)
    return root


# --- HTTP: a real uvicorn server (tests/kits/serverkit.py) ---------------------------------------------


@pytest.fixture
def api_server(sqlite_url: str) -> Iterator[ApiServer]:
    """A graph-less API server over a fresh SQLite log."""
    with graphless_api_server(sqlite_url) as api:
        yield api


@pytest.fixture
def db_api_server(db_url: str) -> Iterator[ApiServer]:
    """A graph-less API server over a fresh log on each backend (ids `sqlite`, `postgres`)."""
    with graphless_api_server(db_url) as api:
        yield api


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApiServer]:
    """A graph-less server per module, for tests that only add refs of their own or change nothing (bad input).

    Seeded by `httpkit.seed`: a want (so its ref is Missing) and a Live source.
    """
    from httpkit import seed

    url = f"sqlite:///{tmp_path_factory.mktemp('shared') / 'partbuild.db'}"
    with graphless_api_server(url) as api:
        seed(api.client)
        yield api


@pytest.fixture
def shared_client(shared: ApiServer) -> Iterator[Any]:
    """A fresh httpx client of the module's shared server."""
    from httpkit import fresh_client

    yield from fresh_client(shared.url)


@pytest.fixture
def w1_api_server(sqlite_url: str, clicks_root: Path, spark: Any, tmp_path: Path) -> Iterator[ApiServer]:
    """The W1 graph (D=10 days) served over HTTP, with an orchestrator running in the background.

    The service wakes the orchestrator on every append, so a want made over HTTP is acted on at once.
    """
    from examples.clicks.pipeline import build_graph

    graph = build_graph(clicks_root, days=CLICKS_DAYS, start=CLICKS_START)
    with Database.open(sqlite_url) as db, orchestrated_api(db, graph, tmp_path / "warehouse", spark) as api:
        yield api


# --- Markers: applied from fixtures, kept honest by a guard on process starts ----------------------------

_current: list[pytest.Item] = []  # the test being run (setup, call and teardown), if any
_violations = pytest.StashKey[str]()
END_TO_END = ("process", "spark", "browser")
E2E_FOLDER = "tests/e2e/"


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects by marker
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    kinds: dict[str, set[bool]] = {}
    for item in items:
        callspec = getattr(item, "callspec", None)
        on_postgres = callspec is not None and callspec.params.get("db_url") == "postgres"
        if on_postgres or "pg_server" in item.fixturenames:
            item.add_marker(pytest.mark.postgres)
        if "spark" in item.fixturenames:
            item.add_marker(pytest.mark.spark)
        module = item.path.relative_to(config.rootpath).as_posix()
        kinds.setdefault(module, set()).add(any(item.get_closest_marker(m) for m in END_TO_END))
    # tests/e2e/ holds the end-to-end tests, every other folder the fast ones: a module is one or the other.
    misplaced = sorted(
        module for module, seen in kinds.items() if seen != ({True} if module.startswith(E2E_FOLDER) else {False})
    )
    if misplaced:
        raise pytest.UsageError(
            f"{', '.join(misplaced)}: tests marked {'/'.join(END_TO_END)} belong in {E2E_FOLDER}, and only they "
            "do; move them to a module of their own there (test_<name>_processes.py, or _spark, _browser)"
        )


def _kind(args: Any) -> tuple[str, str]:
    """The marker a child process needs (`spark` for PySpark's JVM, `browser` for Playwright's driver,
    else `process`) and its command line, shortened for a message."""
    argv = [args] if isinstance(args, str | bytes | os.PathLike) else list(args)
    words = [os.fsdecode(a) if isinstance(a, bytes | os.PathLike) else str(a) for a in argv]
    command = " ".join(words)
    if "pyspark-shell" in words:
        kind = "spark"
    elif "playwright" in " ".join(words[:2]):
        kind = "browser"
    else:
        kind = "process"
    return kind, command if len(command) <= 80 else command[:77] + "..."


def _check_start(what: str, kind: str) -> None:
    """Fail the running test when it starts a child of `kind` (a marker's name) without that marker."""
    if not _current:
        return
    item = _current[-1]
    if item.get_closest_marker(kind) is not None:
        return
    message = f"{item.nodeid} starts {what} but is not marked `{kind}` (add @pytest.mark.{kind})"
    item.stash[_violations] = message
    pytest.fail(message, pytrace=False)


_popen_init = subprocess.Popen.__init__
_process_start = multiprocessing.process.BaseProcess.start


def _guarded_popen_init(self: subprocess.Popen[Any], args: Any, *rest: Any, **kwargs: Any) -> None:
    kind, command = _kind(args)
    _check_start(f"a child process (`{command}`)", kind)
    _popen_init(self, args, *rest, **kwargs)


def _guarded_process_start(self: multiprocessing.process.BaseProcess) -> None:
    _check_start(f"a multiprocessing child ({self.name})", "process")
    _process_start(self)


subprocess.Popen.__init__ = _guarded_popen_init  # type: ignore[method-assign]
multiprocessing.process.BaseProcess.start = _guarded_process_start  # type: ignore[method-assign]


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Iterator[None]:
    _current.append(item)
    try:
        return (yield)
    finally:
        _current.pop()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[pytest.TestReport]:
    """A start caught in another thread (where its failure was swallowed) still fails the test, once."""
    report = yield
    message = item.stash.get(_violations, None)
    if message is not None:
        del item.stash[_violations]
        if report.passed:
            report.outcome = "failed"
            report.longrepr = message
    return report
