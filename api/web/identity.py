"""Who is looking at a page: the seam between the web pages and access control.

Every page handler asks `current_identity(request)`; write forms are shown, and
form posts accepted, only when `may_write(identity)`. Until access control is
in place this is open access: everyone is `anonymous` with every role, as the
API treats a request without tokens. Access control replaces the two function
bodies (with `partbuild.api.auth.authenticate` and its role order); the pages
do not change.
"""

from __future__ import annotations

from dataclasses import dataclass

from fastapi import Request

from partbuild.api.surface import ANONYMOUS

ROLES = ("reader", "writer", "admin")  # in increasing order of what they may do


@dataclass(frozen=True)
class Identity:
    """A user and their role: `reader`, `writer` or `admin`."""

    name: str
    role: str


def current_identity(request: Request) -> Identity:
    """The identity a page is served to (open access for now)."""
    return Identity(ANONYMOUS, "admin")


def may_write(identity: Identity) -> bool:
    """Whether this identity may want, cancel and taint (the API's `writer` role or above)."""
    return ROLES.index(identity.role) >= ROLES.index("writer")
