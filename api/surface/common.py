"""What every resource's declarations share: the `operation` mark, `Operation`, and the shared parameters.

A parameter's FastAPI marker (`Path`, `Query`, `Body`, `Header`) says where it
travels over HTTP, with the bounds the server enforces and the document states.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, TypeVar

from fastapi import Header, Query

from partbuild.api.models.common import MAX_PAGE, MAX_SAFE_INT, QueryInt
from partbuild.state.ops.roles import Role

MAX_SEQ = MAX_SAFE_INT
ANONYMOUS = "anonymous"
USER_HEADER = "X-Partbuild-User"

# Parameters, with where they travel over HTTP and the bounds both ends enforce.
User = Annotated[
    str,
    Header(alias=USER_HEADER, max_length=128, description="Who asks: recorded as the source of what is appended."),
]
MinSeq = Annotated[
    QueryInt | None, Query(ge=0, le=MAX_SEQ, description="Read at least up to this seq (read-your-writes).")
]
AsOfSeq = Annotated[QueryInt | None, Query(ge=0, le=MAX_SEQ, description="Answer as of this seq of the log.")]
Cursor = Annotated[str | None, Query(min_length=1, max_length=4096, description="`next_cursor` of the previous page.")]
Limit = Annotated[QueryInt, Query(ge=1, le=MAX_PAGE, description="Items per page.")]
T = TypeVar("T", bound=Callable[..., Any])


@dataclass(frozen=True)
class Operation:
    """One operation of the API and its HTTP route."""

    name: str
    resource: str  # the module of `partbuild.api.surface` that declares it: its router, tag, models and service
    method: str
    path: str  # under /api/v1 unless `versioned` is false
    status: int
    summary: str
    parameters: tuple[inspect.Parameter, ...]  # annotations resolved, FastAPI markers included
    returns: Any
    role: Role | None  # the least role a token needs to call it (None: open to all, like /healthz)
    versioned: bool = True
    inline: bool = False  # served on the event loop: cheaper than a worker thread for tiny calls

    @property
    def route(self) -> str:
        return f"/api/v1{self.path}" if self.versioned else self.path


def operation(
    method: str,
    path: str,
    summary: str,
    *,
    role: Role | None,
    status: int = 200,
    versioned: bool = True,
    inline: bool = False,
) -> Callable[[T], T]:
    """Mark a resource protocol's method as an operation served at `method path`, for a token of `role` or above.

    `role` has no default: every new operation decides who may call it.
    """

    def mark(function: T) -> T:
        function.__operation__ = {  # type: ignore[attr-defined]
            "method": method,
            "path": path,
            "summary": summary,
            "status": status,
            "versioned": versioned,
            "inline": inline,
            "role": role,
        }
        return function

    return mark
