"""The orchestrator of `up`, in a thread beside the HTTP API: restarted when it fails, its health reported.

An exception out of the run loop (a bug, a database that went away, a Spark session that died) must not
stop the API, nor leave it taking wants that nobody builds. The supervisor logs it, reports the
orchestrator degraded (`health`: `/healthz` shows it) and starts a new orchestrator after a backoff
(1 s, doubling to a minute), which resumes from the log like any restart: what the old one owed (retries,
reactions, ticks) is in the log. A run that then lasts `HEALTHY_AFTER_S` resets the backoff. An orchestrator
that stops because the working set it decides on was loaded again (`StateLoadedAgain`) did not fail: a new
one starts at once.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, Protocol

from partbuild.orchestrator.errors import first_line

logger = logging.getLogger("partbuild")

FIRST_BACKOFF_S = 1.0
MAX_BACKOFF_S = 60.0
HEALTHY_AFTER_S = 60.0  # a run at least this long resets the backoff


class StateLoadedAgain(RuntimeError):
    """The live state was loaded again (a working set that could not fold on: `LiveState.load_again`): what an
    orchestrator kept of the old one (its helpers' cursors, what they walk) is not of the new one, so it stops,
    and a new one starts at once, as after a start."""


class Runnable(Protocol):
    def run(self, stop: threading.Event) -> None: ...

    def wake(self) -> None: ...


HealthStatus = Literal["running", "restarting", "stopped"]


@dataclass(frozen=True)
class Health:
    """The orchestrator's health: "running", "restarting" (it failed: a new one starts after a backoff) or
    "stopped"; how many times it failed, and the last failure's one line."""

    status: HealthStatus
    failures: int
    last_error: str | None


class Supervisor:
    """Runs `make()`'s orchestrator until `request_stop`, making a new one after each failure."""

    def __init__(self, make: Callable[[], Runnable], *, first_backoff_s: float = FIRST_BACKOFF_S) -> None:
        self._make = make
        self._first_backoff_s = first_backoff_s
        self.stop = threading.Event()
        self._lock = threading.Lock()
        self._current: Runnable | None = None
        self._status: HealthStatus = "running"
        self._failures = 0
        self._last_error: str | None = None
        self.thread = threading.Thread(target=self._run, name="partbuild-orchestrator")
        self.thread.start()

    @property
    def health(self) -> Health:
        with self._lock:
            return Health(self._status, self._failures, self._last_error)

    def wake(self) -> None:
        """Something was appended: step now (the current orchestrator, if one runs)."""
        current = self._current
        if current is not None:
            current.wake()

    def request_stop(self) -> None:
        self.stop.set()
        self.wake()

    def _run(self) -> None:
        backoff = self._first_backoff_s
        while not self.stop.is_set():
            started = time.monotonic()
            try:
                self._current = self._make()
                self._set("running")
                self._current.run(self.stop)
            except StateLoadedAgain as exc:  # not a failure: a new one starts at once, on the state loaded again
                logger.warning("a new orchestrator starts: %s", exc)
            except Exception as exc:  # the API keeps serving; a new orchestrator resumes from the log
                logger.exception("the orchestrator failed; a new one starts in %.0f s", backoff)
                with self._lock:
                    self._failures += 1
                    self._last_error = f"{type(exc).__name__}: {first_line(str(exc))}"
                self._set("restarting")
                if time.monotonic() - started >= HEALTHY_AFTER_S:
                    backoff = self._first_backoff_s
                self.stop.wait(backoff)
                backoff = min(backoff * 2, MAX_BACKOFF_S)
            finally:
                self._current = None
        self._set("stopped")

    def _set(self, status: HealthStatus) -> None:
        with self._lock:
            self._status = status
