"""The supervisor of `up`'s orchestrator (orchestrator/supervisor.py): a failed orchestrator is replaced after a
backoff while the API reports it degraded, and the API process never stops for it."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from partbuild.api.service import Service
from partbuild.orchestrator.supervisor import Health, Supervisor
from partbuild.state.database import Database


class Scripted:
    """An orchestrator whose `run` fails the first `failures` times it is made, then runs until stopped."""

    made = 0

    def __init__(self, failures: int, started: threading.Event) -> None:
        Scripted.made += 1
        self.number = Scripted.made
        self.failures = failures
        self.started = started
        self.woken = 0

    def run(self, stop: threading.Event) -> None:
        if self.number <= self.failures:
            raise RuntimeError(f"database went away (attempt {self.number})\n  a stack line")
        self.started.set()
        stop.wait()

    def wake(self) -> None:
        self.woken += 1


def wait_until(check: Callable[[], bool], timeout_s: float = 10) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_a_failed_orchestrator_is_replaced_and_its_failures_are_reported(sqlite_url: str) -> None:
    Scripted.made = 0
    started = threading.Event()
    seen: list[Health] = []
    supervisor = Supervisor(lambda: Scripted(2, started), first_backoff_s=0.05)
    try:
        wait_until(lambda: seen.append(supervisor.health) or supervisor.health.failures >= 1)
        assert supervisor.health.last_error == "RuntimeError: database went away (attempt 1)"  # one line
        assert started.wait(10), "the third orchestrator never ran"
        assert supervisor.health == Health("running", 2, "RuntimeError: database went away (attempt 2)")
        assert Scripted.made == 3
        with Database.open(sqlite_url, auto_upgrade=True) as db:
            degraded = Service(db, health=lambda: Health("restarting", 2, "RuntimeError: x")).health()
            assert degraded.status == "degraded" and degraded.orchestrator.failures == 2  # type: ignore[union-attr]
            assert Service(db, health=lambda: supervisor.health).health().status == "ok"
    finally:
        supervisor.request_stop()
        supervisor.thread.join(10)
    assert not supervisor.thread.is_alive() and supervisor.health.status == "stopped"
    assert any(health.status == "restarting" for health in seen)
