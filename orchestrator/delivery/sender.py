"""Posting one message to a webhook: signed as Standard Webhooks says, its answer classified.

- 2xx: delivered.
- 408, 429 and 5xx, timeouts and transport errors: retryable (a `Retry-After` is honoured).
- Every other answer (other 4xx, and 3xx: redirects are not followed, a moved
  endpoint is a configuration error): permanent, straight to the dead-letter queue.

Errors say what happened (status and reason phrase, or the transport error's kind),
never the receiver's body: it is outside bytes and may echo anything.
"""

from __future__ import annotations

import email.utils
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from urllib.parse import quote

import httpx
from standardwebhooks import Webhook

USER_AGENT = "partbuild-webhooks/1"
GROUP_HEADER = "partbuild-group"
MAX_RETRY_AFTER_MS = 3600 * 1000
_RETRYABLE = {408, 429}


@dataclass(frozen=True)
class Outcome:
    """What one delivery attempt came to."""

    ok: bool
    retryable: bool
    status: int  # the HTTP status; 0 when there was no answer
    retry_after_ms: int = 0  # the receiver's Retry-After, in ms from now
    error: str = ""


class Sender:
    """One process's HTTP client for every subscription (connections are pooled per endpoint)."""

    def __init__(self, *, max_connections: int = 64) -> None:
        limits = httpx.Limits(max_connections=max_connections, max_keepalive_connections=max_connections)
        self._client = httpx.AsyncClient(limits=limits, follow_redirects=False, headers={"user-agent": USER_AGENT})
        self._signers: dict[str, Webhook] = {}

    async def send(
        self,
        url: str,
        *,
        body: bytes,
        content_type: str,
        message_id: str,
        group_key: str,
        secret: str,
        timeout_s: float,
    ) -> Outcome:
        """POST `body` once, signed; classify the answer."""
        now = datetime.now(UTC)
        headers = {
            "content-type": content_type,
            "webhook-id": message_id,
            "webhook-timestamp": str(int(now.timestamp())),
            "webhook-signature": self._signer(secret).sign(message_id, now, body.decode()),
            # Refs are ASCII in practice; anything else is percent-encoded so the header stays valid.
            GROUP_HEADER: quote(group_key, safe="/=:,.-_~@+*"),
        }
        try:
            answer = await self._client.post(url, content=body, headers=headers, timeout=timeout_s)
        except httpx.TimeoutException:
            return Outcome(False, True, 0, error=f"no answer within {timeout_s:g} s")
        except httpx.HTTPError as exc:
            return Outcome(False, True, 0, error=f"transport error: {type(exc).__name__}")
        return classify(answer.status_code, answer.reason_phrase, answer.headers.get("retry-after"))

    def _signer(self, secret: str) -> Webhook:
        signer = self._signers.get(secret)
        if signer is None:
            signer = self._signers[secret] = Webhook(secret)
        return signer

    async def close(self) -> None:
        await self._client.aclose()


def classify(status: int, reason: str, retry_after: str | None) -> Outcome:
    """An HTTP answer as an outcome."""
    if 200 <= status < 300:
        return Outcome(True, False, status)
    error = f"HTTP {status} {reason}".strip()[:120]
    error = "".join(ch for ch in error if ch.isprintable())
    retryable = status in _RETRYABLE or status >= 500
    return Outcome(False, retryable, status, parse_retry_after(retry_after) if retryable else 0, error)


def parse_retry_after(value: str | None) -> int:
    """Retry-After (seconds, or an HTTP date) as ms from now; 0 when absent or unreadable."""
    if not value:
        return 0
    value = value.strip()
    if value.isdigit():
        return min(int(value) * 1000, MAX_RETRY_AFTER_MS)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return 0
    return max(0, min(int((when.timestamp() - time.time()) * 1000), MAX_RETRY_AFTER_MS))
