"""Posting one message to a webhook: signed as Standard Webhooks says, its answer classified.

- 2xx: delivered.
- 408, 429 and 5xx, timeouts and transport errors: retryable (a `Retry-After` is honoured).
- Every other answer (other 4xx, and 3xx: redirects are not followed, a moved
  endpoint is a configuration error): permanent, straight to the dead-letter queue.

Errors say what happened (status and reason phrase, or the transport error's kind),
never the receiver's body: it is outside bytes and may echo anything.

`Sender` posts over a pooled aiohttp client with the Standard Webhooks headers and
the message's ordering key in `partbuild-group`; no redirects are followed, and the
answer is drained up to 64 KiB so its connection is reused.
"""

from __future__ import annotations

import asyncio
import email.utils
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING
from urllib.parse import quote

from standardwebhooks import Webhook

if TYPE_CHECKING:
    import aiohttp

USER_AGENT = "partbuild-webhooks/1"
ORDERING_KEY_HEADER = "partbuild-group"  # the name receivers read: it stays
MAX_RETRY_AFTER_MS = 3600 * 1000
# A receiver's body is read (so the connection can be reused) up to this much; a longer one
# closes the connection instead: nobody reads it, and a hostile receiver must not fill memory.
MAX_ANSWER_BYTES = 64 * 1024
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
    """One event loop's HTTP client for every subscription (connections are pooled per endpoint).

    aiohttp rather than httpx: httpx's pool checks every pooled connection on each
    request (encode/httpx#3215), which capped delivery near 200 messages/s
    (bench/RESULTS.md). Create it inside the loop that uses it.
    """

    def __init__(self, *, max_connections: int = 64) -> None:
        # Imported here: what only reads or writes the log (`partbuild want`, the API's service) imports this
        # module for `classify` and `Outcome`, and aiohttp is a tenth of a second of a short command's start.
        import aiohttp

        self._invalid_url, self._client_error = aiohttp.InvalidURL, aiohttp.ClientError
        connector = aiohttp.TCPConnector(limit=max_connections, limit_per_host=max_connections)
        # No cookies (a receiver must not make later deliveries stateful), no proxies from the
        # environment, no decompression (the answer's body is drained, never read).
        self._session = aiohttp.ClientSession(
            connector=connector,
            headers={"user-agent": USER_AGENT},
            cookie_jar=aiohttp.DummyCookieJar(),
            auto_decompress=False,
            trust_env=False,
        )
        self._signers: dict[str, Webhook] = {}

    async def send(
        self,
        url: str,
        *,
        body: bytes,
        content_type: str,
        message_id: str,
        ordering_key: str,
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
            ORDERING_KEY_HEADER: quote(ordering_key, safe="/=:,.-_~@+*"),
        }
        try:
            # One deadline for the whole exchange: connect, send, answer and drain.
            async with asyncio.timeout(timeout_s):
                async with self._session.post(url, data=body, headers=headers, allow_redirects=False) as answer:
                    outcome = classify(answer.status, answer.reason or "", answer.headers.get("retry-after"))
                    await _drain(answer)
                    return outcome
        except TimeoutError:
            return Outcome(False, True, 0, error=f"no answer within {timeout_s:g} s")
        except self._invalid_url:
            return Outcome(False, False, 0, error="the endpoint URL is not valid")
        except (self._client_error, OSError) as exc:
            return Outcome(False, True, 0, error=f"transport error: {type(exc).__name__}")

    def _signer(self, secret: str) -> Webhook:
        signer = self._signers.get(secret)
        if signer is None:
            signer = self._signers[secret] = Webhook(secret)
        return signer

    async def close(self) -> None:
        await self._session.close()


async def _drain(answer: aiohttp.ClientResponse) -> None:
    """Read a short body so its connection goes back to the pool; drop the connection of a long one."""
    if len(await answer.content.read(MAX_ANSWER_BYTES)) == MAX_ANSWER_BYTES and not answer.content.at_eof():
        answer.close()


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
