"""One client interface over the service, in-process (`--db`) or over HTTP (`--server`).

`Service` itself is the in-process client; `HttpClient` speaks HTTP. Both take and
return the pydantic models of `partbuild.api.models` and raise the service's domain exceptions (`NotFound`, `Conflict`,
`InvalidInput`, `TooLarge`), so the CLI cannot tell them apart. Only the HTTP
client adds failures of its own: `Unreachable` (no answer) and `ServerError`
(a 5xx or an answer that is not the API's).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal, Protocol, TypeVar
from urllib.parse import quote

import httpx
from pydantic import BaseModel, TypeAdapter, ValidationError

from partbuild.api import models as m
from partbuild.api.service import Conflict, InvalidInput, NotFound, TooLarge

Direction = Literal["upstream", "downstream", "both"]
ModelT = TypeVar("ModelT", bound=BaseModel)
USER_HEADER = "X-Partbuild-User"
_INSTANCES = TypeAdapter(list[m.Instance])


class ClientError(Exception):
    """The request could not be answered (not the caller's fault): the CLI exits 1."""


class Unreachable(ClientError):
    """No answer from the server: connection refused, DNS, timeout."""


class ServerError(ClientError):
    """The server failed (5xx) or answered with something that is not the partbuild API."""


class Client(Protocol):
    """The reads and writes the CLI needs. `Service` has them (the `--db` mode uses it directly);
    `HttpClient` implements them over HTTP (the `--server` mode)."""

    # ----------------------------------------------------------------- writes

    def create_wants(self, requests: list[m.WantRequest], user: str) -> m.WantBatchCreated:
        """Record wants in one append (at most MAX_BATCH_REFS refs in all)."""

    def validate_wants(self, requests: list[m.WantRequest]) -> m.Validated:
        """Check wants as `create_wants` would, recording nothing."""

    def cancel_want(self, want_id: str, reason: str, user: str) -> m.Written: ...

    def taint(self, request: m.TaintRequest, user: str) -> m.Written: ...

    def observe(self, request: m.ObserveRequest, user: str) -> m.Written: ...

    # ----------------------------------------------------------------- reads

    def want(self, want_id: str, min_seq: int | None = None) -> m.WantDetail: ...

    def wants(
        self,
        *,
        state_filter: m.WantStateName | None = None,
        ref: str | None = None,
        root: str | None = None,
        cursor: str | None = None,
        limit: int = 100,
        min_seq: int | None = None,
    ) -> m.Page[m.Want]: ...

    def canonical(self, ref: str, as_of_seq: int | None = None, min_seq: int | None = None) -> m.Instance: ...

    def history(self, ref: str, as_of_seq: int | None = None, min_seq: int | None = None) -> list[m.Instance]: ...

    def instance(self, uuid: str, as_of_seq: int | None = None, min_seq: int | None = None) -> m.Instance: ...

    def lineage(
        self,
        uuid: str,
        *,
        direction: Direction = "both",
        depth: int = 1,
        as_of_seq: int | None = None,
        min_seq: int | None = None,
    ) -> m.Lineage: ...

    def partitions(
        self,
        *,
        prefix: str = "",
        state_filter: m.InstanceStateName | None = None,
        cursor: str | None = None,
        limit: int = 100,
        min_seq: int | None = None,
    ) -> m.Page[m.Instance]: ...

    def job_run(self, job_run_id: str, min_seq: int | None = None) -> m.JobRun: ...

    def job_runs(
        self,
        *,
        state_filter: m.JobRunStateName | None = None,
        job: str | None = None,
        cursor: str | None = None,
        limit: int = 100,
        min_seq: int | None = None,
    ) -> m.Page[m.JobRun]: ...

    def events(self, after_seq: int = 0, limit: int = 100) -> m.Page[m.StoredEvent]: ...

    def audit(self, rejected_limit: int = 100, as_of_seq: int | None = None, verify: bool = False) -> m.Audit: ...

    def health(self) -> m.Health: ...


def create_wants_chunked(
    client: Client, requests: list[m.WantRequest], user: str, on_sent: Callable[[int], None] | None = None
) -> m.WantBatchCreated:
    """Record any number of wants, in requests of at most MAX_BATCH_REFS refs; `on_sent(refs)` after each.

    Each request is atomic, the whole is not: check the refs before (the CLI
    does) so that only a concurrent writer or a server's graph can refuse a
    later request, and then the error says what the earlier ones recorded.
    """
    created: list[m.WantCreated] = []
    first = last = 0
    chunks = _chunks(requests)
    if len(chunks) > 1:
        # Each request is atomic, the whole is not: refuse bad input before anything is recorded.
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
            on_sent(sum(len(request.refs) for request in chunk))
    return m.WantBatchCreated(first_seq=first, last_seq=last, wants=created)


def _chunks(requests: list[m.WantRequest]) -> list[list[m.WantRequest]]:
    """Consecutive groups of wants of at most MAX_BATCH_REFS refs each: one request per group."""
    chunks: list[list[m.WantRequest]] = [[]]
    size = 0
    for request in requests:
        if size + len(request.refs) > m.MAX_BATCH_REFS and chunks[-1]:
            chunks.append([])
            size = 0
        chunks[-1].append(request)
        size += len(request.refs)
    return chunks


class HttpClient:
    """Calls the HTTP API of a `partbuild serve` / `partbuild up` process (the CLI's `--server` mode)."""

    def __init__(self, base_url: str, *, timeout_s: float = 120.0, transport: httpx.BaseTransport | None = None):
        self.base_url = base_url.rstrip("/")
        # Writes of 10,000 refs take seconds on the server: a generous read timeout, a short connect one.
        timeout = httpx.Timeout(timeout_s, connect=10.0)
        self._http = httpx.Client(base_url=self.base_url, timeout=timeout, transport=transport)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> HttpClient:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    # ----------------------------------------------------------------- plumbing

    def _call(
        self,
        method: str,
        path: str,
        *,
        params: dict[str, Any] | None = None,
        body: BaseModel | None = None,
        user: str | None = None,
    ) -> Any:
        """One request; returns the decoded JSON or raises the domain exception the server's status means."""
        if user is not None and not (user.isascii() and user.isprintable()):
            # HTTP headers carry Latin-1 at best; a name the server would record garbled is refused instead.
            raise InvalidInput(f"user {user!r} must be printable ASCII to travel in the {USER_HEADER} header")
        query = {key: value for key, value in (params or {}).items() if value is not None}
        headers = {USER_HEADER: user} if user is not None else None
        content = body.model_dump_json().encode() if body is not None else None
        if content is not None:
            headers = (headers or {}) | {"Content-Type": "application/json"}
        try:
            response = self._http.request(method, "/api/v1" + path, params=query, content=content, headers=headers)
        except httpx.TimeoutException:
            raise Unreachable(f"no answer from {self.base_url} within the timeout") from None
        except httpx.TransportError as exc:
            raise Unreachable(f"cannot reach server {self.base_url}: {exc or type(exc).__name__}") from None
        if response.is_success:
            try:
                return response.json()
            except ValueError:
                raise ServerError(f"{self.base_url} answered {method} {path} with non-JSON") from None
        raise _error(response)

    def _get(self, path: str, model: type[ModelT], params: dict[str, Any] | None = None) -> ModelT:
        return _parse(model, self._call("GET", path, params=params))

    # ----------------------------------------------------------------- writes

    def create_wants(self, requests: list[m.WantRequest], user: str) -> m.WantBatchCreated:
        body = m.WantBatchRequest.model_construct(wants=requests)  # the requests are validated models already
        return _parse(m.WantBatchCreated, self._call("POST", "/wants/batch", body=body, user=user))

    def validate_wants(self, requests: list[m.WantRequest]) -> m.Validated:
        body = m.WantBatchRequest.model_construct(wants=requests)
        return _parse(m.Validated, self._call("POST", "/wants/batch/validate", body=body))

    def cancel_want(self, want_id: str, reason: str, user: str) -> m.Written:
        body = m.CancelRequest(reason=reason)
        return _parse(m.Written, self._call("POST", f"/wants/{_segment(want_id)}/cancel", body=body, user=user))

    def taint(self, request: m.TaintRequest, user: str) -> m.Written:
        return _parse(m.Written, self._call("POST", "/partitions/taint", body=request, user=user))

    def observe(self, request: m.ObserveRequest, user: str) -> m.Written:
        return _parse(m.Written, self._call("POST", "/partitions/observe", body=request, user=user))

    # ----------------------------------------------------------------- reads

    def want(self, want_id: str, min_seq: int | None = None) -> m.WantDetail:
        return self._get(f"/wants/{_segment(want_id)}", m.WantDetail, {"min_seq": min_seq})

    def wants(
        self,
        *,
        state_filter: m.WantStateName | None = None,
        ref: str | None = None,
        root: str | None = None,
        cursor: str | None = None,
        limit: int = 100,
        min_seq: int | None = None,
    ) -> m.Page[m.Want]:
        params = {"state": state_filter, "ref": ref, "root": root, "cursor": cursor, "limit": limit}
        return self._get("/wants", m.Page[m.Want], params | {"min_seq": min_seq})

    def canonical(self, ref: str, as_of_seq: int | None = None, min_seq: int | None = None) -> m.Instance:
        params = {"as_of_seq": as_of_seq, "min_seq": min_seq}
        return self._get(f"/partitions/canonical/{_ref_path(ref)}", m.Instance, params)

    def history(self, ref: str, as_of_seq: int | None = None, min_seq: int | None = None) -> list[m.Instance]:
        params = {"as_of_seq": as_of_seq, "min_seq": min_seq}
        found = self._call("GET", f"/partitions/history/{_ref_path(ref)}", params=params)
        try:
            return _INSTANCES.validate_python(found)
        except ValidationError:
            raise ServerError("the server's answer does not match the partbuild API") from None

    def instance(self, uuid: str, as_of_seq: int | None = None, min_seq: int | None = None) -> m.Instance:
        return self._get(f"/instances/{_segment(uuid)}", m.Instance, {"as_of_seq": as_of_seq, "min_seq": min_seq})

    def lineage(
        self,
        uuid: str,
        *,
        direction: Direction = "both",
        depth: int = 1,
        as_of_seq: int | None = None,
        min_seq: int | None = None,
    ) -> m.Lineage:
        params = {"direction": direction, "depth": depth, "as_of_seq": as_of_seq, "min_seq": min_seq}
        return self._get(f"/instances/{_segment(uuid)}/lineage", m.Lineage, params)

    def partitions(
        self,
        *,
        prefix: str = "",
        state_filter: m.InstanceStateName | None = None,
        cursor: str | None = None,
        limit: int = 100,
        min_seq: int | None = None,
    ) -> m.Page[m.Instance]:
        params = {"prefix": prefix or None, "state": state_filter, "cursor": cursor, "limit": limit}
        return self._get("/partitions", m.Page[m.Instance], params | {"min_seq": min_seq})

    def job_run(self, job_run_id: str, min_seq: int | None = None) -> m.JobRun:
        return self._get(f"/job-runs/{_segment(job_run_id)}", m.JobRun, {"min_seq": min_seq})

    def job_runs(
        self,
        *,
        state_filter: m.JobRunStateName | None = None,
        job: str | None = None,
        cursor: str | None = None,
        limit: int = 100,
        min_seq: int | None = None,
    ) -> m.Page[m.JobRun]:
        params = {"state": state_filter, "job": job, "cursor": cursor, "limit": limit, "min_seq": min_seq}
        return self._get("/job-runs", m.Page[m.JobRun], params)

    def events(self, after_seq: int = 0, limit: int = 100) -> m.Page[m.StoredEvent]:
        return self._get("/events", m.Page[m.StoredEvent], {"after_seq": after_seq, "limit": limit})

    def audit(self, rejected_limit: int = 100, as_of_seq: int | None = None, verify: bool = False) -> m.Audit:
        params: dict[str, Any] = {"rejected": rejected_limit, "verify": verify}
        if as_of_seq is not None:
            params["as_of_seq"] = as_of_seq
        return _parse(m.Audit, self._call("POST", "/audit", params=params))

    def health(self) -> m.Health:
        try:
            response = self._http.get("/healthz")
        except httpx.TransportError as exc:
            raise Unreachable(f"cannot reach server {self.base_url}: {exc or type(exc).__name__}") from None
        if not response.is_success:
            raise _error(response)
        return _parse(m.Health, response.json())


def _parse(model: type[ModelT], data: Any) -> ModelT:
    try:
        return model.model_validate(data)
    except ValidationError:
        raise ServerError(f"the server's answer is not a {model.__name__} of the partbuild API") from None


def _error(response: httpx.Response) -> Exception:
    """The domain exception for an error answer, with the server's problem+json `detail` as message."""
    detail = _detail(response)
    status = response.status_code
    if status == 404:
        return NotFound(detail)
    if status == 409:
        return Conflict(detail)
    if status == 413:
        return TooLarge(detail)
    if status in (400, 405, 422):
        return InvalidInput(detail)
    return ServerError(f"server error {status}: {detail}")


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
