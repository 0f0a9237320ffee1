"""What every resource's declarations share: the `operation` mark, `Operation`, the markers, the shared parameters.

A parameter's marker (`Path`, `Query`, `Body`, `Header`, ours, not FastAPI's) says
where it travels over HTTP, with the bounds the server enforces and the document
states. The server maps each to FastAPI's marker of the same name and arguments
(`partbuild.api.routes`); the HTTP client reads them as they are, so a `--server`
command imports no FastAPI.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import sys
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, fields
from typing import Annotated, Any, TypeVar, get_type_hints

from partbuild.api.models.common import MAX_PAGE, MAX_SAFE_INT, QueryInt
from partbuild.state.ops.roles import Role


@dataclass(frozen=True)
class Marker:
    """Where a parameter travels over HTTP, its bounds and its documentation: FastAPI's arguments of that marker.

    A field left None is an argument not given, so the server's FastAPI marker is the one this declares.
    """

    alias: str | None = None
    description: str | None = None
    examples: tuple[Any, ...] | None = None
    gt: float | None = None
    ge: float | None = None
    le: float | None = None
    min_length: int | None = None
    max_length: int | None = None

    def arguments(self) -> dict[str, Any]:
        """The arguments given, as FastAPI's marker of the same name takes them."""
        given = {field.name: getattr(self, field.name) for field in fields(self)}
        given = {name: value for name, value in given.items() if value is not None}
        if "examples" in given:
            given["examples"] = list(given["examples"])
        return given


class Path(Marker):
    """A segment of the route's path."""


class Query(Marker):
    """A query parameter; None is not sent."""


class Header(Marker):
    """A request header; None is not sent."""


class Body(Marker):
    """The JSON body: a request model."""


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
    """One operation of the API and its HTTP route.

    Its parameters' and result's types resolve on first use, importing the resource's models then: the
    HTTP client of a `--server` command builds only the models of the operations it calls.
    """

    name: str
    resource: str  # the module of `partbuild.api.surface` that declares it: its router, tag, models and service
    method: str
    path: str  # under /api/v1 unless `versioned` is false
    status: int
    summary: str
    declared: Callable[..., Any]  # the protocol's method
    role: Role | None  # the least role a token needs to call it (None: open to all, like /healthz)
    versioned: bool = True
    inline: bool = False  # served on the event loop: cheaper than a worker thread for tiny calls

    @property
    def route(self) -> str:
        return f"/api/v1{self.path}" if self.versioned else self.path

    @property
    def declared_parameters(self) -> tuple[inspect.Parameter, ...]:
        """The parameters without self, annotations unresolved: names, kinds and defaults, enough to bind a call."""
        return tuple(list(inspect.signature(self.declared).parameters.values())[1:])

    @functools.cached_property
    def parameters(self) -> tuple[inspect.Parameter, ...]:
        """The parameters without self, annotations resolved, markers included."""
        hints = self._hints
        return tuple(parameter.replace(annotation=hints[parameter.name]) for parameter in self.declared_parameters)

    @functools.cached_property
    def returns(self) -> Any:
        return self._hints["return"]

    @functools.cached_property
    def _hints(self) -> dict[str, Any]:
        module = sys.modules[self.declared.__module__]
        return get_type_hints(self.declared, localns=_ModelNames(vars(module), self.resource), include_extras=True)


class _ModelNames(Mapping[str, Any]):
    """The names a declaration's annotations use: its module's, then its resource's models (imported on first use).

    A resource's declarations import its models (`partbuild.api.models.<resource>`) for type checkers
    only; the common ones (`partbuild.api.models.common`) they import as they are.
    """

    def __init__(self, names: dict[str, Any], resource: str) -> None:
        self._names = names
        self._resource = resource

    def __getitem__(self, name: str) -> Any:
        if name in self._names:
            return self._names[name]
        models = importlib.import_module(f"partbuild.api.models.{self._resource}")
        try:
            return getattr(models, name)
        except AttributeError:
            raise KeyError(name) from None  # a builtin, or a name of nowhere: eval goes on to the builtins

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)


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
