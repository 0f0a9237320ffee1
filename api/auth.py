"""Who is calling: bearer tokens, the web UI's session cookies, and the role each operation needs.

- While the database has no token at all, access is open: every caller is
  `anonymous` with the admin role, and a write records the user that the
  `X-Partbuild-User` header names, as before access control existed. Once a
  token has been added, every route but /healthz needs credentials, even after
  every token is revoked (revoking the last token must not open the server).
- Credentials: `Authorization: Bearer <token>`, else the `partbuild_session`
  cookie that `sign_in` set. Missing, unknown, revoked or expired: 401 with
  `WWW-Authenticate: Bearer`; a role below the operation's: 403. With a token,
  the user recorded on appended events is the token's name, never a header.
- The session cookie authenticates only reads (GET, HEAD) of the API: a write
  through the API needs the bearer token, so a page of another site cannot make
  a browser write with its cookie. The web pages' own forms check a CSRF token.
- The token table is cached in memory and re-read when the copy is older than
  `TOKEN_CACHE_S` (1 s): a revoked token, and the sessions signed in with it,
  stop working within that time in every process serving the database. A lookup
  is a hash and a dict read (~6 us); reading the table costs a few ms on SQLite,
  at most once a second (one query per request would cost ~1.3 ms each).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import ipaddress
import json
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Literal

from fastapi import Request, Response

from partbuild.api.errors import Forbidden, Unauthorized
from partbuild.api.surface import ANONYMOUS
from partbuild.state.ops.tokens import Role, TokenInfo, TokenStore, token_hash

__all__ = [
    "SESSION_COOKIE",
    "Identity",
    "Role",
    "authenticate",
    "identity_of",
    "is_loopback",
    "require",
    "sign_in",
    "sign_out",
]

SESSION_COOKIE = "partbuild_session"
SESSION_MAX_AGE_S = 12 * 3600
TOKEN_CACHE_S = 1.0
_SAFE_METHODS = frozenset({"GET", "HEAD"})
# No security scheme in the OpenAPI document: whether a token is needed depends on the database
# (open access while it has none), which a static document cannot say; 401 and 403 are documented.


@dataclass(frozen=True)
class Identity:
    """Who a request acts as: a token's name and role (`via` says how it proved it)."""

    name: str
    role: Role
    via: Literal["open", "token", "session"] = "token"

    @property
    def open_access(self) -> bool:
        """True while the database has no tokens: anyone may do anything."""
        return self.via == "open"

    def may(self, needed: Role) -> bool:
        return self.role.allows(needed)


OPEN_ACCESS = Identity(ANONYMOUS, Role.ADMIN, "open")


class Authenticator:
    """The token table of one database, cached: re-read when older than `max_age_s`."""

    def __init__(self, tokens: TokenStore, *, max_age_s: float = TOKEN_CACHE_S) -> None:
        self._tokens = tokens
        self._max_age_s = max_age_s
        self._lock = threading.Lock()
        self._read_at = float("-inf")
        self._by_hash: dict[str, TokenInfo] = {}
        self._by_name: dict[str, TokenInfo] = {}
        self._key: bytes | None = None

    def _fresh(self) -> None:
        if time.monotonic() - self._read_at <= self._max_age_s:
            return
        with self._lock:  # one reader refreshes; the others wait for its copy rather than all querying
            if time.monotonic() - self._read_at <= self._max_age_s:
                return
            by_hash = self._tokens.by_hash()
            self._by_hash, self._by_name = by_hash, {info.name: info for info in by_hash.values()}
            self._read_at = time.monotonic()

    def invalidate(self) -> None:
        """Forget the cached table: the next request reads it (after a change made in this process)."""
        self._read_at = float("-inf")

    def open_access(self) -> bool:
        self._fresh()
        return not self._by_hash

    def active_token(self, token: str) -> TokenInfo | None:
        self._fresh()
        info = self._by_hash.get(token_hash(token))
        return info if info is not None and info.active else None

    def active_name(self, name: str) -> TokenInfo | None:
        self._fresh()
        info = self._by_name.get(name)
        return info if info is not None and info.active else None

    def _session_key(self) -> bytes:
        if self._key is None:
            self._key = self._tokens.session_key(int(time.time() * 1000))
        return self._key

    def seal(self, name: str, expires_s: int) -> str:
        """A session cookie's value: {name, expiry} and its HMAC-SHA256 under the database's key."""
        body = _b64(json.dumps({"n": name, "e": expires_s}, separators=(",", ":")).encode())
        return f"{body}.{_b64(self._mac(body))}"

    def unseal(self, value: str) -> str | None:
        """The name in a session cookie's value, when its MAC is right and it has not expired."""
        body, _, mac = value.partition(".")
        if not mac or not hmac.compare_digest(mac.encode(), _b64(self._mac(body)).encode()):
            return None
        try:
            session = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
            name, expires_s = session["n"], session["e"]
        except (ValueError, KeyError, TypeError):
            return None
        if not isinstance(name, str) or not isinstance(expires_s, int) or expires_s <= time.time():
            return None
        return name

    def _mac(self, body: str) -> bytes:
        return hmac.new(self._session_key(), body.encode("ascii", "replace"), hashlib.sha256).digest()


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def authenticator(request: Request) -> Authenticator:
    """The app's `Authenticator`, made on first use over its service's database."""
    state = request.app.state
    auth: Authenticator | None = getattr(state, "auth", None)
    if auth is None:
        auth = state.auth = Authenticator(state.service.db.tokens)
    return auth


