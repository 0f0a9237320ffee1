"""Shared bits of the worker-group benchmarks: fresh logs, `partbuild run --group` workers, the API, the log's tail.

Workers are real `partbuild run --group` processes on `bench/graphs/sleep.py`, each
in its own session (process group), so a SIGKILL of the group takes its Spark JVM
with it, if it started one (since lazy Spark, a worker whose jobs never touch
`ctx.spark` starts none), as the death of a machine or container would, and the
clean-up on the way out can always kill whatever is left.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import math
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import sqlalchemy as sa
from _common import proc_stats

from partbuild.api.client import HttpClient, create_wants_chunked
from partbuild.api.models.wants import WantBatchCreatedOut, WantRequest
from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.database import Database
from partbuild.state.db import normalize_url
from partbuild.state.fold.build_state import BuildState
from partbuild.state.fold.records import WantState
from partbuild.state.log.store import EventLog
from partbuild.state.rules.group import GroupState

REPO = Path(__file__).resolve().parents[1]
SLEEP_GRAPH = REPO / "bench" / "graphs" / "sleep.py"
DIAG = REPO / "bench" / "diag"
GROUP = "bench"
DEFAULT_PG_URL = "postgresql+psycopg://127.0.0.1:5432/test"
START_TIMEOUT_S = 300.0  # generous: before lazy Spark, each worker started a JVM, several at once on two cores
SERVE_LINE = re.compile(r"partbuild API on (http://\S+) ")
# `partbuild run` logs local time to the ms; bench/diag/sitecustomize.py's line for a lost append race.
LOG_TIME = r"(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3})"
CONFLICT = re.compile(rf"^{LOG_TIME} WARNING partbuild\.bench: append conflict in (\S+): (\S+)$", re.M)

Watch = Callable[[int, pb.Event, BuildState], None]


def executable() -> str:
    """The `partbuild` script of this interpreter's environment (the checkout's .venv)."""
    found = shutil.which("partbuild", path=str(Path(sys.executable).parent))
    if found is None:
        raise SystemExit(f"no partbuild script next to {sys.executable}: pip install -e '.[dev]' first")
    return found


def now_ms() -> int:
    """The wall clock in ms, as the envelopes' timestamp_ms (same machine, same clock)."""
    return time.time_ns() // 1_000_000


# ----------------------------------------------------------------- fresh logs


@contextlib.contextmanager
def workdir(keep: str | None, label: str) -> Iterator[Path]:
    """A temporary directory for a log, warehouse and outputs; `<keep>/<label>`, kept, when `keep` is given."""
    if keep is None:
        with tempfile.TemporaryDirectory(prefix="partbuild-bench-") as tmp:
            yield Path(tmp)
        return
    path = Path(keep).absolute() / label
    path.mkdir(parents=True, exist_ok=True)
    print(f"  outputs kept in {path}", flush=True)
    yield path


@contextlib.contextmanager
def fresh_log(backend: str, workdir: Path) -> Iterator[str]:
    """The URL of an empty, migrated log: a SQLite file in `workdir`, or a new PostgreSQL schema (dropped after).

    PostgreSQL: `PARTBUILD_BENCH_PG_URL` (default the test server's `test` database); the schema
    is selected through `search_path` in the URL, as tests/kits/pgkit.py does, so child
    processes given the URL see the same tables.
    """
    if backend == "sqlite":
        url = f"sqlite:///{workdir / 'partbuild.db'}"
        with EventLog.open(url, auto_upgrade=True):
            pass
        yield url
        return
    base = normalize_url(os.environ.get("PARTBUILD_BENCH_PG_URL", DEFAULT_PG_URL))
    admin = sa.create_engine(base, isolation_level="AUTOCOMMIT", connect_args={"connect_timeout": 5})
    schema = f"pbbench_{secrets.token_hex(6)}"
    try:
        with admin.connect() as conn:
            conn.execute(sa.text(f"CREATE SCHEMA {schema}"))
        url = base.update_query_dict({"options": f"-csearch_path={schema}"}).render_as_string(hide_password=False)
        try:
            with EventLog.open(url, auto_upgrade=True):
                pass
            yield url
        finally:
            with admin.connect() as conn:
                conn.execute(sa.text("SET lock_timeout = '10s'"))  # a leaked session fails the drop, not hangs it
                conn.execute(sa.text(f"DROP SCHEMA {schema} CASCADE"))
    finally:
        admin.dispose()


