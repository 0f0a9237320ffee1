"""Helpers of the leader-lock takeover tests (tests/test_leader_takeover*.py): a survivor `GroupWorker`
started as `run --group` starts one, waiting for its heartbeats, the warnings it logged, and the schema a
PostgreSQL test URL selects."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest
import sqlalchemy as sa

from partbuild.orchestrator.group.membership import Group
from partbuild.orchestrator.group.steps import GroupConfig
from partbuild.orchestrator.group.worker import GroupWorker
from partbuild.state.database import Database
from partbuild.state.log.live import LiveState

from memberkit import wait_until

GROUP = "builders"
TIMEOUT_MS = 1000
SURVIVOR = "survivor"


def wait_for_beats(group: Group, task: str, beats: int) -> None:
    """Wait until `task`'s row has taken `beats` more heartbeats: each one is a tick that also judged the holder."""
    seen: set[int] = set()

    def beaten() -> bool:
        seen.update(m.last_heartbeat_ms for m in group.all_members() if m.task_id == task)
        return len(seen) > beats

    wait_until(beaten, 30, f"{beats} heartbeats of {task}")


def schema_of(db_url: str) -> str:
    return sa.make_url(db_url).query["options"].removeprefix("-csearch_path=")


@contextmanager
def survivors() -> Iterator[Callable[[Database], GroupWorker]]:
    """Starts a `GroupWorker` (task "survivor") on a database, as `run --group` does; stopped on exit."""
    started: list[GroupWorker] = []

    def start(db: Database) -> GroupWorker:
        config = GroupConfig(GROUP, buckets=4, member_timeout_s=TIMEOUT_MS / 1000)
        worker = GroupWorker(db, LiveState(db.log), config, SURVIVOR)
        worker.start()
        started.append(worker)
        return worker

    try:
        yield start
    finally:
        for worker in started:
            worker.stop()


def warnings_with(caplog: pytest.LogCaptureFixture, text: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and text in r.getMessage()]
