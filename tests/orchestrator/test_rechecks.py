"""The run loop answers checks requests (orchestrator/rechecks.py) on a real database, with checks that need no Spark.

A daily (raw value * 10, in a text file) and a weekly-like rollup built from it go Live under one graph; an
orchestrator with another graph (the daily's checks added or changed) then answers the requests the log holds.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from partbuild.orchestrator.buckets import StaticBucket
from partbuild.orchestrator.checks import Check, CheckContext
from partbuild.orchestrator.graph import Graph
from partbuild.orchestrator.loop import Orchestrator
from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.database import Database
from partbuild.state.fold.build_state import BuildState
from partbuild.state.fold.records import InstanceState as I
from partbuild.state.log.digest import state_digest
from partbuild.state.log.events import envelope, manual
from partbuild.state.log.replay import replay_into
from partbuild.state.log.store import EventLog
from partbuild.state.rules.bucketing import bucket

from recheckkit import DAILY, RAW, ROLLUP, at_most, broken, graph, write

OrchestratorFactory = Callable[..., Orchestrator]


@pytest.fixture
def orchestrators(db_url: str, tmp_path: Path) -> Iterator[OrchestratorFactory]:
    made: list[tuple[Orchestrator, Database]] = []

    def make(graph: Graph, **options: Any) -> Orchestrator:
        db = Database.open(db_url, auto_upgrade=True)
        settings = {"warehouse": str(tmp_path / "warehouse"), "spark": None, "poll_interval_s": 0.01, **options}
        orchestrator = Orchestrator(db, graph, source_check_interval_s=0, **settings)
        made.append((orchestrator, db))
        return orchestrator

    yield make
    for orchestrator, db in made:
        orchestrator.close()
        db.close()


@pytest.fixture
def log(db_url: str) -> Iterator[EventLog]:
    with EventLog.open(db_url, auto_upgrade=True) as handle:
        yield handle


@pytest.fixture
def built(tmp_path: Path, orchestrators: OrchestratorFactory, log: EventLog) -> tuple[str, str]:
    """The daily and the rollup Live under a graph whose daily has no checks: their UUIDs."""
    write(str(tmp_path / "raw"), 1)
    log.append([envelope(pb.WantCreate(want_id="w", partition_refs=[ROLLUP]), source=manual("ann"))])
    first = orchestrators(graph(tmp_path))
    assert first.run_until_idle(timeout_s=30)
    state = first.state
    uuids = state.canonical[DAILY], state.canonical[ROLLUP]
    assert [state.instances[uuid].state for uuid in uuids] == [I.LIVE, I.LIVE]
    first.close()
    return uuids


def ask(log: EventLog, uuid: str, request_id: str = "q1") -> None:
    request = pb.ChecksRequest(request_id=request_id, instance_uuid=uuid)
    log.append([envelope(request, source=manual("ann"))])


def verified(orchestrator: Orchestrator) -> BuildState:
    """The orchestrator's state, equal to a strict replay of the log that rejected nothing."""
    orchestrator.catch_up()
    strict = BuildState(strict=True)
    replay_into(strict, orchestrator.log)
    assert state_digest(strict) == state_digest(orchestrator.state)
    assert [r for r in strict.rejections if r.event_type != "job_run_heartbeat"] == []
    return orchestrator.state


def test_a_blocking_failure_taints_the_instance_and_what_was_built_from_it_naming_the_check(
    tmp_path: Path, orchestrators: OrchestratorFactory, log: EventLog, built: tuple[str, str]
) -> None:
    daily, rollup = built
    seen: list[CheckContext] = []
    ask(log, daily)
    second = orchestrators(graph(tmp_path, at_most(5, seen=seen), at_most(100, blocking=False)))
    assert second.run_until_idle(timeout_s=30)
    state = verified(second)
    assert (state.instances[daily].state, state.instances[rollup].state) == (I.TAINTED, I.TAINTED)
    assert (
        state.instances[daily].note
        == f"check at_most_5 failed on {DAILY}: value 10 (at most 5) (checks run again, request q1)"
    )
    assert (state.instances[rollup].note or "").startswith(f"upstream {DAILY} tainted: check at_most_5 failed")
    ((seq, rows),) = state.check_results[daily]
    assert [(name, passed, blocking) for name, passed, blocking, *_ in rows] == [
        ("at_most_5", False, True),
        ("at_most_100", True, False),
    ]
    assert state.check_requests["q1"][2] == seq and not state.pending_check_requests
    (context,) = seen  # the check saw the instance's location and the input it was built from
    raw = state.instances[daily].inputs[0]
    assert context.location == state.instances[daily].location and context.input_locations == {
        RAW: state.instances[raw].location
    }


