"""The FastAPI application: versioned routes under /api/v1, problem+json errors, health and metrics.

Every error is `application/problem+json` with a detail that says what was
wrong. Bad input is a 4xx and changes nothing: validation happens before the
one append a write makes.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from importlib.metadata import version

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Receive, Scope, Send

from partbuild.api import models as m
from partbuild.api.routes import partitions, runs, wants
from partbuild.api.routes.common import PROBLEM_JSON, ServiceDep
from partbuild.api.service import Conflict, InvalidInput, NotFound, Service, TooLarge

logger = logging.getLogger("partbuild.api")
MAX_BODY_BYTES = 64 * 1024 * 1024


def problem(status: int, title: str, detail: str) -> JSONResponse:
    body = {"type": "about:blank", "title": title, "status": status, "detail": detail}
    return JSONResponse(body, status_code=status, media_type=PROBLEM_JSON)


def _validation_detail(exc: RequestValidationError) -> str:
    """One readable sentence per invalid field, e.g. "body.refs.0: partition ref is empty"."""
    parts = []
    for error in exc.errors():
        where = ".".join(str(part) for part in error.get("loc", ()))
        message = str(error.get("msg", "invalid")).removeprefix("Value error, ")
        parts.append(f"{where}: {message}" if where else message)
    return "; ".join(parts) or "invalid request"


def create_app(service: Service, *, tail_interval_s: float = 0.05) -> FastAPI:
    """The HTTP API over `service`; the service's state is tailed while the app runs."""

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        service.start_tailing(tail_interval_s)
        try:
            yield
        finally:
            service.stop()

    app = FastAPI(
        title="partbuild",
        version=version("partbuild"),
        summary="Event-sourced partition build orchestrator",
        lifespan=lifespan,
        docs_url="/docs",
    )
    app.state.service = service
    for router in (wants.router, partitions.router, runs.router):
        app.include_router(router, prefix="/api/v1")

    @app.get("/healthz", tags=["operations"], summary="Liveness and how far the served state is")
    def healthz(service: ServiceDep) -> m.Health:
        return service.health()

    @app.get("/metrics", tags=["operations"], summary="Prometheus metrics", response_class=Response)
    def metrics(service: ServiceDep) -> Response:
        return Response(generate_latest(service.registry), media_type=CONTENT_TYPE_LATEST)

    app.add_middleware(BodyLimit, max_bytes=MAX_BODY_BYTES)

    for error, (status, title) in _DOMAIN_ERRORS.items():
        app.add_exception_handler(error, _domain_handler(status, title))

    @app.exception_handler(RequestValidationError)
    async def validation(_: Request, exc: RequestValidationError) -> JSONResponse:
        return problem(422, "Invalid Input", _validation_detail(exc))

    @app.exception_handler(StarletteHTTPException)
    async def http_error(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        if exc.status_code == 400:  # FastAPI could not even decode the body: invalid input like any other
            return problem(422, "Invalid Input", "the request body is not valid JSON in UTF-8")
        return problem(exc.status_code, _TITLES.get(exc.status_code, "Error"), str(exc.detail))

    @app.exception_handler(Exception)
    async def unexpected(_: Request, exc: Exception) -> JSONResponse:
        logger.exception("unexpected error: %s", exc)
        return problem(500, "Internal Server Error", "an unexpected error occurred; it was logged")

    return app


class BodyLimit:
    """Refuse bodies over a size before reading them (plain ASGI: no per-request task or stream wrapping)."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            for name, value in scope["headers"]:
                if name == b"content-length" and value.isdigit() and int(value) > self.max_bytes:
                    response = problem(413, "Content Too Large", f"request body over {self.max_bytes} bytes")
                    await response(scope, receive, send)
                    return
        await self.app(scope, receive, send)


_TITLES = {404: "Not Found", 405: "Method Not Allowed", 413: "Content Too Large", 422: "Invalid Input"}
# Most specific first: TooLarge is an InvalidInput, and Starlette picks the handler by the exception's MRO.
_DOMAIN_ERRORS: dict[type[Exception], tuple[int, str]] = {
    NotFound: (404, "Not Found"),
    Conflict: (409, "Conflict"),
    TooLarge: (413, "Content Too Large"),
    InvalidInput: (422, "Invalid Input"),
}


def _domain_handler(status: int, title: str) -> Callable[[Request, Exception], Awaitable[JSONResponse]]:
    async def handle(_: Request, exc: Exception) -> JSONResponse:
        return problem(status, title, str(exc))

    return handle
