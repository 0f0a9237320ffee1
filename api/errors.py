"""The API's errors and their HTTP statuses, declared once for the server, the HTTP client and the CLI.

The service raises the domain errors; the HTTP layer answers them as
problem+json with the status declared here; the HTTP client turns a status back
into the same exception, so a caller cannot tell an in-process service from a
remote one. The CLI exits 2 on a domain error and 1 on a `ClientError`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, ClassVar


class ApiError(Exception):
    """A request the API refuses; `status` and `title` say how HTTP answers it."""

    status = 400
    title = "Bad Request"


class Unauthorized(ApiError):
    """No credentials, or a token or session that is unknown, revoked or expired (tokens exist)."""

    status = 401
    title = "Unauthorized"
    headers: ClassVar[dict[str, str]] = {"WWW-Authenticate": 'Bearer realm="partbuild"'}


class Forbidden(ApiError):
    """Credentials whose role is below the one the operation needs."""

    status = 403
    title = "Forbidden"


class NotFound(ApiError, LookupError):
    """No such want, instance, ref or job run; or a cursor no page of that list gave."""

    status = 404
    title = "Not Found"


class Conflict(ApiError):
    """Valid input, but not in the current state: cancel a finished want, read at a seq after the log head."""

    status = 409
    title = "Conflict"


class NotFoldedYet(ApiError):
    """A write appended to the log that the state could not fold yet (a working set could not read a record
    back from the state store): it is written, and the fold decides on it once it can; read it back later."""

    status = 503
    title = "Service Unavailable"
    headers: ClassVar[dict[str, str]] = {"Retry-After": "1"}


class Gone(ApiError, LookupError):
    """A read of the past that needs what retention dropped (its history went with it)."""

    status = 410
    title = "Gone"


class InvalidInput(ApiError, ValueError):
    """Input that can never be accepted (unknown producer, a negative seq, a ref twice in a want, ...)."""

    status = 422
    title = "Invalid Input"


class TooLarge(InvalidInput):
    """A batch over the limits."""

    status = 413
    title = "Content Too Large"


class MethodNotAllowed(InvalidInput):
    """The path exists, the method does not (the server answers with an `Allow` header)."""

    status = 405
    title = "Method Not Allowed"


class BadRequest(InvalidInput):
    """A request the HTTP layer could not parse at all."""

    status = 400
    title = "Bad Request"


# Most specific first: an answer's status picks the first class declaring it.
DOMAIN_ERRORS: tuple[type[ApiError], ...] = (
    Unauthorized,
    Forbidden,
    NotFound,
    Gone,
    Conflict,
    TooLarge,
    MethodNotAllowed,
    BadRequest,
    InvalidInput,
)
TITLES: dict[int, str] = {error.status: error.title for error in DOMAIN_ERRORS}


class ClientError(Exception):
    """The request could not be answered (not the caller's fault): the CLI exits 1."""


class Unreachable(ClientError):
    """No answer from the server: connection refused, DNS, timeout."""


class ServerError(ClientError):
    """The server failed (5xx) or answered with something that is not the partbuild API."""


def error_for_status(status: int, detail: str) -> Exception:
    """The exception a status of the API means, carrying the server's detail."""
    for error in DOMAIN_ERRORS:
        if error.status == status:
            return error(detail)
    return ServerError(f"server error {status}: {detail}")


def validation_message(errors: Iterable[Mapping[str, Any]], fallback: str = "invalid input") -> str:
    """One readable phrase per invalid field, e.g. "body.refs.0: partition ref is empty".

    Shared by the HTTP layer (request validation) and the CLI (request models built from options).
    """
    parts = []
    for error in errors:
        where = ".".join(str(part) for part in error.get("loc", ()))
        message = str(error.get("msg", "invalid")).removeprefix("Value error, ")
        parts.append(f"{where}: {message}" if where else message)
    return "; ".join(parts) or fallback
