"""Automation in real `partbuild up` and `run` processes (tests/data/graphs/reacting.py, no Spark): every due time
of a seconds cron and an interval ticks while a failing schedule records its errors and the API keeps answering;
a reaction noted inside its debounce window survives a SIGKILL and fires once after the restart; `run
--until-idle` waits for a reaction that is debouncing."""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.database import Database
from partbuild.state.fold.build_state import BuildState
from partbuild.state.fold.records import InstanceState
from partbuild.state.log.events import envelope, manual, system

from upkit import free_port, partbuild_exe, started, stop_with_sigterm, wait_healthy

pytestmark = pytest.mark.process

GRAPH = Path(__file__).resolve().parents[1] / "data/graphs/reacting.py"
TICKING_S = 30  # 30 and 15 due times of the 1 s and 2 s schedules: each must tick, none twice
DEBOUNCE_S = 4


def replayed(db_url: str) -> tuple[BuildState, list[pb.Event]]:
    """The state of the log, and its accepted events."""
    state, accepted = BuildState(strict=True), []
    with Database.open(db_url) as db:
        for seq, payload in db.log.iter_payloads():
            if state.apply_payload(seq, payload) is None:
                event = pb.Event()
                event.ParseFromString(payload)
                accepted.append(event)
    return state, accepted


def up_command(db_url: str, tmp_path: Path, port: int) -> list[str]:
    warehouse = str(tmp_path / "warehouse")
    return [partbuild_exe(), "up", "--db", db_url, "--graph", str(GRAPH), "--warehouse", warehouse, "--port", str(port)]


def wait_until(
    what: str, check: Callable[[], Any], process: subprocess.Popen[bytes], log: Path, timeout_s: float = 60
) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert process.poll() is None, f"exited while waiting for {what}:\n{log.read_text()[-3000:]}"
        found = check()
        if found:
            return found
        time.sleep(0.1)
    raise AssertionError(f"not {what} within {timeout_s} s:\n{log.read_text()[-3000:]}")


def test_every_due_time_ticks_while_a_failing_schedule_records_its_errors_and_the_api_answers(
    sqlite_url: str, tmp_path: Path
) -> None:
    port, log = free_port(), tmp_path / "up.log"
    url = f"http://127.0.0.1:{port}"
    env = os.environ | {"REACTING_SCHEDULES": "1"}
    with started(up_command(sqlite_url, tmp_path, port), log, env) as process:
        wait_healthy(url, process, 60, log)
        deadline = time.monotonic() + TICKING_S
        while time.monotonic() < deadline:  # the API answers throughout
            assert process.poll() is None, log.read_text()[-3000:]
            health = httpx.get(f"{url}/healthz", timeout=5).json()
            assert health["status"] == "ok" and health["orchestrator"]["failures"] == 0, health
            time.sleep(1)
        automation = httpx.get(f"{url}/api/v1/automation", timeout=5).json()
        schedules = {s["name"]: s for s in automation["schedules"]}
        metrics = httpx.get(f"{url}/metrics", timeout=5).text
        assert stop_with_sigterm(process, 60, log) == 0
    times: dict[str, list[int]] = {}  # each schedule's ticks, up to the seq the automation answer was read as of
    state = BuildState(strict=True)
    with Database.open(sqlite_url) as db:
        for seq, payload in db.log.iter_payloads(upto_seq=automation["as_of_seq"]):
            event = pb.Event()
            event.ParseFromString(payload)
            if state.apply_payload(seq, payload) is None and event.HasField("schedule_tick"):
                times.setdefault(event.schedule_tick.schedule, []).append(event.schedule_tick.tick_ms)
    for name, period_ms in (("every_second", 1000), ("every_two", 2000), ("broken", 1000)):
        ticked = times[name]
        assert len(ticked) >= TICKING_S * 1000 // period_ms - 3, (name, len(ticked))
        assert {b - a for a, b in itertools.pairwise(ticked)} == {period_ms}, name  # no time skipped
        assert schedules[name]["missed"] == 0 and schedules[name]["ticks"] == len(ticked), schedules[name]
    assert schedules["broken"]["last_error"].startswith("want function raised LookupError: no calendar for")
    assert 'partbuild_schedule_last_tick_failed{schedule="broken"} 1.0' in metrics
    assert 'partbuild_schedule_last_tick_failed{schedule="every_two"} 0.0' in metrics


def observe(db_url: str, version: str) -> None:
    seen = pb.PartitionObserved(partition_ref="raw/day=1", location=f"/data/raw/1/{version}", version=version)
    with Database.open(db_url) as db:
        db.log.append([envelope(seen, source=system("connector"))])


def reaction_firings(db_url: str) -> list[pb.ReactionFired]:
    return [event.reaction_fired for event in replayed(db_url)[1] if event.HasField("reaction_fired")]


def daily_built_from(db_url: str) -> str | None:
    """The raw version the Live daily/day=1 was built from, if it is Live."""
    state, _ = replayed(db_url)
    daily = state.canonical_instance("daily/day=1")
    if daily is None or daily.state != InstanceState.LIVE:
        return None
    (raw,) = [state.instances[uuid] for uuid in daily.inputs]
    return raw.location.rsplit("/", 1)[-1]