# ----------------------------------------------------------------- processes


def kill_group(process: subprocess.Popen[bytes], sig: int = signal.SIGKILL) -> None:
    """Send `sig` to the process group of `process` (it leads one: started in its own session)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, sig)


def stop_process(process: subprocess.Popen[bytes], timeout_s: float = 60.0, *, terminate: bool = True) -> int | None:
    """SIGTERM (unless sent already), a bounded wait, then SIGKILL of its group and what is left of it. Exit code.

    One SIGTERM only: a second one that lands while Python is shutting down (its handlers
    are reset to the default by then) kills a worker that was leaving cleanly.
    """
    if process.poll() is None:
        if terminate:
            process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            print(f"  pid {process.pid} ignored SIGTERM for {timeout_s:g} s: SIGKILL to its process group", flush=True)
    kill_group(process)  # a JVM outliving its Python parent would hold CPU and memory for the next figures
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(10)
    return process.returncode


def _process_ticks() -> dict[int, tuple[str, int, int]]:
    """pid -> (command, process group, CPU ticks user + system) of every process we can read."""
    return {pid: (command, int(fields[2]), int(fields[11]) + int(fields[12])) for pid, command, fields in proc_stats()}


def _machine_ticks() -> tuple[int, int]:
    """(busy, all) CPU ticks of the whole machine so far, from /proc/stat."""
    with open("/proc/stat") as stat:
        values = [int(v) for v in stat.readline().split()[1:]]
    return sum(values) - values[3] - values[4], sum(values)  # idle and iowait are not busy


class CpuMeter:
    """CPU seconds over a window, by who used them: process groups we started, PostgreSQL, this process, the rest.

    Processes that end inside the window lose their share (none of ours do while measured).
    """

    def __init__(self, groups: dict[str, list[int]]) -> None:
        self.groups = groups  # label -> process group ids (a worker and its JVM are one group)
        self._start: dict[int, tuple[str, int, int]] = {}
        self._machine = (0, 0)

    def start(self) -> None:
        self._start, self._machine = _process_ticks(), _machine_ticks()

    def stop(self) -> dict[str, float]:
        """Seconds by label, plus `postgres`, `bench` (this process), `other` and the window's `busy cores`."""
        end, (busy, total) = _process_ticks(), _machine_ticks()
        ticks = os.sysconf("SC_CLK_TCK")
        used: Counter[str] = Counter()
        label_of = {pgid: label for label, pgids in self.groups.items() for pgid in pgids}
        for pid, (command, pgrp, now) in end.items():
            delta = now - self._start.get(pid, (command, pgrp, 0))[2]
            if pgrp in label_of:
                used[label_of[pgrp]] += delta
            elif command == "postgres":
                used["postgres"] += delta
            elif pid == os.getpid():
                used["bench"] += delta
        busy -= self._machine[0]
        total -= self._machine[1]
        seconds = {label: used[label] / ticks for label in [*self.groups, "postgres", "bench"]}
        seconds["other"] = busy / ticks - sum(seconds.values())
        seconds["busy cores"] = busy / total * (os.cpu_count() or 1) if total else 0.0
        return seconds


@dataclass
class Worker:
    """One `partbuild run --group` process."""

    name: str
    process: subprocess.Popen[bytes]
    output: Path

    @property
    def pid(self) -> int:
        return self.process.pid

    def alive(self) -> bool:
        return self.process.poll() is None

    def tail_of_output(self, lines: int = 20) -> str:
        return "\n".join(self.output.read_text(errors="replace").splitlines()[-lines:])


def log_time_ms(stamp: str) -> float:
    """A `partbuild run` log line's time (local, ms) as ms since the epoch."""
    return dt.datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S,%f").timestamp() * 1000


def conflicts(workers: list[Worker], since_ms: float = 0, until_ms: float = math.inf) -> Counter[str]:
    """Appends that lost a race (`--count-conflicts`), by what they carried, in a window of time."""
    found: Counter[str] = Counter()
    for worker in workers:
        for stamp, thread, kinds in CONFLICT.findall(worker.output.read_text(errors="replace")):
            if since_ms <= log_time_ms(stamp) <= until_ms:
                found[kinds if thread == "partbuild-group" else f"{kinds} ({thread})"] += 1
    return found


