"""What every router shares: routes derived from the declared API, the service dependency, documented errors.

A route is never written by hand for an operation of `partbuild.api.surface.Client`:
`operations_router` derives it (path, method, status, parameters with their
bounds, response model) from the declaration, and calls the service method of
the same name. So the server, the HTTP client and the document cannot drift apart.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from fastapi.routing import APIRoute
from pydantic import BaseModel
from starlette.routing import Match
from starlette.types import Scope

from partbuild.api.auth import Identity, require
from partbuild.api.errors import DOMAIN_ERRORS
from partbuild.api.service import Service
from partbuild.api.surface import OPERATIONS, Operation

PROBLEM_JSON = "application/problem+json"


class Problem(BaseModel):
    """RFC 9457 problem details: what was wrong, in one sentence."""

    type: str = "about:blank"
    title: str
    status: int
    detail: str


def _problem(description: str) -> dict[str, Any]:
    # Only under problem+json: that is the media type every error is sent with.
    return {"description": description, "content": {PROBLEM_JSON: {"schema": Problem.model_json_schema()}}}


_DESCRIPTIONS = {
    401: "Tokens exist and the request has none, or an unknown, revoked or expired one (`WWW-Authenticate: Bearer`)",
    403: "The token's role is below the role the operation needs",
    400: "A request the HTTP layer could not parse (bad request line, header or URL)",
    404: "No such want, partition, instance, job run, worker group or source to scan; or a cursor no page gave",
    405: "The path exists but not with this method; `Allow` lists the methods it has",
    409: "Valid, but not in the current state: not a valid next step, or a seq after the log head",
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


def operations_router(*names: str, tags: list[str]) -> APIRouter:
    """A router serving these operations of the declared API."""
    router = APIRouter(tags=list(tags), responses=ERRORS, route_class=OperationRoute)
    for name in names:
        operation = OPERATIONS[name]
        router.add_api_route(
            operation.route,
            _endpoint(operation),
            methods=[operation.method],
            status_code=operation.status,
            summary=operation.summary,
            response_model=operation.returns,
        )
    return router


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
    declared = [parameter.replace(kind=keyword) for parameter in operation.parameters]
    endpoint.__signature__ = inspect.Signature([*leading, *declared], return_annotation=operation.returns)  # type: ignore[attr-defined]
    endpoint.__name__ = name
    return endpoint
