"""A real HTTP server for tests: the FastAPI app on uvicorn in a thread, on a free port (a socket bound
to port 0 and handed to uvicorn, so no other process can take the port in between), with an httpx client.

The fixtures over these (`api_server`, `db_api_server`, `w1_api_server`) live in tests/conftest.py.
Imports of FastAPI, uvicorn and httpx are local, so modules that do not serve HTTP do not pay for them.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from partbuild.state.database import Database
from partbuild.state.log.store import EventLog


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