def _resolve(request: Request) -> Identity | str:
    """The identity the request proves, or why it proves none (a detail for a 401)."""
    auth = authenticator(request)
    if auth.open_access():
        return OPEN_ACCESS
    header = request.headers.get("authorization")
    if header is not None:
        scheme, _, token = header.strip().partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            return "the Authorization header must be 'Bearer <token>'"
        info = auth.active_token(token.strip())
        if info is None:
            return "unknown or revoked token"
        return Identity(info.name, info.role, "token")
    cookie = request.cookies.get(SESSION_COOKIE)
    if cookie is not None:
        name = auth.unseal(cookie)
        info = auth.active_name(name) if name is not None else None
        if info is None:
            return "the session expired or its token was revoked: sign in again"
        return Identity(info.name, info.role, "session")
    return "this server needs a token: send 'Authorization: Bearer <token>' (partbuild: --token or PARTBUILD_TOKEN)"


def authenticate(request: Request) -> Identity:
    """The request's identity (open access while the database has no tokens); Unauthorized otherwise."""
    found = _resolve(request)
    if isinstance(found, str):
        raise Unauthorized(found)
    return found


def identity_of(request: Request) -> Identity | None:
    """The request's identity, or None when it has no valid credentials (for pages: show the sign-in)."""
    found = _resolve(request)
    return None if isinstance(found, str) else found


def sign_in(request: Request, response: Response, token: str) -> Identity:
    """Check `token` and set the session cookie on `response`; Unauthorized for a token that is not active."""
    info = authenticator(request).active_token(token.strip())
    if info is None:
        raise Unauthorized("unknown or revoked token")
    expires_s = int(time.time()) + SESSION_MAX_AGE_S
    response.set_cookie(
        SESSION_COOKIE,
        authenticator(request).seal(info.name, expires_s),
        max_age=SESSION_MAX_AGE_S,
        path="/",
        secure=request.url.scheme == "https",
        httponly=True,
        samesite="lax",
    )
    return Identity(info.name, info.role, "session")


def sign_out(response: Response) -> None:
    """Clear the session cookie (the browser forgets it; the signed value itself expires on its own)."""
    response.delete_cookie(SESSION_COOKIE, path="/", httponly=True, samesite="lax")


def require(needed: Role, what: str) -> Callable[..., Awaitable[Identity]]:
    """A FastAPI dependency: the caller's identity, when it may do `what` (which needs `needed`)."""

    async def dependency(request: Request) -> Identity:
        identity = authenticate(request)
        if identity.via == "session" and request.method not in _SAFE_METHODS:
            raise Unauthorized(
                "a session cookie authenticates reads only: send the token as 'Authorization: Bearer <token>'"
            )
        if not identity.may(needed):
            raise Forbidden(f"token {identity.name!r} has role {identity.role.value}; {what} needs {needed.value}")
        return identity

    return dependency


def is_loopback(host: str) -> bool:
    """Whether listening on `host` reaches this machine only: 127.0.0.0/8, ::1, localhost."""
    if host.lower().rstrip(".") == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False
