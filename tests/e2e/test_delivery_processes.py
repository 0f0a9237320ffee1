"""`partbuild deliver` as real processes against a real webhook receiver, on SQLite and PostgreSQL.

Covered: a deliver process SIGKILLed mid-step and restarted (nothing lost; the only
duplicates are the messages of the step it had not committed); two processes each
running a part of the shards while the shard count goes 2 -> 4 -> 1 and some groups
fail for a while (nothing lost, per-group order kept, the RQ drains); the CLI's
refusals (exit 2, one line) and its dead-letter commands (dlq, replay, purge).

The events are wants appended by a thread of the test process: a want of refs is one
message per ref, the ref being its ordering group.
"""

from __future__ import annotations

import base64
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType
from typing import Any

import pytest

from partbuild.api.commands.common import Target, connect
from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.database import Database
from partbuild.state.log.events import envelope, manual
from partbuild.state.rules.topics import key_hash, route

from receiverkit import Answer, Received, Receiver, failing_groups

pytestmark = pytest.mark.process

pytest.importorskip("standardwebhooks", reason="needs pip install -e '.[dev]'")

SECRET = "whsec_" + base64.b64encode(b"partbuild-delivery-process-tests").decode()
PARTITIONS = 12  # the CLI's default: main, RQ and DLQ
REFS = [f"tbl/{n}" for n in range(8)]
STEP_TIMEOUT_S = 40.0
Processes = dict[str, subprocess.Popen[bytes]]
Message = tuple[int, str]  # (event seq, group)


# ----------------------------------------------------------------- processes and the CLI


def _exe() -> str:
    exe = shutil.which("partbuild", path=str(Path(sys.executable).parent))
    assert exe is not None, "partbuild is not installed in this environment"
    return exe


def cli(db: str, *args: str, code: int = 0) -> str:
    """Run `partbuild ARGS --db DB` to its end; it must exit `code`. Returns stdout (stderr when failing)."""
    done = subprocess.run([_exe(), *args, "--db", db], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == code, f"partbuild {' '.join(args)}: exit {done.returncode}\n{done.stdout}{done.stderr}"
    return done.stdout if code == 0 else done.stderr


def show(db: str, name: str) -> dict[str, Any]:
    """`partbuild subscriptions show NAME --json`."""
    found: dict[str, Any] = json.loads(cli(db, "subscriptions", "show", name, "--json"))
    return found


def standing(db: str, name: str) -> dict[str, Any]:
    """What `show` answers, read in this process: for the polls (a CLI call is a process start, about 2 s of
    CPU, which a poll would spend again and again while the processes under test share two cores)."""
    with connect(Target(None, db)) as client:
        found: dict[str, Any] = client.get_subscription(name).model_dump(mode="json")
    return found


def create(db: str, name: str, url: str, *options: str) -> dict[str, Any]:
    """Create a subscription with the CLI; returns it as `show` does."""
    out = cli(db, "subscriptions", "create", name, url, "--secret", SECRET, *options)
    assert f"subscription {name} created" in out
    return show(db, name)


def start_deliver(db: str, tmp_path: Path, name: str, *options: str) -> subprocess.Popen[bytes]:
    """`partbuild deliver --db DB OPTIONS`, its output in `<name>.log`; returns once it follows the log."""
    log_file = tmp_path / f"{name}.log"
    command = [_exe(), "deliver", "--db", db, *options]
    env = os.environ | {"PYTHONUNBUFFERED": "1"}
    process = subprocess.Popen(
        command, env=env, stdout=log_file.open("wb"), stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
    )
    deadline = time.monotonic() + STEP_TIMEOUT_S
    while "partbuild deliver: shards" not in log_file.read_text(errors="replace"):
        assert process.poll() is None, f"{name} exited ({process.returncode}):\n{output(tmp_path, name)}"
        assert time.monotonic() < deadline, f"{name} did not start:\n{output(tmp_path, name)}"
        time.sleep(0.05)
    return process


@contextmanager
def processes(tmp_path: Path) -> Iterator[Processes]:
    """A name -> process table; whatever still runs on the way out is SIGTERMed (then killed)."""
    table: Processes = {}
    try:
        yield table
    finally:
        for process in table.values():
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for name, process in table.items():
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=15)
                raise AssertionError(f"{name} ignored SIGTERM:\n{output(tmp_path, name)}") from None


def output(tmp_path: Path, name: str) -> str:
    return (tmp_path / f"{name}.log").read_text(errors="replace")[-3000:]


def assert_running(procs: Processes, tmp_path: Path) -> None:
    for name, process in procs.items():
        code = process.poll()
        assert code is None or code == -signal.SIGKILL, f"{name} exited ({code}):\n{output(tmp_path, name)}"


# ----------------------------------------------------------------- the stream of events