class Workers:
    """Starts group workers on one log; on the way out, stops every one still running (SIGKILL last)."""

    def __init__(
        self,
        db: str,
        workdir: Path,
        *,
        buckets: int,
        member_timeout_s: float,
        env: dict[str, str],
        heartbeat_interval_s: float,
        heartbeat_timeout_s: float,
        count_conflicts: bool = False,
    ) -> None:
        self.db = db
        self.workdir = workdir
        self.options = [
            "--group", GROUP, "--buckets", str(buckets), "--member-timeout", str(member_timeout_s),
            "--heartbeat-interval", str(heartbeat_interval_s), "--heartbeat-timeout", str(heartbeat_timeout_s),
            "--snapshot-every", "0",  # no checkpoint at start or stop: nothing but the group in the figures
        ]  # fmt: skip
        # One core for each worker's Spark, should one start: the sleep jobs never use it.
        self.env = os.environ | {"PARTBUILD_SPARK_MASTER": "local[1]", "PYTHONUNBUFFERED": "1"} | env
        if count_conflicts:  # bench/diag/sitecustomize.py logs each append that loses a race
            self.env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(DIAG), os.environ.get("PYTHONPATH")]))
        self.started: dict[str, Worker] = {}

    def start(self, name: str) -> Worker:
        """Start worker `name` (output in `<workdir>/<name>.log`)."""
        output = self.workdir / f"{name}.log"
        command = [
            executable(), "run", "--db", self.db, "--graph", str(SLEEP_GRAPH),
            "--warehouse", str(self.workdir / "warehouse"), *self.options,
        ]  # fmt: skip
        with output.open("wb") as sink:
            process = subprocess.Popen(
                command,
                cwd=self.workdir,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=sink,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group: a SIGKILL takes the JVM too
            )
        worker = self.started[name] = Worker(name, process, output)
        return worker

    def check_running(self, names: list[str]) -> None:
        """Raise with its output if one of `names` has exited."""
        for name in names:
            worker = self.started[name]
            if not worker.alive():
                raise RuntimeError(
                    f"worker {name} exited ({worker.process.returncode}); output ends:\n{worker.tail_of_output()}"
                )

    def stop(self, names: list[str]) -> None:
        """SIGTERM `names` at once (each finishes its runs, leaves the group), then wait for each."""
        for name in names:
            if self.started[name].alive():
                self.started[name].process.send_signal(signal.SIGTERM)
        for name in names:
            worker = self.started[name]
            code = stop_process(worker.process, terminate=False)
            if code not in (0, -signal.SIGKILL):
                print(f"  worker {name} exited {code}; output ends:\n{worker.tail_of_output()}", flush=True)

    def __enter__(self) -> Workers:
        return self

    def __exit__(self, *_: object) -> None:
        for worker in self.started.values():
            if worker.alive():
                worker.process.send_signal(signal.SIGTERM)
        for worker in self.started.values():
            stop_process(worker.process, terminate=False)


# ----------------------------------------------------------------- the API


@dataclass
class Api:
    """A `partbuild serve` process and a client of its API."""

    client: HttpClient
    pid: int


@contextlib.contextmanager
def api_server(db: str, workdir: Path) -> Iterator[Api]:
    """`partbuild serve` on the log (any free port, the sleep graph to check refs), and a client of its API."""
    output = workdir / "serve.log"
    command = [
        executable(), "serve", "--db", db, "--graph", str(SLEEP_GRAPH), "--host", "127.0.0.1", "--port", "0",
        "--snapshot-every", "0",
    ]  # fmt: skip
    with output.open("wb") as sink:
        process = subprocess.Popen(
            command,
            cwd=workdir,
            env=os.environ | {"PYTHONUNBUFFERED": "1"},
            stdin=subprocess.DEVNULL,
            stdout=sink,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + 60
        while (found := SERVE_LINE.search(output.read_text(errors="replace"))) is None:
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"`partbuild serve` did not start:\n{output.read_text(errors='replace')[-2000:]}")
            time.sleep(0.05)
        with HttpClient(found.group(1)) as client:
            while True:  # the line comes before uvicorn listens
                with contextlib.suppress(Exception):
                    client.health()
                    break
                if time.monotonic() > deadline:
                    raise RuntimeError("`partbuild serve` never answered /healthz")
                time.sleep(0.05)
            yield Api(client, process.pid)
    finally:
        stop_process(process, timeout_s=30)


