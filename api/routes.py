"""The HTTP routers: one per resource of the declared API, derived from its operations; and `/metrics`.

A route is never written by hand for an operation of `partbuild.api.surface.Client`:
`resource_routers` derives one router per resource (tagged with the resource's
tag) and in it one route per operation (path, method, status, parameters with
their bounds, response model), calling the service method of the same name. So
the server, the HTTP client and the document cannot drift apart.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Annotated, Any

import fastapi
from fastapi import APIRouter, Depends, Request, Response
from fastapi.routing import APIRoute
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.routing import Match
from starlette.types import Scope

from partbuild.api.auth import Identity, require
from partbuild.api.errors import DOMAIN_ERRORS
from partbuild.api.models.common import ProblemOut
from partbuild.api.service import Service
from partbuild.api.surface import OPERATIONS, RESOURCES, Operation
from partbuild.api.surface.common import Body, Header, Marker, Path, Query
from partbuild.state.ops.tokens import Role

PROBLEM_JSON = "application/problem+json"
METRICS_RESOURCE = "operations"  # the router `/metrics` is served with (and documented under)


def _problem(description: str) -> dict[str, Any]:
    # Only under problem+json: that is the media type every error is sent with.
    return {"description": description, "content": {PROBLEM_JSON: {"schema": ProblemOut.model_json_schema()}}}


_DESCRIPTIONS = {
    401: "Tokens exist and the request has none, or an unknown, revoked or expired one (`WWW-Authenticate: Bearer`)",
    403: "The token's role is below the role the operation needs",
    400: "A request the HTTP layer could not parse (bad request line, header or URL)",
    404: "No such want, partition, instance, job run, worker group or source to scan; or a cursor no page gave",
    405: "The path exists but not with this method; `Allow` lists the methods it has",
    409: "Valid, but not in the current state: not a valid next step, or a seq after the log head",
    410: "A read of the past that needs an instance retention dropped, and its history with it",
    413: "A batch over the limits",
    422: "Invalid input: the detail says what was wrong",
}
# Documented on every route, so clients (and schemathesis) know errors are problem+json.
ERRORS: dict[int | str, dict[str, Any]] = {
    error.status: _problem(_DESCRIPTIONS[error.status]) for error in sorted(DOMAIN_ERRORS, key=lambda e: e.status)
}
# The HTTP server itself (before the app) answers an unparseable request with a plain-text 400.
ERRORS[400]["content"]["text/plain"] = {"schema": {"type": "string"}}


def get_service(request: Request) -> Service:
    return request.app.state.service  # type: ignore[no-any-return]


ServiceDep = Annotated[Service, Depends(get_service)]
FIXED_PATHS = frozenset(operation.route for operation in OPERATIONS.values() if "{" not in operation.route)


class OperationRoute(APIRoute):
    """A route of the API that, like OpenAPI, matches a fixed path before a templated one.

    `/api/v1/wants/batch` is POST only: GET there is a 405 (with `Allow: POST`), not the want
    named "batch" of `/api/v1/wants/{want_id}` (such ids are refused: `RESERVED_WANT_IDS`).
    """

    def matches(self, scope: Scope) -> tuple[Match, Scope]:
        if "{" in self.path and scope.get("path") in FIXED_PATHS:
            return Match.NONE, {}
        return super().matches(scope)


def resource_routers() -> list[APIRouter]:
    """A router per resource, in the order of `RESOURCES`, serving its declared operations in their order."""
    routers = {
        name: APIRouter(tags=[resource.tag], responses=ERRORS, route_class=OperationRoute)
        for name, resource in RESOURCES.items()
    }
    for operation in OPERATIONS.values():
        routers[operation.resource].add_api_route(
            operation.route,
            _endpoint(operation),
            methods=[operation.method],
            status_code=operation.status,
            summary=operation.summary,
            response_model=operation.returns,
        )
    _add_metrics(routers[METRICS_RESOURCE])
    return list(routers.values())


def _add_metrics(router: APIRouter) -> None:
    """`/metrics`: Prometheus text, not JSON, so no declared operation (and not in the HTTP client)."""

    # Metrics name jobs, sources and subscriptions: a reader's token (Prometheus sends it as a bearer token).
    @router.get(
        "/metrics",
        summary="Prometheus metrics",
        response_class=Response,
        dependencies=[Depends(require(Role.READER, "GET /metrics"))],
    )
    def metrics(service: ServiceDep) -> Response:
        return Response(generate_latest(service.registry), media_type=CONTENT_TYPE_LATEST)


def _endpoint(operation: Operation) -> Callable[..., Any]:
    """A FastAPI endpoint with the operation's declared parameters, calling the service method.

    An operation with a role gets the caller's identity from `require` (401/403 before anything runs);
    with a token, the user it records is the token's name, whatever the X-Partbuild-User header says.
    """
    name = operation.name
    records_user = any(parameter.name == "user" for parameter in operation.parameters)

    def call(service: Service, identity: Identity | None, arguments: dict[str, Any]) -> Any:
        if records_user and identity is not None and not identity.open_access:
            arguments["user"] = identity.name
        return getattr(service, name)(**arguments)

    if operation.inline:

        async def endpoint(service: Service, identity: Identity | None = None, **arguments: Any) -> Any:
            return call(service, identity, arguments)

    else:

        def endpoint(service: Service, identity: Identity | None = None, **arguments: Any) -> Any:  # type: ignore[misc]
            return call(service, identity, arguments)

    keyword = inspect.Parameter.KEYWORD_ONLY
    leading = [inspect.Parameter("service", keyword, annotation=ServiceDep)]
    if operation.role is not None:
        guard = Depends(require(operation.role, f"{operation.method} {operation.route}"))
        leading.append(inspect.Parameter("identity", keyword, annotation=Annotated[Identity, guard]))
    declared = [
        parameter.replace(kind=keyword, annotation=_served(parameter.annotation)) for parameter in operation.parameters
    ]
    endpoint.__signature__ = inspect.Signature([*leading, *declared], return_annotation=operation.returns)  # type: ignore[attr-defined]
    endpoint.__name__ = name
    return endpoint


_FASTAPI_MARKERS: dict[type[Marker], Callable[..., Any]] = {
    Path: fastapi.Path,
    Query: fastapi.Query,
    Header: fastapi.Header,
    Body: fastapi.Body,
}


def _served(annotation: Any) -> Any:
    """A declared parameter's annotation with its marker as FastAPI's of the same name and arguments."""
    metadata = getattr(annotation, "__metadata__", ())
    served = tuple(
        _FASTAPI_MARKERS[type(extra)](**extra.arguments()) if isinstance(extra, Marker) else extra for extra in metadata
    )
    return Annotated[(annotation.__origin__, *served)] if metadata else annotation
