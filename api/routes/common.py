"""What every router shares: the service dependency, the caller's name, documented error responses."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Depends, Header, Query, Request
from pydantic import BaseModel

from partbuild.api.service import Service

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


# Documented on every route, so clients (and schemathesis) know errors are problem+json.
ERRORS: dict[int | str, dict[str, Any]] = {
    404: _problem("No such want, partition, instance or job run"),
    409: _problem("Valid, but not a valid next step in the current state"),
    413: _problem("A batch over the limits"),
    422: _problem("Invalid input: the detail says what was wrong"),
}


def get_service(request: Request) -> Service:
    return request.app.state.service  # type: ignore[no-any-return]


def get_user(x_partbuild_user: Annotated[str, Header(max_length=128)] = "anonymous") -> str:
    """Who is asking: recorded as the manual source of every event a request appends.

    HTTP headers carry ISO-8859-1, so names outside it cannot travel this way (the CLI refuses them).
    """
    return x_partbuild_user


ServiceDep = Annotated[Service, Depends(get_service)]
UserDep = Annotated[str, Depends(get_user)]
MinSeq = Annotated[int | None, Query(ge=0, le=2**62, description="Read at least up to this seq (read-your-writes).")]
AsOfSeq = Annotated[int | None, Query(ge=0, le=2**62, description="Answer as of this seq of the log.")]
Cursor = Annotated[str | None, Query(max_length=4096, description="`next_cursor` of the previous page.")]
Limit = Annotated[int, Query(ge=1, le=1_000)]