class Appender:
    """A thread appending `count` wants, one every `every_s`, each of one or two refs of `refs`."""

    def __init__(self, db: str, count: int, every_s: float, refs: list[str] = REFS) -> None:
        self.db, self.count, self.every_s, self.refs = db, count, every_s, refs
        self.appended = 0
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="appender", daemon=True)

    def _run(self) -> None:
        rng = random.Random(12)
        try:
            with Database.open(self.db) as db:
                log = db.log
                for n in range(self.count):
                    refs = rng.sample(self.refs, rng.choice((1, 2)))
                    want = pb.WantCreate(want_id=f"want-{n}", partition_refs=refs)
                    log.append([envelope(want, source=manual("delivery-tests"))])
                    self.appended += 1
                    time.sleep(self.every_s)
        except BaseException as exc:  # reported by join()
            self.error = exc

    def __enter__(self) -> Appender:
        self._thread.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None) -> None:
        if kind is None:
            self.join()

    def join(self) -> None:
        self._thread.join(timeout=STEP_TIMEOUT_S)
        assert not self._thread.is_alive(), f"the appender is stuck after {self.appended} wants"
        assert self.error is None, f"the appender failed: {self.error!r}"


def expected_messages(db: str, after_seq: int) -> set[Message]:
    """(seq, ref) of every ref of every want created after `after_seq`."""
    found: set[Message] = set()
    with Database.open(db) as database:
        log = database.log
        while page := log.read(after_seq, 1000):
            for stored in page:
                event = stored.to_event()
                if event.WhichOneof("payload") == "want_create":
                    found.update((stored.seq, ref) for ref in event.want_create.partition_refs)
            after_seq = page[-1].seq
    return found


def delivered_messages(got: list[Received]) -> set[Message]:
    return {(r.seq, r.group) for r in got if r.seq is not None}


def wait_until(what: str, check: Callable[[], bool], procs: Processes, tmp_path: Path) -> None:
    """Poll `check` until it holds; fail if a process exited or after STEP_TIMEOUT_S."""
    deadline = time.monotonic() + STEP_TIMEOUT_S
    while not check():
        assert_running(procs, tmp_path)
        assert time.monotonic() < deadline, f"not {what} within {STEP_TIMEOUT_S:g} s"
        time.sleep(0.05)


def wait_all_delivered(receiver: Receiver, expected: set[Message]) -> list[Received]:
    return receiver.wait_for(lambda got: delivered_messages(got) >= expected, STEP_TIMEOUT_S)


def wait_drained(db: str, name: str, procs: Processes, tmp_path: Path) -> dict[str, Any]:
    """Wait until the subscription has no lag and nothing in its RQ or DLQ; returns it as `show` says then."""
    deadline = time.monotonic() + STEP_TIMEOUT_S
    keys = ("lag_events", "rq_messages", "dlq_messages")
    while True:
        left = {key: value for key, value in standing(db, name).items() if key in keys}
        if not any(left.values()):
            sub = show(db, name)
            assert not any(sub[key] for key in keys), sub
            return sub
        assert_running(procs, tmp_path)
        assert time.monotonic() < deadline, f"{name} not drained within {STEP_TIMEOUT_S:g} s: {left}"
        time.sleep(0.1)


# ----------------------------------------------------------------- 1. SIGKILL mid-stream


def committed(db: str, sub: dict[str, Any]) -> Callable[[Message], bool]:
    """Whether the deliveries' database counts a message as handled (its partition's offset is at or past it).

    Read once, now: after a SIGKILL it is exactly what the killed process committed.
    """
    key = f"{sub['name']}@{sub['created_seq']}"
    with Database.open(db) as database:
        floor = database.deliveries.control(key, sub["start_after_seq"]).main_floor
        offsets = database.deliveries.offsets(key)
    assert {topic for topic, _ in offsets} <= {0}, f"one main storage topic expected: {offsets}"
    return lambda message: message[0] <= offsets.get((0, route(key_hash(message[1]), PARTITIONS, 1)), floor)


def _uncommitted(db: str, sub: dict[str, Any], receiver: Receiver) -> bool:
    """Whether messages were delivered that the deliveries' database does not count as handled yet."""
    done = committed(db, sub)
    return any(200 <= r.answered < 300 and not done((r.seq or 0, r.group)) for r in receiver.received)


def kill_mid_step(db: str, sub: dict[str, Any], receiver: Receiver, process: subprocess.Popen[bytes]) -> None:
    """SIGKILL `process` once it has delivered messages it has not committed yet and a request is open.

    The process is frozen (SIGSTOP) while that is checked, so it cannot commit between the look and the kill;
    when the look finds no step in flight it is let go on (SIGCONT) and looked at again.
    """
    deadline = time.monotonic() + STEP_TIMEOUT_S
    while time.monotonic() < deadline:
        assert process.poll() is None, "the deliver process exited before the kill"
        received = receiver.received
        if len(received) >= 30 and any(r.answered == 0 for r in received):  # a request is open
            process.send_signal(signal.SIGSTOP)
            time.sleep(0.05)  # a COMMIT it sent just before it stopped has landed by now
            if _uncommitted(db, sub, receiver):
                process.send_signal(signal.SIGKILL)
                process.wait(timeout=15)
                return
            process.send_signal(signal.SIGCONT)
        time.sleep(0.01)
    raise AssertionError(f"never caught a step in flight; {receiver.summary()}")