def test_a_passing_rerun_or_an_errored_check_records_results_and_taints_nothing(
    tmp_path: Path, orchestrators: OrchestratorFactory, log: EventLog, built: tuple[str, str]
) -> None:
    daily, rollup = built
    ask(log, daily, "q1")
    second = orchestrators(graph(tmp_path, at_most(10)))
    assert second.run_until_idle(timeout_s=30)
    second.close()
    ask(log, daily, "q2")
    third = orchestrators(graph(tmp_path, Check("broken", broken)))
    assert third.run_until_idle(timeout_s=30)
    state = verified(third)
    assert (state.instances[daily].state, state.instances[rollup].state) == (I.LIVE, I.LIVE)
    passed, errored = (rows for _, rows in state.check_results[daily])
    assert [row[:4] for row in passed] == [("at_most_10", True, True, False)]
    assert [row[:4] for row in errored] == [("broken", False, True, True)]
    assert "ValueError: no such column" in errored[0][4]


def test_a_job_without_checks_answers_skipped_and_an_owner_of_another_bucket_leaves_the_request(
    tmp_path: Path, orchestrators: OrchestratorFactory, log: EventLog, built: tuple[str, str]
) -> None:
    _, rollup = built
    ask(log, rollup)
    mine = bucket("partbuild", ROLLUP, 2)
    other = orchestrators(graph(tmp_path), ownership=StaticBucket(3 - mine, 2))
    assert other.run_until_idle(timeout_s=30)
    assert list(other.state.pending_check_requests) == ["q1"]  # not its ref: it neither answers nor waits
    other.close()
    owner = orchestrators(graph(tmp_path), ownership=StaticBucket(mine, 2))
    assert owner.run_until_idle(timeout_s=30)
    state = verified(owner)
    assert not state.pending_check_requests and rollup not in state.check_results
    answers = [e.checks_rerun for e in (s.to_event() for s in log.read(0, 1_000)) if e.HasField("checks_rerun")]
    assert [answer.skipped for answer in answers] == ["job rollup declares no checks"]


def test_two_orchestrators_answering_at_once_record_one_answer_and_one_taint(
    tmp_path: Path, orchestrators: OrchestratorFactory, log: EventLog, built: tuple[str, str]
) -> None:
    daily, rollup = built
    ask(log, daily)
    both = [orchestrators(graph(tmp_path, at_most(5))) for _ in range(2)]
    threads = [threading.Thread(target=o.run_until_idle, kwargs={"timeout_s": 30}) for o in both]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    state = verified(both[0])  # no rejection: the second saw the answer (or lost the guarded append) and wrote nothing
    events = [stored.to_event() for stored in log.read(0, 1_000)]
    kinds = [event.WhichOneof("payload") for event in events]
    assert kinds.count("checks_rerun") == 1 and kinds.count("partition_taint") == 1
    assert (state.instances[daily].state, state.instances[rollup].state) == (I.TAINTED, I.TAINTED)


def test_a_rerun_compares_with_the_instance_that_went_live_before_as_the_gate_does(
    tmp_path: Path, orchestrators: OrchestratorFactory, log: EventLog, built: tuple[str, str]
) -> None:
    first_daily, _ = built
    log.append([envelope(pb.PartitionTaint(partition_ref=DAILY, reason="late"), source=manual("ann"))])
    log.append([envelope(pb.WantCreate(want_id="w2", partition_refs=[ROLLUP]), source=manual("ann"))])
    rebuild = orchestrators(graph(tmp_path))
    assert rebuild.run_until_idle(timeout_s=30)
    second_daily = rebuild.state.canonical[DAILY]
    first_location = rebuild.state.instances[first_daily].location
    rebuild.close()
    seen: list[CheckContext] = []
    ask(log, second_daily)
    rerun = orchestrators(graph(tmp_path, at_most(100, seen=seen)))
    assert rerun.run_until_idle(timeout_s=30)
    verified(rerun)
    (context,) = seen
    assert context.instance_uuid == second_daily and context.previous_location == first_location is not None
