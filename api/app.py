"""The FastAPI application: versioned routes under /api/v1, problem+json errors, health and metrics.

Every error is `application/problem+json` with a detail that says what was
wrong, and a status declared in `partbuild.api.errors`. Bad input is a 4xx and
changes nothing: validation happens before the one append a write makes.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from http import HTTPStatus
from importlib.metadata import version
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import BaseRoute, Match
from starlette.types import ASGIApp, Receive, Scope, Send

from partbuild.api.errors import TITLES, ApiError, validation_message
from partbuild.api.routes import PROBLEM_JSON, resource_routers
from partbuild.api.service import Service
from partbuild.api.web import add_web_ui
from partbuild.state.db import DatabaseReadOnly, refused_as_read_only
from partbuild.state.fold.cold import ReadBackFailed
from partbuild.state.log.store import WriteNotDone
from partbuild.state.store.reader import ReadReplica, StoreBehind, StoreNotReady

logger = logging.getLogger("partbuild.api")
MAX_BODY_BYTES = 64 * 1024 * 1024


def problem(status: int, detail: str, headers: dict[str, str] | None = None) -> JSONResponse:
    title = TITLES.get(status) or HTTPStatus(status).phrase
    body = {"type": "about:blank", "title": title, "status": status, "detail": detail}
    return JSONResponse(body, status_code=status, media_type=PROBLEM_JSON, headers=headers)


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
    app.openapi = _exact_document(app.openapi)  # type: ignore[method-assign]
    routers = resource_routers()
    for router in routers:
        app.include_router(router)
    add_web_ui(app)  # the web pages at / (api/web/)
    app.add_middleware(BodyLimit, max_bytes=MAX_BODY_BYTES)
    _add_error_handlers(app, [route for router in routers for route in router.routes])
    return app


# pydantic documents a bound it applies around a validator (Query(ge=0) on QueryInt) by its own name,
# "ge", which no OpenAPI tool reads: the document says minimum.
_PYDANTIC_BOUNDS = {"ge": "minimum", "le": "maximum", "gt": "exclusiveMinimum", "lt": "exclusiveMaximum"}
_BOUNDS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf")


def _exact_document(generate: Callable[[], dict[str, Any]]) -> Callable[[], dict[str, Any]]:
    """`generate` (FastAPI's document, built once), with every numeric bound a JSON Schema keyword.

    FastAPI's OpenAPI model holds bounds as floats: 9007199254740991 would be written 9007199254740991.0,
    so integral bounds are written back as the integers they are.
    """
    document: dict[str, Any] | None = None

    def openapi() -> dict[str, Any]:
        nonlocal document
        if document is None:
            document = _exact_bounds(generate())
        return document

    return openapi


def _exact_bounds(node: Any) -> Any:
    """A copy of the JSON `node` with its bounds named and written as JSON Schema has them."""
    if isinstance(node, list):
        return [_exact_bounds(item) for item in node]
    if not isinstance(node, dict):
        return node
    numeric = node.get("type") in ("integer", "number")
    exact: dict[str, Any] = {}
    for key, value in node.items():
        if isinstance(value, int | float) and not isinstance(value, bool):
            if numeric and key in _PYDANTIC_BOUNDS:
                key = _PYDANTIC_BOUNDS[key]
            if key in _BOUNDS and isinstance(value, float) and value.is_integer():
                value = int(value)
        exact[key] = _exact_bounds(value)
    return exact


def _add_error_handlers(app: FastAPI, routes: list[BaseRoute]) -> None:
    async def domain_error(_: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, ApiError)
        return problem(exc.status, str(exc), getattr(exc, "headers", None))  # 401: WWW-Authenticate

    async def invalid(_: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError)
        return problem(422, validation_message(exc.errors(), "invalid request"))

    async def http_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, StarletteHTTPException)
        if exc.status_code == 400:  # FastAPI could not even decode the body: invalid input like any other
            return problem(422, "the request body is not valid JSON in UTF-8")
        if exc.status_code == 405:
            allowed = allowed_methods(routes, request.scope)
            detail = f"method not allowed: {request.method}; {request.url.path} allows {allowed}"
            return problem(405, detail, {"Allow": allowed})
        return problem(exc.status_code, str(exc.detail))

    async def write_not_done(_: Request, exc: Exception) -> JSONResponse:
        # A write-lock bound ended the write (another writer held the lock too long): nothing was written.
        return problem(503, str(exc), {"Retry-After": "1"})

    async def read_only(_: Request, exc: Exception) -> JSONResponse:
        # A server on a hot standby: reads work, writes never will here (no Retry-After).
        return problem(503, str(DatabaseReadOnly()))

    async def replica_write(_: Request, exc: Exception) -> JSONResponse:
        # A read replica folds nothing, so it cannot check a write: it never will here (no Retry-After).
        return problem(503, str(exc))

    async def store_behind(_: Request, exc: Exception) -> JSONResponse:
        # A read replica whose state store has not reached the seq asked for yet: it will (Retry-After).
        return problem(503, str(exc), {"Retry-After": "1"})

    async def read_back_failed(_: Request, exc: Exception) -> JSONResponse:
        # A working set's check of a write could not read a record back: nothing written; the cause logged only.
        logger.warning("a write's check could not read a record back: %s", exc)
        return problem(503, "the state store could not be read to check this write; try again", {"Retry-After": "1"})

    async def unexpected(request: Request, exc: Exception) -> JSONResponse:
        if refused_as_read_only(exc):  # a write outside the log's (a session, a token's use) on a standby
            return await read_only(request, exc)
        logger.exception("unexpected error: %s", exc)
        return problem(500, "an unexpected error occurred; it was logged")

    handlers: dict[type[Exception], Callable[[Request, Exception], Awaitable[JSONResponse]]] = {
        ApiError: domain_error,
        RequestValidationError: invalid,
        StarletteHTTPException: http_error,
        WriteNotDone: write_not_done,
        DatabaseReadOnly: read_only,
        ReadReplica: replica_write,
        StoreBehind: store_behind,
        StoreNotReady: store_behind,
        ReadBackFailed: read_back_failed,
        Exception: unexpected,
    }
    for error, handler in handlers.items():
        app.add_exception_handler(error, handler)


def allowed_methods(routes: list[BaseRoute], scope: Scope) -> str:
    """Every method some route serves at this path (RFC 9110: a 405 says which ones are allowed).

    Starlette names only the first route whose path matched; a path served by
    several routes (GET and POST /wants) must list them all.
    """
    methods: set[str] = set()
    for route in routes:
        match, _ = route.matches(scope)
        if match in (Match.FULL, Match.PARTIAL):
            methods.update(getattr(route, "methods", None) or ())
    return ", ".join(sorted(methods))


class BodyLimit:
    """Refuse bodies over a size before reading them (plain ASGI: no per-request task or stream wrapping)."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            for name, value in scope["headers"]:
                if name == b"content-length" and value.isdigit() and int(value) > self.max_bytes:
                    response = problem(413, f"request body over {self.max_bytes} bytes")
                    await response(scope, receive, send)
                    return
        await self.app(scope, receive, send)
