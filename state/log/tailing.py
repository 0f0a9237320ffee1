"""A background thread that keeps a reader current: it calls one step at an interval until told to stop."""

from __future__ import annotations

import threading
from collections.abc import Callable


class Tailer:
    """Calls `step()` every `interval_s` in a daemon thread named `name` until `stop()`, or until a step says
    it cannot go on (returns False). A step catches its own errors: it decides which end the thread."""

    def __init__(self, name: str, step: Callable[[float], bool]) -> None:
        self._name = name
        self._step = step
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self, interval_s: float) -> None:
        """Start the thread, unless it runs already."""
        if self._thread is None:
            self._stop.clear()
            self._thread = threading.Thread(target=self._run, args=(interval_s,), name=self._name, daemon=True)
            self._thread.start()

    def _run(self, interval_s: float) -> None:
        while not self._stop.wait(interval_s):
            if not self._step(interval_s):
                return

    def stop(self) -> None:
        """Stop the thread (waiting up to 5 s for a step in progress)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
