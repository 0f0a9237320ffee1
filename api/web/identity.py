"""Who is looking at a page: access control's identity (`partbuild.api.auth`), or a sign-in first.

Every page handler asks `current_identity(request)`: a bearer token or the
session cookie when the database has tokens, open access (`anonymous`, every
role) while it has none. Without valid credentials it raises `SignInNeeded`,
which the web UI answers by sending the browser to `/signin`. Write forms are
shown, and form posts accepted, only when `may_write(identity)`.
"""

from __future__ import annotations

from fastapi import Request

from partbuild.api.auth import Identity, Role, identity_of


class SignInNeeded(Exception):
    """Tokens exist and the request carries no valid one."""


def current_identity(request: Request) -> Identity:
    """The identity a page is served to; SignInNeeded without valid credentials."""
    identity = identity_of(request)
    if identity is None:
        raise SignInNeeded
    return identity


def identity_or_none(request: Request) -> Identity | None:
    """The identity, or None without valid credentials (an error page shows either)."""
    return identity_of(request)


def may_write(identity: Identity | None) -> bool:
    """Whether this identity may want, cancel and taint (the API's `writer` role or above)."""
    return identity is not None and identity.may(Role.WRITER)