def run_until_idle(db_url: str, tmp_path: Path, env: dict[str, str]) -> float:
    """`partbuild run --until-idle`: its exit code must be 0; returns how long it took."""
    command = [partbuild_exe(), "run", "--db", db_url, "--graph", str(GRAPH), "--warehouse", str(tmp_path / "wh")]
    started_at = time.monotonic()
    done = subprocess.run([*command, "--until-idle"], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    return time.monotonic() - started_at


def test_a_reaction_survives_a_sigkill_in_its_window_and_until_idle_waits_for_one(
    sqlite_url: str, tmp_path: Path
) -> None:
    env = os.environ | {"REACTING_DEBOUNCE_S": str(DEBOUNCE_S)}
    observe(sqlite_url, "v1")
    with Database.open(sqlite_url) as db:
        db.log.append([envelope(pb.WantCreate(want_id="w", partition_refs=["daily/day=1"]), source=manual("ann"))])
    run_until_idle(sqlite_url, tmp_path, env)
    assert daily_built_from(sqlite_url) == "v1"

    port, log = free_port(), tmp_path / "up.log"
    url = f"http://127.0.0.1:{port}"
    with started(up_command(sqlite_url, tmp_path, port), log, env) as first:
        wait_healthy(url, first, 60, log)
        observed_at = time.monotonic()
        observe(sqlite_url, "v2")

        def noted() -> bool:
            (daily,) = httpx.get(f"{url}/api/v1/automation", timeout=5).json()["reactions"]
            return daily["pending_total"] == 1

        wait_until("the firing noted", noted, first, log)
        first.send_signal(signal.SIGKILL)  # inside the window: the firing is owed, not fired
        first.wait(10)
        assert time.monotonic() - observed_at < DEBOUNCE_S and reaction_firings(sqlite_url) == []
    with started(up_command(sqlite_url, tmp_path, port), log.with_name("up2.log"), env) as second:
        wait_until("rebuilt from v2", lambda: daily_built_from(sqlite_url) == "v2", second, log.with_name("up2.log"))
        assert stop_with_sigterm(second, 60, log.with_name("up2.log")) == 0
    (fired,) = reaction_firings(sqlite_url)  # once: the restart found it in the log
    assert list(fired.want.partition_refs) == ["daily/day=1"]

    observe(sqlite_url, "v3")
    took = run_until_idle(sqlite_url, tmp_path, env)  # not idle while the reaction debounces
    assert daily_built_from(sqlite_url) == "v3" and len(reaction_firings(sqlite_url)) == 2
    assert took >= DEBOUNCE_S - 1  # it waited for the window (the change was folded just before it started)
    state, _ = replayed(sqlite_url)
    assert not state.reaction_pending and not state.rejections


def start_member(db_url: str, tmp_path: Path, name: str, env: dict[str, str]) -> subprocess.Popen[bytes]:
    command = [
        partbuild_exe(), "run", "--db", db_url, "--graph", str(GRAPH), "--warehouse", str(tmp_path / "warehouse"),
        "--heartbeat-interval", "0.3", "--heartbeat-timeout", "3", "--group", "g", "--buckets", "6",
        "--member-timeout", "2",
    ]  # fmt: skip
    output = (tmp_path / f"{name}.log").open("ab")
    return subprocess.Popen(command, env=env, stdout=output, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)


def test_firings_a_killed_group_member_owed_are_fired_once_by_the_new_owners(tmp_path: Path) -> None:
    db_url, days = f"sqlite:///{tmp_path / 'group.db'}", range(1, 7)
    env = os.environ | {"REACTING_DEBOUNCE_S": "6"}
    with Database.open(db_url, auto_upgrade=True) as db:
        seen = [pb.PartitionObserved(partition_ref=f"raw/day={d}", location=f"/raw/{d}/v1", version="v1") for d in days]
        want = pb.WantCreate(want_id="w", partition_refs=[f"daily/day={d}" for d in days])
        db.log.append([*(envelope(s, source=system("connector")) for s in seen), envelope(want, source=manual("a"))])
    members = {n: start_member(db_url, tmp_path, f"m{n}", env) for n in range(3)}
    log = tmp_path / "m0.log"
    try:
        live = {f"daily/day={d}" for d in days}

        def built(version: str) -> bool:
            state = replayed(db_url)[0]
            return all(
                (i := state.canonical_instance(ref)) is not None
                and i.state == InstanceState.LIVE
                and state.instances[i.inputs[0]].location.endswith(version)
                for ref in live
            )

        wait_until("the dailies built from v1", lambda: built("v1"), members[0], log, 120)
        with Database.open(db_url) as db:
            again = [
                pb.PartitionObserved(partition_ref=f"raw/day={d}", location=f"/raw/{d}/v2", version="v2") for d in days
            ]
            db.log.append([envelope(s, source=system("connector")) for s in again])
        changed_at = time.monotonic()
        wait_until("six firings noted", lambda: len(replayed(db_url)[0].reaction_pending) == 6, members[0], log)
        notes = [e for e in replayed(db_url)[1] if e.HasField("reactions_noted") and e.reactions_noted.pending]
        victim = next(n for n, p in members.items() if any(f":{p.pid}:" in e.source.system.worker for e in notes))
        victim_pid = f":{members[victim].pid}:"
        owed = {
            f.partition_ref for e in notes if victim_pid in e.source.system.worker for f in e.reactions_noted.pending
        }
        members.pop(victim).send_signal(signal.SIGKILL)  # inside the window: what it noted is owed by its buckets
        assert time.monotonic() - changed_at < 6
        wait_until("the dailies rebuilt from v2", lambda: built("v2"), next(iter(members.values())), log, 120)
    finally:
        for process in members.values():
            process.send_signal(signal.SIGTERM)
        for process in members.values():
            process.wait(60)
    fired_by = {
        e.reaction_fired.want.partition_refs[0]: e.source.system.worker
        for e in replayed(db_url)[1]
        if e.HasField("reaction_fired")
    }
    assert len(reaction_firings(db_url)) == len(fired_by) == len(live)  # each once
    assert owed and all(victim_pid not in fired_by[ref] for ref in owed)  # by the buckets' new owners
    assert not replayed(db_url)[0].reaction_pending