def assert_duplicates_were_in_flight(
    delivered: list[Received], done: Callable[[Message], bool], restart: float
) -> set[Message]:
    """Exactly the messages delivered before the restart but not committed at the kill arrived twice.

    Those the new process must deliver again (it starts from the committed offsets); every other
    message arrives once. Returns the duplicates.
    """
    counts = Counter((r.seq, r.group) for r in delivered if r.seq is not None)
    before = {(r.seq, r.group) for r in delivered if r.seq is not None and r.at < restart}
    in_flight = {message for message in before if not done(message)}
    duplicates = {message for message, count in counts.items() if count > 1}
    assert duplicates == in_flight, (
        f"duplicated but not in flight: {sorted(duplicates - in_flight)[:10]}; "
        f"in flight, not delivered again: {sorted(in_flight - duplicates)[:10]}"
    )
    assert max(counts.values()) <= 2, counts.most_common(3)
    return duplicates


def test_a_deliver_process_killed_mid_step_loses_nothing_and_repeats_only_its_step(db: str, tmp_path: Path) -> None:
    # A slow receiver: a step of a few dozen messages per group takes a while, so the kill lands inside one.
    with Receiver(SECRET, rule=lambda group, before: Answer(delay_s=0.05)) as receiver, processes(tmp_path) as procs:
        sub = create(db, "crash", receiver.url)
        procs["first"] = start_deliver(db, tmp_path, "first")
        with Appender(db, count=300, every_s=0.02) as appender:
            kill_mid_step(db, sub, receiver, procs["first"])
            killed_after = appender.appended
            time.sleep(0.3)  # requests the killed process sent are recorded by now
            done = committed(db, sub)
            restart = time.monotonic()
            procs["second"] = start_deliver(db, tmp_path, "second")
        assert killed_after < appender.count, "the kill came after the stream ended"
        expected = expected_messages(db, sub["created_seq"])
        delivered = wait_all_delivered(receiver, expected)
        wait_drained(db, "crash", procs, tmp_path)
        delivered = receiver.delivered()
    assert delivered_messages(delivered) == expected
    assert all(r.signature_ok for r in delivered)
    assert receiver.order_violations() == []
    duplicates = assert_duplicates_were_in_flight(delivered, done, restart)
    assert duplicates, "the kill landed between steps: nothing was in flight"
    print(f"{len(expected)} messages, {len(duplicates)} delivered twice (the killed step's)")


# ----------------------------------------------------------------- 2. resharding across processes

FAILING = {"tbl/1", "tbl/4", "tbl/6"}  # groups the receiver refuses (500) until it recovers


def rq_size(db: str, sub: dict[str, Any]) -> int:
    """Messages in the subscription's RQ, read in this process (a CLI call costs seconds)."""
    with Database.open(db) as database:
        return database.deliveries.counts(f"{sub['name']}@{sub['created_seq']}")["rq"]


def reshard(db: str, name: str, shards: int, receiver: Receiver) -> None:
    """`partbuild subscriptions reshard NAME --shards N`, then let a few messages through the new layout."""
    out = cli(db, "subscriptions", "reshard", name, "--shards", str(shards))
    assert f"subscription {name}: {shards} shard(s)" in out
    before = len(receiver.delivered())
    receiver.wait_for(lambda got: len(got) >= before + 5, STEP_TIMEOUT_S)


def test_two_processes_keep_order_and_lose_nothing_while_the_shard_count_goes_2_4_1(db: str, tmp_path: Path) -> None:
    options = ("--shards", "2", "--max-attempts", "100", "--backoff-ms", "50", "--backoff-max-ms", "200")
    with Receiver(SECRET, rule=failing_groups(FAILING)) as receiver, processes(tmp_path) as procs:
        sub = create(db, "moving", receiver.url, *options)
        procs["part0"] = start_deliver(db, tmp_path, "part0", "--shards", "0/2")
        procs["part1"] = start_deliver(db, tmp_path, "part1", "--shards", "1/2")
        with Appender(db, count=500, every_s=0.03) as appender:
            wait_until("messages in the RQ", lambda: rq_size(db, sub) > 0, procs, tmp_path)
            reshard(db, "moving", 4, receiver)
            assert rq_size(db, sub) > 0  # the failing groups wait through the reshard
            reshard(db, "moving", 1, receiver)
            receiver.set_rule(None)  # the failing groups recover
            streaming = appender.appended < appender.count
        assert streaming, "the stream ended before the receiver recovered"
        expected = expected_messages(db, sub["created_seq"])
        wait_all_delivered(receiver, expected)
        final = wait_drained(db, "moving", procs, tmp_path)
        assert_running(procs, tmp_path)
    delivered = receiver.delivered()
    assert delivered_messages(delivered) == expected
    assert receiver.order_violations() == []
    assert final["shard_count"] == 1 and final["retried"] > 0 and final["dead_lettered"] == 0
    refused = {r.group for r in receiver.received if r.answered == 500}
    assert refused == FAILING
    print(f"{len(expected)} messages, {len(delivered)} deliveries, {final['retried']} retries")


