"""Peak memory and start-up time of `partbuild up` on a 1,000,000-event W1 log, one or more builds compared.

Target: peak RSS of the `up` Python process after <= 0.6x before (`--partbuild
before=... after=...`), in both scenarios below.

The log is the one `replay_throughput.py` replays (same generator, same shape:
the first `--events` events of the simulated W1 history, 1 heartbeat per job
run, appended in batches of 5,000, no snapshots). It is built once and cached as
`<cache-dir>/w1-<events>.db` (default cache dir: `$TMPDIR/partbuild-bench-up-memory`,
i.e. /tmp/partbuild-bench-up-memory; delete it to rebuild).

Every run spawns the given executable as a real process:

    partbuild up --db sqlite:///<copy> --graph <its checkout>/examples/clicks/pipeline.py
                 --warehouse <tmp>/warehouse --host 127.0.0.1 --port 0

on its own byte-for-byte copy of the cached database (`up` writes snapshots into
it), with cwd and `PARTBUILD_CLICKS_ROOT` in a temporary directory (the raw clicks
do not need to exist to start), `PARTBUILD_CLICKS_DAYS=28`, local Spark, and
`--snapshot-every` at its default (`PARTBUILD_SNAPSHOT_EVERY` and the other
`PARTBUILD_*` variables are removed from the child's environment). Two scenarios
per executable and round, on the same copy: `cold` (no snapshot: full replay),
then `restart` (what the cold run checkpointed when it started or stopped).

Measured per run:
- `ready`: spawn until `up` prints "partbuild up: API on http://127.0.0.1:PORT, ..."
  (with `--port 0` this line is also how the port is learnt). Today `up` prints it
  once the orchestrator and the API service have both loaded their state and
  written their start-up checkpoints, as the orchestrator thread starts and just
  before the HTTP server does; there is no other "orchestrator loaded" signal;
- `healthy`: spawn until GET /healthz answers 200 with `state_seq == head_seq`;
- then `--settle` seconds more (the orchestrator's first steps on the loaded state);
- `peak`: VmHWM of the Python process, read from /proc/PID/status at the end of the
  settle time, before it is stopped (sampled every 0.1 s too; `peak+stop` is the
  last VmHWM seen until it exits, i.e. with the stop-time checkpoint, if any);
- `jvm`: VmHWM of the Spark JVM (the `java` process below it), reported, not in
  the ratio;
- checkpoints written at start and stop (its "saved a snapshot at seq" log lines),
  the time SIGTERM takes to stop it, and its exit code.

Then SIGTERM, a bounded wait (`--stop-timeout`), SIGKILL of its process group as a
last resort; temporary directories are removed. Executables are alternated round
by round (their order reversed every other round) so that noise hits all of them.

    .venv/bin/python bench/up_memory.py [--partbuild before=.venv/bin/partbuild [after=PATH]]
                                        [--events 1000000] [--rounds 2] [--cache-dir DIR]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from _common import machine, proc_stats
from replay_throughput import fill

from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.log.store import EventLog

TARGET_RATIO = 0.6
REPO = Path(__file__).resolve().parent.parent
DEFAULT_GRAPH = REPO / "examples" / "clicks" / "pipeline.py"
DEFAULT_CACHE = Path(tempfile.gettempdir()) / "partbuild-bench-up-memory"
SCENARIOS = ("cold", "restart")
READY_LINE = re.compile(r"API on (http://127\.0\.0\.1:\d+)")  # "partbuild up: API on http://...:PORT, ..."
SNAPSHOT_LINE = re.compile(r"saved a snapshot at seq (\d+)")
SAMPLE_S = 0.1
MIB = 2**20


# ----------------------------------------------------------------- the log


def cached_log(cache_dir: Path, events: int) -> Path:
    """The SQLite file holding the first `events` W1 events, built into `cache_dir` unless already there."""
    cache_dir.mkdir(parents=True, exist_ok=True)
    path = cache_dir / f"w1-{events}.db"
    if path.exists():
        with EventLog.open(f"sqlite:///{path}") as log:
            head = log.head()
        if head == events:
            print(f"log: reusing {path} ({events:,} events)", flush=True)
            return path
        print(f"log: {path} holds {head:,} events, not {events:,}: rebuilding", flush=True)
    partial = cache_dir / f"w1-{events}.db.partial"
    for leftover in sidecars(partial):
        leftover.unlink(missing_ok=True)
    print(f"log: building {events:,} W1 events into {path} (once; cached)", flush=True)
    started = time.perf_counter()
    with EventLog.open(f"sqlite:///{partial}") as log:
        fill(log, events, heartbeats=1)
        assert log.head() == events, log.head()
    for sidecar, final in zip(sidecars(partial), sidecars(path), strict=True):
        if sidecar.exists():
            sidecar.replace(final)
        else:
            final.unlink(missing_ok=True)
    print(f"log: built in {time.perf_counter() - started:.0f} s", flush=True)
    return path


def sidecars(path: Path) -> list[Path]:
    """The database file first, then its WAL (present if the last connection did not fold it in)."""
    return [path, Path(f"{path}-wal")]


def appended_events(db_file: Path, after_seq: int) -> Counter[str]:
    """Event types `up` itself appended to the log (after the benchmark's history)."""
    counts: Counter[str] = Counter()
    event = pb.Event()
    with EventLog.open(f"sqlite:///{db_file}") as log:
        for _, payload in log.iter_payloads(after_seq=after_seq):
            event.ParseFromString(payload)
            counts[event.WhichOneof("payload") or "?"] += 1
    return counts


def copy_log(source: Path, target: Path) -> None:
    """A byte-for-byte copy of the database (and its WAL, if any)."""
    for sidecar, copied in zip(sidecars(source), sidecars(target), strict=True):
        if sidecar.exists():
            shutil.copyfile(sidecar, copied)


# ----------------------------------------------------------------- one run of `up`


@dataclass
class Run:
    """The figures of one start/stop of `partbuild up`."""

    label: str
    round: int
    scenario: str
    ready_s: float = float("nan")
    healthy_s: float = float("nan")
    head_seq: int = 0
    head_after_settle: int = 0
    peak: int = 0  # VmHWM of the Python process before it is stopped
    peak_with_stop: int = 0  # last VmHWM seen before it exited
    rss: int = 0  # VmRSS at the end of the settle time
    jvm_peak: int = 0  # VmHWM of the Spark JVM
    checkpoints_start: list[int] = field(default_factory=list)
    checkpoints_stop: list[int] = field(default_factory=list)
    stop_s: float = float("nan")
    exit_code: int | None = None
    load_average: float = 0.0  # 1-minute load average of the machine when the run started
    error: str = ""


def proc_memory(pid: int) -> tuple[int, int] | None:
    """(VmRSS, VmHWM) of `pid` in bytes, or None once it has exited (or is a zombie)."""
    fields: dict[str, int] = {}
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith(("VmRSS:", "VmHWM:")):
                    name, value = line.split(":")
                    fields[name] = int(value.split()[0]) * 1024
    except (FileNotFoundError, ProcessLookupError):
        return None
    if "VmHWM" not in fields:
        return None
    return fields["VmRSS"], fields["VmHWM"]


def alive(pid: int) -> bool:
    """Whether `pid` still runs (zombies and reused pids of other commands do not count)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            text = stat.read()
    except OSError:
        return False
    return text[text.index("(") + 1 : text.rindex(")")] == "java" and text.rsplit(")", 1)[1].split()[0] != "Z"


def descendants(pid: int) -> list[tuple[int, str]]:
    """(pid, command name) of every process below `pid`."""
    children: dict[int, list[tuple[int, str]]] = {}
    for child, name, fields in proc_stats():
        children.setdefault(int(fields[1]), []).append((child, name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child[0])
    return found


class Sampler(threading.Thread):
    """Reads the memory of the `up` process and of its JVM every SAMPLE_S until stopped.

    spark-submit first runs a short-lived `java` (Spark's launcher, which prints the
    real command); the JVM reported is the `java` below `up` with the largest peak.
    """

    def __init__(self, pid: int) -> None:
        super().__init__(name="sampler", daemon=True)
        self.pid = pid
        self.peak = 0
        self.java_peaks: dict[int, int] = {}  # pid -> VmHWM of every `java` seen below `up`
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.wait(SAMPLE_S):
            self.sample()

    def sample(self) -> None:
        memory = proc_memory(self.pid)
        if memory is None:
            return
        self.peak = max(self.peak, memory[1])
        for pid, name in descendants(self.pid):
            if name == "java":
                java = proc_memory(pid)
                if java is not None:
                    self.java_peaks[pid] = max(self.java_peaks.get(pid, 0), java[1])

    @property
    def jvm_pid(self) -> int | None:
        return max(self.java_peaks, key=self.java_peaks.__getitem__, default=None)

    @property
    def jvm_peak(self) -> int:
        return max(self.java_peaks.values(), default=0)


def child_env(workdir: Path) -> dict[str, str]:
    """The environment of `up`: ours without PARTBUILD_* settings, the clicks graph pointed into `workdir`."""
    env = {name: value for name, value in os.environ.items() if not name.startswith("PARTBUILD_")}
    env["PARTBUILD_CLICKS_ROOT"] = str(workdir / "clicks-data")  # need not exist to start
    env["PARTBUILD_CLICKS_DAYS"] = "28"
    env["PYTHONUNBUFFERED"] = "1"
    return env


def graph_of(executable: str) -> Path:
    """The clicks graph of the checkout whose `.venv/bin/partbuild` this is (else this checkout's)."""
    checkout = Path(executable).resolve().parent.parent.parent
    candidate = checkout / "examples" / "clicks" / "pipeline.py"
    return candidate if candidate.exists() else DEFAULT_GRAPH


def run_up(executable: str, db_file: Path, graph: Path, workdir: Path, run: Run, args: argparse.Namespace) -> None:
    """Start `partbuild up` on `db_file`, measure it until healthy and settled, stop it; fills `run`."""
    output_path = workdir / f"up-{run.scenario}.log"
    command = [
        executable, "up", "--db", f"sqlite:///{db_file}", "--graph", str(graph),
        "--warehouse", str(workdir / "warehouse"), "--host", "127.0.0.1", "--port", "0",
    ]  # fmt: skip
    run.load_average = os.getloadavg()[0]
    with open(output_path, "wb") as output:
        started = time.perf_counter()
        process = subprocess.Popen(
            command,
            cwd=workdir,
            env=child_env(workdir),
            stdin=subprocess.DEVNULL,
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: the JVM too, for the last-resort kill
        )
    sampler = Sampler(process.pid)
    sampler.start()
    start_checkpoints: int | None = None  # "saved a snapshot" lines before SIGTERM
    try:
        base_url = wait_ready(process, output_path, started, args.startup_timeout)
        run.ready_s = time.perf_counter() - started
        run.head_seq = wait_healthy(process, base_url, started, args.startup_timeout)
        run.healthy_s = time.perf_counter() - started
        time.sleep(args.settle)
        with httpx.Client(base_url=base_url, timeout=30) as client:
            run.head_after_settle = client.get("/healthz").json()["head_seq"]
        sampler.sample()
        memory = proc_memory(process.pid)
        if memory is None:
            raise RuntimeError(f"`up` exited during the settle time (exit code {process.poll()})")
        run.rss, run.peak = memory
        run.jvm_peak = sampler.jvm_peak
        start_checkpoints = len(SNAPSHOT_LINE.findall(output_path.read_text(errors="replace")))
        stop_started = time.perf_counter()
        process.send_signal(signal.SIGTERM)
        run.exit_code = process.wait(args.stop_timeout)
        run.stop_s = time.perf_counter() - stop_started
    except Exception as exc:
        run.error = f"{type(exc).__name__}: {exc}"
    finally:
        sampler.done.set()
        sampler.join(5)
        run.peak_with_stop = max(sampler.peak, run.peak)
        stop_process(process, sampler.jvm_pid)
        if run.exit_code is None:
            run.exit_code = process.returncode
    seqs = [int(seq) for seq in SNAPSHOT_LINE.findall(output_path.read_text(errors="replace"))]
    split = len(seqs) if start_checkpoints is None else start_checkpoints
    run.checkpoints_start, run.checkpoints_stop = seqs[:split], seqs[split:]
    if run.error or run.exit_code != 0:
        tail = output_path.read_text(errors="replace").splitlines()[-15:]
        print(f"  {run.label} {run.scenario}: {run.error or f'exit code {run.exit_code}'}; output ends:", flush=True)
        for line in tail:
            print(f"    | {line}", flush=True)


def wait_ready(process: subprocess.Popen[bytes], output: Path, started: float, timeout: float) -> str:
    """The API's base URL, once `up` has printed that it serves (both states loaded)."""
    while time.perf_counter() - started < timeout:
        found = READY_LINE.search(output.read_text(errors="replace"))
        if found:
            return found.group(1)
        if process.poll() is not None:
            raise RuntimeError(f"`up` exited during start-up (exit code {process.returncode})")
        time.sleep(0.05)
    raise TimeoutError(f"`up` did not print that it serves within {timeout:.0f} s")


def wait_healthy(process: subprocess.Popen[bytes], base_url: str, started: float, timeout: float) -> int:
    """Poll /healthz until the served state is at the log head; returns that head."""
    with httpx.Client(base_url=base_url, timeout=5) as client:
        while time.perf_counter() - started < timeout:
            if process.poll() is not None:
                raise RuntimeError(f"`up` exited during start-up (exit code {process.returncode})")
            try:
                response = client.get("/healthz")
                if response.status_code == 200:
                    health = response.json()
                    if health["state_seq"] == health["head_seq"]:
                        return int(health["head_seq"])
            except httpx.TransportError:
                pass
            time.sleep(0.05)
    raise TimeoutError(f"/healthz did not report state_seq == head_seq within {timeout:.0f} s")


def stop_process(process: subprocess.Popen[bytes], jvm_pid: int | None) -> None:
    """Make sure `up` and its JVM are gone: SIGTERM, bounded waits, SIGKILL of the process group last."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            print(f"  pid {process.pid} ignored SIGTERM for 30 s: SIGKILL to its process group", flush=True)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(10)
    if jvm_pid is not None:  # the JVM exits when py4j's gateway closes; give it a moment, then insist
        deadline = time.monotonic() + 15
        while alive(jvm_pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        if alive(jvm_pid):
            print(f"  Spark JVM pid {jvm_pid} still there 15 s after `up` exited: SIGKILL", flush=True)
            with contextlib.suppress(ProcessLookupError):
                os.kill(jvm_pid, signal.SIGKILL)


# ----------------------------------------------------------------- report


def mib(value: float) -> str:
    """Bytes as whole MiB."""
    return f"{value / MIB:,.0f}"


def seconds(value: float) -> str:
    """Seconds to a tenth."""
    return f"{value:.1f}"


def print_runs(runs: list[Run]) -> None:
    """One line per run."""
    header = (
        f"{'label':<8} {'round':>5} {'scenario':<8} {'ready s':>8} {'healthy s':>9} {'peak MiB':>9} "
        f"{'+stop MiB':>9} {'rss MiB':>8} {'jvm MiB':>8} {'ckpt start':>12} {'ckpt stop':>10} {'stop s':>7} "
        f"{'exit':>4} {'head':>10} {'load':>5}"
    )
    print(header)
    print("-" * len(header))
    for r in runs:
        head = (
            f"{r.head_seq:,}"
            if r.head_after_settle == r.head_seq
            else f"{r.head_seq:,}+{r.head_after_settle - r.head_seq}"
        )
        print(
            f"{r.label:<8} {r.round:>5} {r.scenario:<8} {seconds(r.ready_s):>8} {seconds(r.healthy_s):>9} "
            f"{mib(r.peak):>9} {mib(r.peak_with_stop):>9} {mib(r.rss):>8} {mib(r.jvm_peak):>8} "
            f"{len(r.checkpoints_start):>12} {len(r.checkpoints_stop):>10} {seconds(r.stop_s):>7} "
            f"{r.exit_code if r.exit_code is not None else '-':>4} {head:>10} {r.load_average:>5.2f}"
            + (f"  ERROR {r.error}" if r.error else "")
        )


def median_of(runs: list[Run], label: str, scenario: str, metric: str) -> float:
    """Median of a metric over the rounds that did not fail."""
    values = [getattr(r, metric) for r in runs if r.label == label and r.scenario == scenario and not r.error]
    return statistics.median(values) if values else float("nan")


def span(runs: list[Run], label: str, scenario: str, metric: str) -> str:
    """`median (min - max)` of a metric over the rounds."""
    values = [getattr(r, metric) for r in runs if r.label == label and r.scenario == scenario and not r.error]
    if not values:
        return "n/a"
    scale = MIB if metric in ("peak", "peak_with_stop", "rss", "jvm_peak") else 1
    unit = " MiB" if scale == MIB else " s"
    digits = 0 if scale == MIB else 1
    med, low, high = (v / scale for v in (statistics.median(values), min(values), max(values)))
    if len(values) == 1:
        return f"{med:,.{digits}f}{unit}"
    return f"{med:,.{digits}f}{unit} ({low:,.{digits}f} - {high:,.{digits}f})"


def print_summary(runs: list[Run], labels: list[str], events: int) -> None:
    """Medians per executable and scenario; ratios and the verdict when `before` and `after` are given."""
    print()
    print("medians over the rounds (min - max):")
    for label in labels:
        for scenario in SCENARIOS:
            print(
                f"  {label:<8} {scenario:<8} healthy {span(runs, label, scenario, 'healthy_s')}, "
                f"ready {span(runs, label, scenario, 'ready_s')}; Python peak {span(runs, label, scenario, 'peak')}"
                f" (with stop {span(runs, label, scenario, 'peak_with_stop')}); "
                f"JVM peak {span(runs, label, scenario, 'jvm_peak')}"
            )
    for label in labels:
        if any(
            r.label == label and r.scenario == "cold" and not r.checkpoints_start + r.checkpoints_stop for r in runs
        ):
            print(
                f"  note: {label}'s cold runs wrote no checkpoint (log shorter than --snapshot-every?): "
                "its restarts replayed the whole log again"
            )
    if "before" not in labels or "after" not in labels:
        print("(give both `before=` and `after=` executables for the ratio and the target verdict)")
        return
    print()
    ratios = []
    for scenario in SCENARIOS:
        peak = median_of(runs, "after", scenario, "peak") / median_of(runs, "before", scenario, "peak")
        startup = median_of(runs, "after", scenario, "healthy_s") / median_of(runs, "before", scenario, "healthy_s")
        ratios.append(peak)
        print(f"  {scenario:<8} after/before: Python peak RSS {peak:.2f}x, start-up (healthy) {startup:.2f}x")
    worst = max(ratios)
    ok = worst <= TARGET_RATIO and not any(r.error or r.exit_code != 0 for r in runs)
    scaled = "" if events >= 1_000_000 else "; scaled down, the target is for 1,000,000 events"
    print(
        f"up memory: peak RSS after <= {TARGET_RATIO}x before (both scenarios, {events:,} events): "
        f"worst {worst:.2f}x{scaled}: {'PASS' if ok else 'MISS'}"
    )


# ----------------------------------------------------------------- main


def parse_executables(values: list[str]) -> dict[str, str]:
    """LABEL=PATH arguments as {label: absolute path}, in the order given."""
    executables: dict[str, str] = {}
    for value in values:
        label, sep, path = value.partition("=")
        if not sep or not label or not path:
            raise SystemExit(f"--partbuild wants LABEL=PATH, not {value!r}")
        if label in executables:
            raise SystemExit(f"--partbuild label {label!r} given twice")
        if not os.access(path, os.X_OK):
            raise SystemExit(f"--partbuild {label}: {path} is not an executable")
        executables[label] = os.path.abspath(path)  # `up` runs with its cwd in a temporary directory
    return executables


def main() -> None:
    """Build or reuse the log, run every executable cold and from a checkpoint per round, report."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--partbuild",
        nargs="+",
        metavar="LABEL=PATH",
        default=[f"before={Path(sys.executable).parent / 'partbuild'}"],
        help="partbuild executables to compare (default: before=<this venv's partbuild>)",
    )
    parser.add_argument("--events", type=int, default=1_000_000, help="events in the W1 log")
    parser.add_argument("--rounds", type=int, default=2, help="rounds; each runs every executable cold + restart")
    parser.add_argument("--cache-dir", type=Path, default=DEFAULT_CACHE, help="where the built log is kept")
    parser.add_argument(
        "--graph",
        type=Path,
        help="graph file given to `up` (default: examples/clicks/pipeline.py of the checkout each executable's "
        "venv lives in, so builds whose example differs each get their own)",
    )
    parser.add_argument("--settle", type=float, default=5.0, help="seconds to keep `up` running once healthy")
    parser.add_argument("--startup-timeout", type=float, default=300.0, help="seconds at most for one start-up")
    parser.add_argument("--keep-logs", type=Path, help="copy the output of every `up` run into this directory")
    parser.add_argument("--stop-timeout", type=float, default=120.0, help="seconds at most for SIGTERM to stop it")
    args = parser.parse_args()
    executables = parse_executables(args.partbuild)

    def exit_on_sigterm(signum: int, _frame: object) -> None:
        raise SystemExit(128 + signum)  # so `finally` blocks stop `up` and remove temporary files

    signal.signal(signal.SIGTERM, exit_on_sigterm)

    log_file = cached_log(args.cache_dir, args.events)
    print(f"machine: {machine()}; load average {os.getloadavg()[0]:.2f}", flush=True)
    for label, path in executables.items():
        print(f"  {label}: {path}", flush=True)
    runs: list[Run] = []
    labels = list(executables)
    for round_no in range(1, args.rounds + 1):
        order = labels if round_no % 2 else labels[::-1]
        for label in order:
            with tempfile.TemporaryDirectory(prefix=f"up-memory-{label}-") as tmp:
                workdir = Path(tmp)
                db_file = workdir / "partbuild.db"
                copy_log(log_file, db_file)
                for scenario in SCENARIOS:
                    run = Run(label, round_no, scenario)
                    print(f"round {round_no}: {label} {scenario} ...", flush=True)
                    graph = args.graph or graph_of(executables[label])
                    run_up(executables[label], db_file, graph, workdir, run, args)
                    runs.append(run)
                    if args.keep_logs is not None:
                        args.keep_logs.mkdir(parents=True, exist_ok=True)
                        kept = args.keep_logs / f"{label}-round{round_no}-{scenario}.log"
                        shutil.copyfile(workdir / f"up-{scenario}.log", kept)
                    print(
                        f"  healthy {seconds(run.healthy_s)} s, Python peak {mib(run.peak)} MiB, "
                        f"JVM {mib(run.jvm_peak)} MiB, checkpoints at {run.checkpoints_start} / {run.checkpoints_stop}",
                        flush=True,
                    )
                    if run.error:
                        break
                appended = appended_events(db_file, args.events)
                if appended:
                    listed = ", ".join(f"{count:,} {kind}" for kind, count in sorted(appended.items()))
                    print(f"  events `up` appended to the log in round {round_no}: {listed}", flush=True)

    print()
    print(
        f"up memory: {args.events:,}-event W1 log, {args.rounds} round(s), settle {args.settle:g} s; "
        f"load average {os.getloadavg()[0]:.2f}"
    )
    print_runs(runs)
    print_summary(runs, labels, args.events)


if __name__ == "__main__":
    main()
