"""The HTTP back end of the CLI (`--server`): `partbuild.api.surface.Client` over HTTP.

No method here restates an operation: each is derived from its declaration in
`partbuild.api.surface` (path, method, which parameter travels in the path, the
query, a header or the body), and answers parse into the declared return type.
Error statuses turn back into the domain exceptions of `partbuild.api.errors`,
so the CLI cannot tell this client from the in-process `Service`; only failures
of its own are added: `Unreachable` (no answer) and `ServerError` (a 5xx or an
answer that is not the API's).
"""

from __future__ import annotations

import inspect
import re
import ssl
from collections.abc import Callable
from typing import TYPE_CHECKING, Any
from urllib.parse import quote
from urllib.request import getproxies

from pydantic import BaseModel, TypeAdapter, ValidationError

from partbuild.api.errors import (
    ClientError,
    Conflict,
    InvalidInput,
    NotFound,
    ServerError,
    Unreachable,
    error_for_status,
)
from partbuild.api.lean_httpx import httpx
from partbuild.api.surface import OPERATIONS, USER_HEADER, Client, Operation
from partbuild.api.surface.common import Body, Header, Marker, Path, Query

if TYPE_CHECKING:  # a read builds only the models of what it reads (`Operation`)
    from partbuild.api.models.wants import WantBatchCreatedOut, WantRequest

__all__ = ["Client", "ClientError", "HttpClient", "ServerError", "Unreachable", "create_wants_chunked"]


class HttpClient(Client):
    """Calls the HTTP API of a `partbuild serve` / `partbuild up` process."""

    def __init__(
        self,
        base_url: str,
        *,
        timeout_s: float = 120.0,
        transport: httpx.BaseTransport | None = None,
        token: str | None = None,
    ):
        self.base_url = base_url.rstrip("/")
        # Writes of 10,000 refs take seconds on the server: a generous read timeout, a short connect one.
        timeout = httpx.Timeout(timeout_s, connect=10.0)
        headers = {}
        if token:
            if not (token.isascii() and token.isprintable()):  # never echo it: it is a secret
                raise InvalidInput("the token must be printable ASCII (as `partbuild tokens add` prints it)")
            headers["Authorization"] = f"Bearer {token}"
        self._http = httpx.Client(
            base_url=self.base_url, timeout=timeout, transport=transport, headers=headers, verify=_tls(self.base_url)
        )

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> HttpClient:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def call(self, operation: Operation, arguments: dict[str, Any]) -> Any:
        """One request for `operation`; returns the answer parsed as the declared type, or raises."""
        request = _Request(operation)
        for parameter in operation.parameters:
            request.add(parameter, arguments[parameter.name])
        try:
            response = self._http.request(
                operation.method, request.path, params=request.query, content=request.content, headers=request.headers
            )
        except httpx.TimeoutException:
            raise Unreachable(f"no answer from {self.base_url} within the timeout") from None
        except httpx.TransportError as exc:
            raise Unreachable(f"cannot reach server {self.base_url}: {exc or type(exc).__name__}") from None
        if not response.is_success:
            raise error_for_status(response.status_code, _detail(response))
        try:
            data = response.json()
        except ValueError:
            raise ServerError(f"{self.base_url} answered {operation.method} {operation.path} with non-JSON") from None
        try:
            return _adapter(operation).validate_python(data)
        except ValidationError:
            expected = _type_name(operation.returns)
            raise ServerError(f"the server's answer is not a {expected} of the partbuild API") from None


def _tls(base_url: str) -> ssl.SSLContext | bool:
    """How to check certificates: as httpx does for https or through a proxy; else a context that trusts no one.

    Requests go to the base URL only and redirects are not followed, so plain HTTP with no proxy never uses
    TLS, and loading the CA bundle would be a large part of a short command's start-up. Were TLS used
    anyway, it would fail rather than go unchecked.
    """
    if base_url.startswith("https://") or getproxies():
        return True
    return ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)


class _Request:
    """The parts of one HTTP request, filled parameter by parameter from the declaration."""

    def __init__(self, operation: Operation) -> None:
        self.path = operation.route
        self.query: dict[str, Any] = {}
        self.headers: dict[str, str] = {}
        self.content: bytes | None = None

    def add(self, parameter: inspect.Parameter, value: Any) -> None:
        marker = _marker(parameter)
        name = marker.alias or parameter.name
        if isinstance(marker, Path):
            whole = "{" + parameter.name + ":path}"
            if whole in self.path:
                self.path = self.path.replace(whole, _ref_path(value))
            else:
                self.path = self.path.replace("{" + parameter.name + "}", _segment(value))
        elif value is None:
            return
        elif isinstance(marker, Query):
            self.query[name] = value
        elif isinstance(marker, Header):
            if not (value.isascii() and value.isprintable()):
                # HTTP headers carry Latin-1 at best; a name the server would record garbled is refused instead.
                raise InvalidInput(f"user {value!r} must be printable ASCII to travel in the {USER_HEADER} header")
            self.headers[name] = value
        elif isinstance(marker, Body):
            assert isinstance(value, BaseModel)
            self.content = value.model_dump_json(exclude_unset=True).encode()
            self.headers["Content-Type"] = "application/json"