# ----------------------------------------------------------------- 3. the CLI


def one_line_error(text: str) -> str:
    lines = text.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("partbuild: error: "), text
    return lines[0]


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)  # the CLI; the store is tested on both
def test_bad_input_exits_2_with_one_line(db: str, tmp_path: Path) -> None:
    create(db, "hooks", "http://127.0.0.1:9/hook")  # 12 partitions
    refused = one_line_error(cli(db, "subscriptions", "reshard", "hooks", "--shards", "5", code=2))
    assert "5 shards cannot split 12 partitions evenly" in refused  # the fold's reason
    assert "no subscription 'nope'" in one_line_error(cli(db, "subscriptions", "show", "nope", code=2))
    assert "no subscription 'nope'" in one_line_error(cli(db, "subscriptions", "replay", "nope", code=2))
    assert "--shards 'x'" in one_line_error(cli(db, "deliver", "--shards", "x", code=2))
    assert show(db, "hooks")["shard_count"] == 1


def append_wants(db: str, refs: list[str], count: int, first: int = 0) -> None:
    """`count` wants of all of `refs`: one message per ref each."""
    with Database.open(db) as database:
        log = database.log
        for n in range(first, first + count):
            want = pb.WantCreate(want_id=f"want-{n}", partition_refs=refs)
            log.append([envelope(want, source=manual("delivery-tests"))])


def dead_letters(db: str, name: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = json.loads(cli(db, "subscriptions", "dlq", name, "--json"))["messages"]
    return found


def seqs_of(got: list[Received], group: str) -> list[int]:
    return [r.seq for r in got if r.group == group and r.seq is not None]


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)  # the CLI; the store is tested on both
def test_dead_letters_are_listed_replayed_in_order_and_purged_from_the_cli(db: str, tmp_path: Path) -> None:
    refs = ["dl/replayed", "dl/purged", "ok/flowing"]
    with Receiver(SECRET, rule=failing_groups(set(refs[:2]), 400)) as receiver, processes(tmp_path) as procs:
        sub = create(db, "dead", receiver.url)
        procs["deliver"] = start_deliver(db, tmp_path, "deliver")
        append_wants(db, refs, 4)
        receiver.wait_for(lambda got: len(seqs_of(got, "ok/flowing")) == 4, STEP_TIMEOUT_S)
        wait_until("8 dead letters", lambda: standing(db, "dead")["dlq_messages"] == 8, procs, tmp_path)
        assert show(db, "dead")["dlq_messages"] == 8
        listed = dead_letters(db, "dead")
        for group in refs[:2]:
            mine = [dl for dl in listed if dl["group"] == group]
            assert [dl["seq"] for dl in mine] == sorted(dl["seq"] for dl in mine) and len(mine) == 4
            assert (mine[0]["attempts"], mine[0]["last_status"]) == (1, 400)  # the rest waited behind it
        assert {dl["event_type"] for dl in listed} == {"want_create"}
        receiver.set_rule(None)
        replayed = json.loads(cli(db, "subscriptions", "replay", "dead", "--group", "dl/replayed", "--json"))
        assert replayed == {"subscription": "dead", "moved": 4}
        got = receiver.wait_for(lambda got: len(seqs_of(got, "dl/replayed")) == 4, STEP_TIMEOUT_S)
        assert seqs_of(got, "dl/replayed") == [dl["seq"] for dl in listed if dl["group"] == "dl/replayed"]
        purged = json.loads(cli(db, "subscriptions", "purge", "dead", "--json"))
        assert purged == {"subscription": "dead", "moved": 4}
        assert dead_letters(db, "dead") == []
        append_wants(db, refs, 1, first=4)  # the purged group flows again
        got = receiver.wait_for(lambda got: len(seqs_of(got, "dl/purged")) == 1, STEP_TIMEOUT_S)
        wait_drained(db, "dead", procs, tmp_path)
    assert seqs_of(got, "dl/purged") == [max(seq for seq, _ in expected_messages(db, sub["created_seq"]))]
    assert receiver.order_violations() == []