def want_each(client: HttpClient, refs: list[str]) -> WantBatchCreatedOut:
    """One want per ref, recorded through the API (`POST /api/v1/wants/batch`, as `want --file --want-per-ref`)."""
    return create_wants_chunked(client, [WantRequest(refs=[ref]) for ref in refs], "bench")


# ----------------------------------------------------------------- the log, folded as it grows


class Tail:
    """The log folded incrementally; `watch` callbacks see every event with the state just after it."""

    def __init__(self, url: str) -> None:
        self.db = Database.open(url)
        self.log = self.db.log
        self.state = BuildState()
        self.watches: list[Watch] = []

    def close(self) -> None:
        self.db.close()

    def __enter__(self) -> Tail:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def poll(self) -> BuildState:
        """Fold whatever was appended since the last poll, calling the watches after each event."""
        for seq, payload in self.log.iter_payloads(after_seq=self.state.head_seq):
            self.state.apply_payload(seq, payload)
            if self.watches:
                event = pb.Event.FromString(payload)
                for watch in self.watches:
                    watch(seq, event, self.state)
        return self.state

    def group(self) -> GroupState | None:
        return self.state.groups.get(GROUP)

    def wait(self, what: str, check: Callable[[BuildState], bool], workers: Workers, names: list[str]) -> float:
        """Poll every 0.1 s until `check(state)`; fail if one of `names` exits. Seconds waited."""
        started = time.monotonic()
        while time.monotonic() - started < START_TIMEOUT_S:
            workers.check_running(names)
            if check(self.poll()):
                return time.monotonic() - started
            time.sleep(0.1)
        raise TimeoutError(f"not {what} within {START_TIMEOUT_S:g} s; group {self.group()}")


def pid_of(task: str) -> int:
    """The pid in a task id (WORKER_ID: host:pid:token)."""
    return int(task.split(":")[1])


def task_of(group: GroupState | None, pid: int) -> str | None:
    """The member task of process `pid` in the current epoch, if it is one."""
    if group is None:
        return None
    return next((task for task in group.members if pid_of(task) == pid), None)


def is_balanced(group: GroupState | None, pids: list[int]) -> bool:
    """The current epoch's members are exactly `pids`, every bucket owned, loads within one bucket."""
    if group is None or sorted(pid_of(task) for task in group.members) != sorted(pids):
        return False
    loads = [len(group.owned_by(task)) for task in group.members]
    return len(group.owners) == group.bucket_total and max(loads) - min(loads) <= 1


def successful_wants(state: BuildState) -> int:
    return state.want_counts[WantState.SUCCESSFUL]


class RunsInFlight:
    """A watch: which worker buffered each run, runs in flight per worker (and the peak), failures.

    Also each finished run's time from its buffer to its end (envelope times), which is its
    1 s of sleep plus the dispatch and the append of its outcome.
    """

    def __init__(self) -> None:
        self.worker_of: dict[str, str] = {}
        self.buffered_ms: dict[str, int] = {}
        self.run_ms: list[int] = []
        self.in_flight: Counter[str] = Counter()
        self.peak: Counter[str] = Counter()
        self.buffered: Counter[str] = Counter()
        self.first_buffer_ms: int | None = None
        self.failures = 0

    def __call__(self, seq: int, event: pb.Event, state: BuildState) -> None:
        kind = event.WhichOneof("payload")
        if kind == "job_run_buffer":
            if state.rejections and state.rejections[-1].seq == seq:
                return  # a fenced decision the fold refused: not a run
            worker = event.source.system.worker
            self.worker_of[event.job_run_buffer.job_run_id] = worker
            self.buffered_ms[event.job_run_buffer.job_run_id] = event.timestamp_ms
            self.buffered[worker] += 1
            self.in_flight[worker] += 1
            self.peak[worker] = max(self.peak[worker], self.in_flight[worker])
            if self.first_buffer_ms is None:
                self.first_buffer_ms = event.timestamp_ms
        elif kind in ("job_run_success", "job_run_failure"):
            run_id = getattr(event, kind).job_run_id
            worker = self.worker_of.get(run_id)
            if worker is not None and not (state.rejections and state.rejections[-1].seq == seq):
                self.in_flight[worker] -= 1
                self.failures += kind == "job_run_failure"
                self.run_ms.append(event.timestamp_ms - self.buffered_ms[run_id])
