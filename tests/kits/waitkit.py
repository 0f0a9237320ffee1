"""Waiting in tests for something another thread or process does."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest


def wait_for(what: str, check: Callable[[], Any], timeout_s: float = 20.0) -> Any:
    """Poll `check` until it returns something truthy; fail with `what` after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        result = check()
        if result:
            return result
        time.sleep(0.02)
    pytest.fail(f"timed out after {timeout_s} s waiting for {what}")
