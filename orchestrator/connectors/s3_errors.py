"""How the object-store connector classes S3 and transport errors, and the messages it gives.

- throttled (SlowDown, Throttling, RequestLimitExceeded, ..., HTTP 503 or 429):
  rate limited, retryable after the server's Retry-After or `DEFAULT_RETRY_AFTER`;
- other server faults (5xx, InternalError, RequestTimeout) and transport
  failures (refused or reset connections, timeouts, a body cut short): retryable;
- everything else (AccessDenied, NoSuchBucket, NoSuchKey, a bad signature,
  missing credentials, any other 4xx): permanent, it will not pass by itself.

Messages name the action, the S3 error code and the HTTP status only. The
exception's own text is never used: botocore quotes the request URL (bucket,
prefix, start-after key) in transport errors, and a server's message may quote
the key. The code itself comes from the server, so it is cut to a short
identifier.
"""

from __future__ import annotations

import re
from typing import Any, TypeVar

from partbuild.orchestrator.connectors.errors import ConnectorError

E = TypeVar("E", bound=ConnectorError)

DEFAULT_RETRY_AFTER = 1.0  # seconds, when a throttling answer names no delay
MAX_RETRY_AFTER = 300.0  # a server asking for more is capped: the caller re-asks anyway
THROTTLED_CODES = frozenset(
    {
        "SlowDown",
        "Throttling",
        "ThrottlingException",
        "ThrottledException",
        "RequestThrottled",
        "RequestLimitExceeded",
        "TooManyRequestsException",
        "ProvisionedThroughputExceededException",
        "BandwidthLimitExceeded",
    }
)
TRANSIENT_CODES = frozenset({"InternalError", "ServiceUnavailable", "RequestTimeout", "RequestTimeTooSkewed"})
_CODE_CHARS = re.compile(r"[^A-Za-z0-9_.-]")
_MAX_CODE_CHARS = 64


def _code(error: Any) -> tuple[str, int | None, dict[str, str]]:
    """A ClientError's (code, HTTP status, headers), the code reduced to a short identifier."""
    response = getattr(error, "response", None) or {}
    raw_code = str((response.get("Error") or {}).get("Code") or "unknown")
    code = _CODE_CHARS.sub("", raw_code)[:_MAX_CODE_CHARS] or "unknown"
    meta = response.get("ResponseMetadata") or {}
    status = meta.get("HTTPStatusCode")
    headers = meta.get("HTTPHeaders") or {}
    return code, status if isinstance(status, int) else None, headers


def _retry_after(headers: dict[str, str]) -> float:
    """The Retry-After header in seconds (an HTTP date is not worth parsing: the default stands in)."""
    try:
        seconds = float(headers.get("retry-after", ""))
    except ValueError:
        return DEFAULT_RETRY_AFTER
    if not seconds >= 0:  # NaN too
        return DEFAULT_RETRY_AFTER
    return min(seconds, MAX_RETRY_AFTER)


def is_missing(error: BaseException) -> bool:
    """Whether a ClientError says the object is not there (or the range starts past its end)."""
    code, status, _ = _code(error)
    return code in {"NoSuchKey", "404", "NotFound"} or status == 404


def is_invalid_range(error: BaseException) -> bool:
    code, status, _ = _code(error)
    return code == "InvalidRange" or status == 416


def is_server_answer(error: BaseException) -> bool:
    """Whether the server answered with an error (as opposed to a transport failure)."""
    from botocore.exceptions import ClientError

    return isinstance(error, ClientError)


def s3_error(kind: type[E], action: str, error: BaseException) -> E:
    """`kind` (EnumerateError or ReadError) for a botocore error, classed by code and status."""
    from botocore import exceptions as bx  # boto3 is the optional `s3` extra

    if isinstance(error, bx.ClientError):
        code, status, headers = _code(error)
        http = f"HTTP {status}" if status is not None else "no HTTP status"
        message = f"{action} failed: {code} ({http})"
        if code in THROTTLED_CODES or status in (429, 503):
            return kind.rate_limited(message, _retry_after(headers))
        if code in TRANSIENT_CODES or (status is not None and status >= 500):
            return kind.retryable(message)
        return kind.permanent(message)
    name = type(error).__name__
    if isinstance(error, bx.NoCredentialsError | bx.PartialCredentialsError | bx.ParamValidationError):
        return kind.permanent(f"{action} failed: {name} (check the connector's configuration)")
    if isinstance(error, bx.ConnectionError | bx.HTTPClientError | bx.ResponseStreamingError):
        return kind.retryable(f"{action} failed: {name} (the endpoint is unreachable or the transfer broke)")
    if isinstance(error, OSError | TimeoutError):
        return kind.retryable(f"{action} failed: {name}")
    return kind.permanent(f"{action} failed: {name}")
