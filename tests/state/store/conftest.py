"""Fixtures of the state store's tests."""

from __future__ import annotations

import pytest

from partbuild.state.store import cold_start


@pytest.fixture
def settle_often(monkeypatch: pytest.MonkeyPatch) -> None:
    """A working set's load looks at the rows of what it folded every 3 events (not 20,000)."""
    monkeypatch.setattr(cold_start, "SETTLE_EVERY", 3)
