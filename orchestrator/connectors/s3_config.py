"""Configuration of the object-store connector: where the objects are, how to reach them, with what secrets.

Secrets (access key id, secret access key, session token) are held in `Secret`,
which never prints its text: `repr`, `str` and f-strings show `Secret(***)`,
pickling is refused, and the text comes out only through `reveal()`, called
once, where the S3 client is built. Leaving a credential unset lets boto3
find one the usual way (environment, profile, instance role).
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass, field
from typing import Any, Literal

MAX_PREFIX_BYTES = 1024  # S3's own limit on a whole key


class Secret:
    """A credential's text that never prints itself."""

    __slots__ = ("_text",)
    _text: str

    def __init__(self, text: str) -> None:
        if not isinstance(text, str) or not text:
            raise ValueError("a Secret is a non-empty str")  # never quote the value
        object.__setattr__(self, "_text", text)

    def reveal(self) -> str:
        """The text itself: only for handing to the client library."""
        return self._text

    def __repr__(self) -> str:
        return "Secret(***)"

    __str__ = __repr__

    def __format__(self, spec: str) -> str:
        return format(repr(self), spec)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and other._text == self._text

    def __hash__(self) -> int:
        return hash(("Secret", self._text))

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("Secret is immutable")

    def __reduce__(self) -> Any:
        raise TypeError("Secret refuses to be pickled")


def _secret(name: str, value: Secret | str | None) -> Secret | None:
    if value is None or isinstance(value, Secret):
        return value
    if isinstance(value, str):
        return Secret(value)
    raise TypeError(f"{name} must be a str, a Secret or None, not {type(value).__name__}")


def _positive(name: str, value: float) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name} must be a positive finite number")


@dataclass(frozen=True)
class ObjectStoreConfig:
    """A bucket and a key prefix, the endpoint (None: AWS), the region, credentials and client limits.

    `prefix` is literal bytes of the key, not a directory: "raw/" lists
    "raw/a", "raw" also lists "rawer/a". Item keys are relative to it.
    """

    bucket: str
    prefix: str = ""
    endpoint_url: str | None = None
    region: str = "us-east-1"
    access_key_id: Secret | None = field(default=None, repr=False)
    secret_access_key: Secret | None = field(default=None, repr=False)
    session_token: Secret | None = field(default=None, repr=False)
    # The caller retries a retryable error itself (with retry-after); the client's own retries stay few.
    max_attempts: int = 2
    connect_timeout: float = 5.0
    read_timeout: float = 30.0
    addressing_style: Literal["auto", "path", "virtual"] = "auto"

    def __post_init__(self) -> None:
        if not isinstance(self.bucket, str) or not 3 <= len(self.bucket) <= 63:
            raise ValueError("bucket must be a str of 3..63 chars")
        if not isinstance(self.prefix, str) or len(self.prefix.encode("utf-8", "surrogatepass")) > MAX_PREFIX_BYTES:
            raise ValueError(f"prefix must be a str of at most {MAX_PREFIX_BYTES} bytes")
        try:
            self.prefix.encode("utf-8")
        except UnicodeEncodeError:
            raise ValueError("prefix must be valid Unicode (S3 keys are UTF-8)") from None
        for name in ("access_key_id", "secret_access_key", "session_token"):
            object.__setattr__(self, name, _secret(name, getattr(self, name)))
        if isinstance(self.max_attempts, bool) or not isinstance(self.max_attempts, int) or self.max_attempts < 1:
            raise ValueError("max_attempts must be an int of at least 1")
        _positive("connect_timeout", self.connect_timeout)
        _positive("read_timeout", self.read_timeout)
        if self.addressing_style not in ("auto", "path", "virtual"):
            raise ValueError("addressing_style must be 'auto', 'path' or 'virtual'")

    @property
    def prefix_bytes(self) -> bytes:
        return self.prefix.encode("utf-8")

    def secrets(self) -> tuple[str, ...]:
        """The configured credentials' texts (for tests and checks that nothing shows them)."""
        held = (self.access_key_id, self.secret_access_key, self.session_token)
        return tuple(secret.reveal() for secret in held if secret is not None)

    def make_client(self) -> Any:
        """A boto3 S3 client for this configuration (imported here: boto3 is the optional `s3` extra)."""
        from botocore.config import Config

        def text(secret: Secret | None) -> str | None:
            return None if secret is None else secret.reveal()

        config = Config(
            retries={"mode": "standard", "total_max_attempts": self.max_attempts},
            connect_timeout=self.connect_timeout,
            read_timeout=self.read_timeout,
            s3={"addressing_style": self.addressing_style},
        )
        # Credentials go to the client, not the shared session: clients of two configurations never mix them.
        # A botocore session is not thread-safe (clients are): clients are made under the lock.
        with _SESSION_LOCK:
            return _shared_session().create_client(
                "s3",
                region_name=self.region,
                endpoint_url=self.endpoint_url,
                aws_access_key_id=text(self.access_key_id),
                aws_secret_access_key=text(self.secret_access_key),
                aws_session_token=text(self.session_token),
                config=config,
            )


_SESSION: Any = None
_SESSION_LOCK = threading.RLock()


def _shared_session() -> Any:
    """One botocore session per process: it caches the parsed S3 service model, so a new client costs
    milliseconds instead of the ~150 ms of loading the model again (connectors are made per scan)."""
    global _SESSION
    with _SESSION_LOCK:  # re-entered from make_client
        if _SESSION is None:
            import botocore.session

            session = botocore.session.get_session()
            # Timestamps stay the server's text: parsing LastModified with dateutil is ~60% of the client's CPU
            # in a listing, and the connector reads it only for a server that lists no ETag (`_Listed`).
            session.get_component("response_parser_factory").set_parser_defaults(timestamp_parser=str)
            _SESSION = session
        return _SESSION
