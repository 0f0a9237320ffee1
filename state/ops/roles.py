"""API token roles: reader < writer < admin. Apart from the token store, so the API's declarations
(`api/surface`, which the HTTP client reads) name roles without importing SQLAlchemy."""

from __future__ import annotations

import enum


class Role(enum.Enum):
    """What a token may do; each role may do everything the roles before it may."""

    READER = "reader"
    WRITER = "writer"
    ADMIN = "admin"

    def allows(self, needed: Role) -> bool:
        """Whether this role may do what `needed` may."""
        return _RANK[self] >= _RANK[needed]

    @classmethod
    def parse(cls, name: str) -> Role:
        """The role called `name`; ValueError naming the roles otherwise."""
        try:
            return cls(name)
        except ValueError:
            raise ValueError(f"unknown role {name!r}: one of {', '.join(r.value for r in cls)}") from None


_RANK = {role: rank for rank, role in enumerate(Role)}