def _marker(parameter: inspect.Parameter) -> Marker:
    """The marker (Path, Query, Header, Body) a declared parameter carries."""
    for extra in getattr(parameter.annotation, "__metadata__", ()):
        if isinstance(extra, Marker):
            return extra
    raise TypeError(f"parameter {parameter.name!r} declares no Path, Query, Header or Body")


_ADAPTERS: dict[str, TypeAdapter[Any]] = {}


def _adapter(operation: Operation) -> TypeAdapter[Any]:
    adapter = _ADAPTERS.get(operation.name)
    if adapter is None:
        adapter = _ADAPTERS[operation.name] = TypeAdapter(operation.returns)
    return adapter


def _type_name(returns: Any) -> str:
    """`WantOut`, `list[InstanceOut]`: the declared type without its modules."""
    return getattr(returns, "__name__", None) or re.sub(r"\bpartbuild\.api\.models\.\w+\.", "", str(returns))


def _client_method(operation: Operation) -> Callable[..., Any]:
    signature = inspect.Signature(
        [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD), *operation.declared_parameters]
    )

    def method(self: HttpClient, *args: Any, **kwargs: Any) -> Any:
        bound = signature.bind(self, *args, **kwargs)
        bound.apply_defaults()
        arguments = dict(bound.arguments)
        del arguments["self"]
        return self.call(operation, arguments)

    method.__name__ = operation.name
    method.__signature__ = signature  # type: ignore[attr-defined]
    return method


for _operation in OPERATIONS.values():
    setattr(HttpClient, _operation.name, _client_method(_operation))


def create_wants_chunked(
    client: Client, requests: list[WantRequest], user: str, on_sent: Callable[[int], None] | None = None
) -> WantBatchCreatedOut:
    """Record any number of wants, in requests of at most MAX_BATCH_REFS refs; `on_sent(refs)` after each.

    Each request is atomic, the whole is not: every chunk is validated before the
    first is sent, so that only a concurrent writer or a server's graph can refuse
    a later request, and then the error says what the earlier ones recorded.
    """
    from partbuild.api.models.wants import WantBatchCreatedOut, WantBatchRequest, WantCreatedOut

    created: list[WantCreatedOut] = []
    first = last = 0
    chunks = [WantBatchRequest.model_construct(wants=chunk) for chunk in _chunks(requests)]
    if len(chunks) > 1:
        for chunk in chunks:
            client.validate_wants(chunk)
    for number, chunk in enumerate(chunks, 1):
        try:
            batch = client.create_wants(chunk, user)
        except (NotFound, InvalidInput, Conflict) as exc:
            if not created:
                raise
            raise type(exc)(
                f"{exc} (request {number} of {len(chunks)}; the {len(created):,} wants of the earlier "
                f"requests were recorded, seqs {first}..{last})"
            ) from None
        first, last = first or batch.first_seq, batch.last_seq
        created.extend(batch.wants)
        if on_sent is not None:
            on_sent(sum(len(request.refs) for request in chunk.wants))
    return WantBatchCreatedOut(first_seq=first, last_seq=last, wants=created)


def _chunks(requests: list[WantRequest]) -> list[list[WantRequest]]:
    """Consecutive groups of wants of at most MAX_BATCH_REFS refs each: one request per group."""
    from partbuild.api.models.wants import MAX_BATCH_REFS

    chunks: list[list[WantRequest]] = [[]]
    size = 0
    for request in requests:
        if size + len(request.refs) > MAX_BATCH_REFS and chunks[-1]:
            chunks.append([])
            size = 0
        chunks[-1].append(request)
        size += len(request.refs)
    return chunks


def _detail(response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        body = None
    if isinstance(body, dict) and isinstance(body.get("detail"), str):
        return str(body["detail"])
    return response.reason_phrase or f"HTTP {response.status_code}"


def _segment(value: str) -> str:
    """One path segment: everything escaped, and `.`/`..` too, which URL normalisation would drop."""
    if value in (".", ".."):
        return value.replace(".", "%2E")
    return quote(value, safe="")


def _ref_path(ref: str) -> str:
    """A ref as the tail of a `{ref:path}` route: its slashes stay, each segment is escaped."""
    return "/".join(_segment(part) for part in ref.split("/"))
