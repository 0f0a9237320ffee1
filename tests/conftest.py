"""Shared fixtures: storage backends (real SQLite files and real PostgreSQL) and one SparkSession.

Storage: every storage test runs on a real SQLite file and real PostgreSQL.

PostgreSQL: `PARTBUILD_TEST_PG_URL` (default `postgresql+psycopg://127.0.0.1:5432/test`).
Each test gets a fresh schema, selected through `search_path` in the URL's
connection options, so tables and Alembic's `alembic_version` land there and
child processes given the URL string see the same schema. When the server is
unreachable the postgres cases skip, or fail if `PARTBUILD_REQUIRE_POSTGRES=1` (CI).
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from partbuild.state.database import Database
from partbuild.state.db import normalize_url
from partbuild.state.log.store import EventLog

# tests/browserkit.py holds fixtures (loaded with `pytest_plugins`) and asserts: rewrite them too.
pytest.register_assert_rewrite("browserkit")

DEFAULT_PG_URL = "postgresql+psycopg://127.0.0.1:5432/test"
BACKENDS = [pytest.param("sqlite", id="sqlite"), pytest.param("postgres", id="postgres")]


def _pg_base_url() -> str:
    return os.environ.get("PARTBUILD_TEST_PG_URL", DEFAULT_PG_URL)


@dataclass(frozen=True)
class PgServer:
    """The test PostgreSQL server: an autocommit admin engine, or why there is none."""

    engine: sa.Engine | None
    unreachable: str = ""


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PgServer]:
    url = normalize_url(_pg_base_url())
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


def _postgres_url(server: PgServer) -> Iterator[str]:
    if server.engine is None:
        pytest.skip(f"{server.unreachable}; set PARTBUILD_TEST_PG_URL, or PARTBUILD_REQUIRE_POSTGRES=1 to fail")
    schema = f"pbtest_{secrets.token_hex(6)}"
    with server.engine.connect() as conn:
        conn.execute(sa.text(f"CREATE SCHEMA {schema}"))
    url = normalize_url(_pg_base_url()).update_query_dict({"options": f"-csearch_path={schema}"})
    try:
        yield url.render_as_string(hide_password=False)
    finally:
        with server.engine.connect() as conn:
            # A leaked idle-in-transaction connection must fail the teardown, not hang it.
            conn.execute(sa.text("SET lock_timeout = '10s'"))
            conn.execute(sa.text(f"DROP SCHEMA {schema} CASCADE"))


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
        yield from _postgres_url(request.getfixturevalue("pg_server"))


@pytest.fixture
def database(db_url: str) -> Iterator[Database]:
    """A Database on `db_url`, schema migrated to head."""
    with Database.open(db_url, auto_upgrade=True) as db:
        yield db


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

# Tiny test data: two shuffle partitions, no UI.
TEST_SPARK_CONF: dict[str, str] = {
    "spark.ui.enabled": "false",
    "spark.sql.shuffle.partitions": "2",
    "spark.sql.session.timeZone": "UTC",
}
CLICKS_DAYS = 10
CLICKS_ROWS = 1000
CLICKS_START = date(2026, 1, 1)


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


# --- HTTP: a real uvicorn server ---------------------------------------------------------------------
# Fixtures for tests/test_api_*.py: the FastAPI app on a real
# uvicorn server in a thread, on a free port (a socket bound to port 0 and handed to uvicorn, so no
# other process can take the port in between), with an httpx client. Imports are local so modules
# that do not serve HTTP do not pay for FastAPI at collection.
# Appended after the fixtures above, so this section's imports sit here rather than at the top.
import socket  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
from contextlib import contextmanager  # noqa: E402


@dataclass
class ApiServer:
    """A running API server: its base URL, a client for it, and the log and service it serves."""

    url: str
    client: Any  # httpx.Client(base_url=url, timeout=30)
    log: EventLog
    service: Any  # partbuild.api.service.Service


@contextmanager
def serve_app(app: Any, *, startup_timeout_s: float = 15.0) -> Iterator[str]:
    """Run the ASGI `app` on a real uvicorn server in a thread; yields its base URL, stops it on exit."""
    import uvicorn

    # proto=IPPROTO_TCP, not the default 0: asyncio disables Nagle only on sockets that say they are
    # TCP, and accepted sockets inherit it. With 0, every response stalls ~40 ms on delayed ACKs.
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    # log_config=None: uvicorn leaves logging alone, so its error log (with the traceback of any 500)
    # goes to pytest's log capture and shows in the report of the test that caused it.
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", log_config=None)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, name=f"uvicorn-{port}", daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + startup_timeout_s
        while not server.started:
            if not thread.is_alive():
                raise RuntimeError(f"uvicorn on port {port} exited during start-up")
            if time.monotonic() > deadline:
                raise RuntimeError(f"uvicorn on port {port} did not start within {startup_timeout_s} s")
            time.sleep(0.01)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)
        sock.close()
        assert not thread.is_alive(), f"uvicorn on port {port} did not stop"


@contextmanager
def serve_service(service: Any, *, tail_interval_s: float = 0.05) -> Iterator[ApiServer]:
    """Serve `service` through `create_app` (which tails its log while it runs); yields the server."""
    import httpx

    from partbuild.api.app import create_app

    app = create_app(service, tail_interval_s=tail_interval_s)
    with serve_app(app) as url, httpx.Client(base_url=url, timeout=30) as client:
        yield ApiServer(url=url, client=client, log=service.log, service=service)


@contextmanager
def graphless_api_server(url: str, *, tail_interval_s: float = 0.05) -> Iterator[ApiServer]:
    """A graph-less Service over a log at `url` (schema migrated), served over HTTP."""
    from partbuild.api.service import Service

    with (
        Database.open(url, auto_upgrade=True) as db,
        serve_service(Service(db), tail_interval_s=tail_interval_s) as api,
    ):
        yield api


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


@contextmanager
def orchestrated_api(
    db: Database, graph: Any, warehouse: Path, spark: Any, *, stop_timeout_s: float = 180.0
) -> Iterator[ApiServer]:
    """The API served over `db` with an orchestrator of `graph` running in a thread; the service wakes it
    on every append, so a want made over HTTP is acted on at once. The orchestrator stops on exit."""
    from partbuild.api.service import Service
    from partbuild.orchestrator.loop import Orchestrator

    orchestrator = Orchestrator(
        db, graph, warehouse=str(warehouse), spark=spark, source_check_interval_s=0, poll_interval_s=0.01
    )
    stop = threading.Event()
    thread = threading.Thread(target=orchestrator.run, args=(stop,), name="w1-orchestrator", daemon=True)
    thread.start()
    try:
        with serve_service(Service(db, graph=graph, on_append=orchestrator.wake)) as api:
            yield api
    finally:
        stop.set()
        thread.join(timeout=stop_timeout_s)
        assert not thread.is_alive(), f"the orchestrator did not stop within {stop_timeout_s:g} s"
