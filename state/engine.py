"""What owns a database engine: opened from a URL with its schema checked, closed once, named for messages.

`Database` (the whole database) and `EventLog` (the log alone, for code that needs nothing else)
are both opened this way; whichever opened the engine disposes of it.
"""

from __future__ import annotations

from types import TracebackType
from typing import Self

from sqlalchemy.engine import Engine

from partbuild.state.db import backend, read_only
from partbuild.state.migrate import open_migrated_engine


class EngineHandle:
    """A handle over one engine; `open` makes one that owns (and on `close` disposes of) its engine."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self._owns_engine = False

    @classmethod
    def open(cls, url: str, *, auto_upgrade: bool | None = None) -> Self:
        """Open the database at `url`, checking the schema (auto-upgraded by default on SQLite only)."""
        handle = cls(open_migrated_engine(url, auto_upgrade))
        handle._owns_engine = True
        return handle

    @property
    def backend(self) -> str:
        """The database behind it: "sqlite" or "postgresql"."""
        return backend(self._engine)

    def read_only(self) -> bool:
        """Whether the database takes no writes (a PostgreSQL hot standby; `state.db.read_only`)."""
        return read_only(self._engine)

    def describe(self) -> str:
        """The database URL with any password hidden, for messages."""
        return self._engine.url.render_as_string(hide_password=True)

    def close(self) -> None:
        """Release the connections of an engine this handle created (`open`)."""
        if self._owns_engine:
            self._engine.dispose()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
