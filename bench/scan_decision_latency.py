"""Decisions while a source is scanned: the run loop's step time and a want's latency during a 100,000-file scan.

Target: an idle step stays under 5 ms while the `SourceScanner` thread runs a full
first pass over 100,000 objects (verdict on the p99 of every step during the scan).

A tree of 1,000 partition directories `date=YYYY-MM-DD` x (99 empty files +
`_SUCCESS`) is built once (in /dev/shm when writable). For each backend, an
`Orchestrator` on a fresh log runs a graph of that source (`filesystem_discovery`,
default `page_items` and `slice_s`, no rescan within the run) and one no-op job
without inputs or Spark. The main thread runs the real loop (`step()`, and
`_wait()` when nothing happened: the poll interval, or at once when the scanner or
a want woke it) and times every `step()` with perf_counter, until the first pass is
done. Then the scanner is stopped and the same number of steps is timed with no
scan running: the baseline, same process, same state, same run. Meanwhile a
thread plays the API: every `--probe-every` seconds it appends a `WantCreate` of a
new ref of the job and wakes the loop, as `up` does; the decision latency is the
time from that append to the return of the step that appended its `JobRunBuffer`.

"Idle" steps below are the steps that folded nothing and appended nothing (the
target's case; the scanner folds its own batches, so a step woken by one decides
again on it but folds nothing); "all" adds the steps that folded a probe want or a
run's outcome and appended or dispatched something. For idle steps the main
thread's CPU time (`time.thread_time`) and its waits for the live state's locks are
split out; the rest is time off the CPU: waiting for the GIL, the database, or the
OS scheduler (the baseline shows how much of it is the last two).
`--compare-switch-interval` runs every round a second time with another
`sys.setswitchinterval`, `--compare-slice-pause` with the scanner's `SLICE_PAUSE`
at 0 and at the given value, alternating the order, and prints the ratios.

    .venv/bin/python bench/scan_decision_latency.py [--backend both|sqlite|postgres] [--page-items 1000]
        [--slice-s 0.05] [--switch-interval 0.005]
        [--compare-switch-interval 0.001 | --compare-slice-pause 1] [--poll 0.05] [--probe-every 0.25] [--rounds 3]
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from _common import machine
from _groupkit import fresh_log

from partbuild.orchestrator.context import JobContext
from partbuild.orchestrator.graph import Graph, Job, PartitionPattern, SourceDataset
from partbuild.orchestrator.loop import Orchestrator
from partbuild.orchestrator.sources import scanner as scanner_module
from partbuild.orchestrator.sources.discovery import filesystem_discovery
from partbuild.orchestrator.sources.scanner import SourceScanner
from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.fold.records import InstanceState
from partbuild.state.log.events import envelope, manual
from partbuild.state.log.store import EventLog

TARGET_MS = 5.0
DIRS = 1_000
FILES_PER_DIR = 99  # plus _SUCCESS: 100 objects per partition
FIRST_DAY = dt.date(2020, 1, 1)
NOOP = PartitionPattern("bench/noop/n={n:int}")
SOURCE = "raw"


def build_tree(root: Path) -> int:
    """DIRS partition directories of FILES_PER_DIR empty files and a `_SUCCESS`; returns the object count."""
    count = 0
    for d in range(DIRS):
        folder = root / f"date={(FIRST_DAY + dt.timedelta(days=d)).isoformat()}"
        folder.mkdir(parents=True)
        for name in [*(f"part-{f:05d}.parquet" for f in range(FILES_PER_DIR)), "_SUCCESS"]:
            os.close(os.open(folder / name, os.O_CREAT | os.O_WRONLY, 0o644))
            count += 1
    return count


def do_nothing(_: JobContext) -> None:
    """The job: builds nothing, at once."""


def graph_for(root: Path, page_items: int, slice_s: float) -> Graph:
    discovery = filesystem_discovery(
        root, keys="date={date:date}", page_items=page_items, slice_s=slice_s, rescan_every_s=86_400.0
    )
    return Graph(
        [Job("noop", [NOOP], run=do_nothing, batch_size=1, max_concurrency=4)],
        [SourceDataset(SOURCE, "bench/raw/date={date:date}", discovery=discovery)],
    )


def pct(values: list[float], q: float) -> float:
    """The q-quantile (nearest rank) of `values`."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered)) - 1))]


def spread(values: list[float]) -> str:
    if not values:
        return "(none)"
    return (
        f"mean {statistics.fmean(values):6.2f}  p50 {statistics.median(values):6.2f}  p99 {pct(values, 0.99):6.2f}"
        f"  max {max(values):6.2f} ms"
        f"  (n={len(values)})"
    )


class LockWaits:
    """Time the main thread spends waiting for the live state's locks (the fold lock and the readers/writer lock).

    Installed as proxies on one LiveState: what a step waits for beyond them is the GIL,
    the database and its own CPU (`time.thread_time`).
    """

    def __init__(self, live: object) -> None:
        self.main = threading.main_thread()
        self.waited_s = 0.0
        self._fold = live._fold_lock  # type: ignore[attr-defined]
        self._rw = live._lock  # type: ignore[attr-defined]
        live._fold_lock = self  # type: ignore[attr-defined]
        live._lock = self  # type: ignore[attr-defined]

    @contextlib.contextmanager
    def _timed(self, lock: contextlib.AbstractContextManager[object]) -> Iterator[None]:
        if threading.current_thread() is not self.main:
            with lock:
                yield
            return
        started = time.perf_counter()
        with lock:
            self.waited_s += time.perf_counter() - started
            yield

    def __enter__(self) -> None:  # the fold lock (a plain Lock: acquired here, released in __exit__)
        if threading.current_thread() is not self.main:
            self._fold.acquire()
            return
        started = time.perf_counter()
        self._fold.acquire()
        self.waited_s += time.perf_counter() - started

    def __exit__(self, *exc: object) -> None:
        self._fold.release()

    def read_lock(self) -> contextlib.AbstractContextManager[None]:
        return self._timed(self._rw.read_lock())

    def write_lock(self) -> contextlib.AbstractContextManager[None]:
        return self._timed(self._rw.write_lock())


@dataclass
class Phase:
    """The steps and want latencies of one phase (during the scan, or the baseline)."""

    steps_ms: list[float] = field(default_factory=list)
    idle_ms: list[float] = field(default_factory=list)  # steps that folded and appended nothing
    idle_cpu_ms: list[float] = field(default_factory=list)  # the main thread's CPU in those steps
    idle_locks_ms: list[float] = field(default_factory=list)  # their waits for the live state's locks
    idle_rest_ms: list[float] = field(default_factory=list)  # wall - CPU - locks: the GIL and the database
    latency_ms: list[float] = field(default_factory=list)


class Prober(threading.Thread):
    """Plays the API: appends a WantCreate of a new ref of the job every `every_s` and wakes the loop."""

    def __init__(self, log: EventLog, orchestrator: Orchestrator, every_s: float, first_n: int) -> None:
        super().__init__(name="bench-prober", daemon=True)
        self.log = log
        self.orchestrator = orchestrator
        self.every_s = every_s
        self.n = first_n
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.waiting: dict[str, float] = {}  # ref -> perf_counter of its append

    def run(self) -> None:
        while not self.stop.wait(self.every_s):
            ref = NOOP.format(n=self.n)
            self.n += 1
            want = pb.WantCreate(want_id=f"probe-{self.n}", partition_refs=[ref])
            event = envelope(want, source=manual("bench"))
            with self.lock:
                self.log.append([event])
                self.waiting[ref] = time.perf_counter()
            self.orchestrator.wake()

    def check(self, orchestrator: Orchestrator, now: float, into: list[float]) -> None:
        """Record the latency of every probed ref whose JobRunBuffer the state now holds."""
        with self.lock:
            waiting = list(self.waiting.items())
        with orchestrator.live.read() as state:
            done = [
                (ref, appended)
                for ref, appended in waiting
                if (instance := state.canonical_instance(ref)) is not None
                and instance.state in (InstanceState.BUILDING, InstanceState.LIVE)
            ]
        for ref, appended in done:
            into.append((now - appended) * 1000)
            with self.lock:
                del self.waiting[ref]


def timed_step(orchestrator: Orchestrator, phase: Phase, prober: Prober, waits: LockWaits) -> None:
    head = orchestrator.state.head_seq
    waited = waits.waited_s
    cpu = time.thread_time()
    started = time.perf_counter()
    busy = orchestrator.step()
    ended = time.perf_counter()
    cpu_ms = (time.thread_time() - cpu) * 1000
    ms = (ended - started) * 1000
    phase.steps_ms.append(ms)
    if not busy and orchestrator.state.head_seq == head:
        locks_ms = (waits.waited_s - waited) * 1000
        phase.idle_ms.append(ms)
        phase.idle_cpu_ms.append(cpu_ms)
        phase.idle_locks_ms.append(locks_ms)
        phase.idle_rest_ms.append(max(0.0, ms - cpu_ms - locks_ms))
    prober.check(orchestrator, ended, phase.latency_ms)
    if not busy:
        orchestrator._wait()  # the real loop's wait: the poll interval, or until woken


@dataclass
class SliceTimes:
    """Durations of the scanner's slices and of the connector calls inside them (class-level wrappers)."""

    slices_ms: list[float] = field(default_factory=list)
    pages_ms: list[float] = field(default_factory=list)


def instrument(times: SliceTimes, graph: Graph) -> None:
    original = SourceScanner._slice

    def slice_timed(self: SourceScanner, scan: object) -> None:
        started = time.perf_counter()
        try:
            original(self, scan)  # type: ignore[arg-type]
        finally:
            times.slices_ms.append((time.perf_counter() - started) * 1000)

    SourceScanner._slice = slice_timed  # type: ignore[method-assign]
    connector = graph.sources[SOURCE].discovery.connector  # type: ignore[union-attr]
    fill_page = connector.fill_page

    def fill_page_timed(*args: object, **kwargs: object) -> object:
        started = time.perf_counter()
        try:
            return fill_page(*args, **kwargs)  # type: ignore[arg-type]
        finally:
            times.pages_ms.append((time.perf_counter() - started) * 1000)

    connector.fill_page = fill_page_timed  # type: ignore[method-assign]


def measure(
    backend: str, root: Path, args: argparse.Namespace, workdir: Path, impose: float | None = None
) -> dict[str, object]:
    """One round; `impose`: the switch interval to run with, set after the orchestrator (and its scanner) started."""
    graph = graph_for(root, args.page_items, args.slice_s)
    times = SliceTimes()
    original_slice = SourceScanner._slice
    instrument(times, graph)
    scanning, baseline = Phase(), Phase()
    try:
        with fresh_log(backend, workdir) as url, EventLog.open(url) as log:
            started = time.perf_counter()
            orchestrator = Orchestrator(
                log,
                graph,
                warehouse=str(workdir / "warehouse"),
                spark=None,
                poll_interval_s=args.poll,
                listen_timeout_s=args.poll,
            )
            if impose is not None:
                sys.setswitchinterval(impose)
            prober = Prober(log, orchestrator, args.probe_every, 0)
            waits = LockWaits(orchestrator.live)
            try:
                prober.start()
                while True:
                    timed_step(orchestrator, scanning, prober, waits)
                    record = orchestrator.state.sources.get(SOURCE)
                    if record is not None and record.passes_done >= 1:
                        break
                    if time.perf_counter() - started > args.timeout:
                        raise SystemExit(f"{backend}: the first pass did not finish within {args.timeout:g} s")
                wall_s = time.perf_counter() - started
                orchestrator.scanner.stop()
                for _ in range(len(scanning.steps_ms)):
                    timed_step(orchestrator, baseline, prober, waits)
                prober.stop.set()
                prober.join()
                tail = Phase()  # the last probes' runs: their latencies count, their steps do not
                for _ in range(20):
                    if not prober.waiting:
                        break
                    timed_step(orchestrator, tail, prober, waits)
                baseline.latency_ms += tail.latency_ms
            finally:
                prober.stop.set()
                orchestrator.close()
    finally:
        SourceScanner._slice = original_slice  # type: ignore[method-assign]
    return {
        "record": record,
        "wall_s": wall_s,
        "scanning": scanning,
        "baseline": baseline,
        "times": times,
        "probes_left": len(prober.waiting),
        "load": os.getloadavg()[0],
    }


def report(backend: str, results: list[dict[str, object]]) -> tuple[bool, dict[str, float]]:
    scanning, baseline, times = Phase(), Phase(), SliceTimes()
    rates = []
    for result in results:
        record = result["record"]
        pass_s = (record.last_pass_done_ms - record.pass_started_ms) / 1000  # type: ignore[attr-defined]
        items = record.last_pass_items  # type: ignore[attr-defined]
        partitions = record.last_pass_partitions  # type: ignore[attr-defined]
        rates.append(items / pass_s)
        print(
            f"[{backend}] first pass: {items:,} objects, {partitions:,} partitions in {pass_s:.2f} s "
            f"({items / pass_s:,.0f} items/s; the loop saw it done after {result['wall_s']:.2f} s)"
            f", load average {result['load']:.2f}"
        )
        for pooled, phase in ((scanning, result["scanning"]), (baseline, result["baseline"])):
            pooled.steps_ms += phase.steps_ms  # type: ignore[attr-defined]
            pooled.idle_ms += phase.idle_ms  # type: ignore[attr-defined]
            pooled.latency_ms += phase.latency_ms  # type: ignore[attr-defined]
            pooled.idle_cpu_ms += phase.idle_cpu_ms  # type: ignore[attr-defined]
            pooled.idle_locks_ms += phase.idle_locks_ms  # type: ignore[attr-defined]
            pooled.idle_rest_ms += phase.idle_rest_ms  # type: ignore[attr-defined]
        times.slices_ms += result["times"].slices_ms  # type: ignore[attr-defined]
        times.pages_ms += result["times"].pages_ms  # type: ignore[attr-defined]
    print(f"  pooled over {len(results)} round(s):")
    print(f"  scanner slices: {spread(times.slices_ms)}")
    print(f"  connector pages (inside slices): {spread(times.pages_ms)}")
    print(f"  steps during the scan, all:  {spread(scanning.steps_ms)}")
    print(f"  steps during the scan, idle: {spread(scanning.idle_ms)}")
    print(f"  baseline (no scan), all:     {spread(baseline.steps_ms)}")
    print(f"  baseline (no scan), idle:    {spread(baseline.idle_ms)}")
    for label, phase in (("during the scan", scanning), ("baseline", baseline)):
        print(f"  idle steps {label}, where the time goes:")
        print(f"    main thread CPU:          {spread(phase.idle_cpu_ms)}")
        print(f"    waits for the state locks: {spread(phase.idle_locks_ms)}")
        print(f"    rest (GIL, database):     {spread(phase.idle_rest_ms)}")
    print(f"  want -> JobRunBuffer during the scan: {spread(scanning.latency_ms)}")
    print(f"  want -> JobRunBuffer, baseline:       {spread(baseline.latency_ms)}")
    left = sum(result["probes_left"] for result in results)  # type: ignore[misc]
    if left:
        print(f"  ({left} probe(s) had no JobRunBuffer yet at the end)")
    ratios = []
    for label, during, base in (
        ("all p50", statistics.median(scanning.steps_ms), statistics.median(baseline.steps_ms)),
        ("all p99", pct(scanning.steps_ms, 0.99), pct(baseline.steps_ms, 0.99)),
    ):
        ratios.append(f"{label} {during / base:.1f}x")
    if scanning.idle_ms and baseline.idle_ms:
        ratios.append(f"idle p99 {pct(scanning.idle_ms, 0.99) / pct(baseline.idle_ms, 0.99):.1f}x")
    if scanning.latency_ms and baseline.latency_ms:
        ratios.append(
            f"latency p50 {statistics.median(scanning.latency_ms) / statistics.median(baseline.latency_ms):.1f}x"
        )
    print(f"  during the scan / baseline: {', '.join(ratios)}")
    p99 = pct(scanning.steps_ms, 0.99)
    verdict = "PASS" if p99 < TARGET_MS else "MISS"
    scans = f"{len(results)} scan(s) of {items:,} objects"
    print(f"[{backend}] step p99 during {scans}: {p99:.2f} ms (target < {TARGET_MS:g} ms): {verdict}")
    if scanning.idle_ms:
        idle = pct(scanning.idle_ms, 0.99)
        print(
            f"[{backend}] idle steps only: p99 {idle:.2f} ms: {'PASS' if idle < TARGET_MS else 'MISS'}"
            f" (baseline all steps p99 {pct(baseline.steps_ms, 0.99):.2f} ms)"
        )
    figures = {
        "step p99": p99,
        "idle step p99": pct(scanning.idle_ms, 0.99) if scanning.idle_ms else float("nan"),
        "idle step mean": statistics.fmean(scanning.idle_ms) if scanning.idle_ms else float("nan"),
        "idle rest mean": statistics.fmean(scanning.idle_rest_ms) if scanning.idle_rest_ms else float("nan"),
        "want latency p50": statistics.median(scanning.latency_ms) if scanning.latency_ms else float("nan"),
        "want latency max": max(scanning.latency_ms) if scanning.latency_ms else float("nan"),
        "scan items/s": statistics.median(rates),
    }
    return verdict == "PASS", figures


def compare(backend: str, before: dict[str, float], after: dict[str, float], what: str) -> None:
    """Ratios of the second arm's figures to the first's (same run, alternating rounds)."""
    shown = ", ".join(
        f"{name} {before[name]:,.2f} -> {after[name]:,.2f} ({after[name] / before[name]:.2f}x)" for name in before
    )
    print(f"[{backend}] {what}, during the scan: {shown}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", choices=["both", "sqlite", "postgres"], default="both")
    parser.add_argument("--page-items", type=int, default=1_000, help="Discovery.page_items (default: its default)")
    parser.add_argument("--slice-s", type=float, default=0.05, help="Discovery.slice_s (default: its default)")
    parser.add_argument("--switch-interval", type=float, help="sys.setswitchinterval first (diagnosis)")
    parser.add_argument(
        "--compare-switch-interval",
        type=float,
        help="also run every round with this sys.setswitchinterval, alternating, and print the ratios"
        " (both arms' intervals are set after the orchestrator started, whatever its scanner set)",
    )
    parser.add_argument(
        "--compare-slice-pause",
        type=float,
        help="run every round with the scanner's SLICE_PAUSE at 0 and at this value, alternating; print the ratios",
    )
    parser.add_argument("--poll", type=float, default=0.05, help="the loop's poll interval (SQLite's default)")
    parser.add_argument("--probe-every", type=float, default=0.25, help="seconds between two probe wants")
    parser.add_argument("--rounds", type=int, default=3, help="scans per backend, each on a fresh log")
    parser.add_argument("--timeout", type=float, default=600.0, help="give up on a pass after this long")
    shm = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None
    parser.add_argument("--dir", default=shm, help="where to build the tree (default: /dev/shm, else the temp dir)")
    args = parser.parse_args()
    if args.switch_interval is not None:
        sys.setswitchinterval(args.switch_interval)
    backends = ["sqlite", "postgres"] if args.backend == "both" else [args.backend]

    print(f"machine: {machine()}")
    print(f"load average at start: {' '.join(f'{v:.2f}' for v in os.getloadavg())}")
    print(
        f"GIL switch interval {sys.getswitchinterval() * 1000:g} ms; page_items {args.page_items}, "
        f"slice_s {args.slice_s:g}, poll {args.poll:g} s, a probe want every {args.probe_every:g} s"
    )
    base = Path(tempfile.mkdtemp(prefix="pb-scan-bench-", dir=args.dir))
    passed = True
    try:
        started = time.perf_counter()
        objects = build_tree(base / "tree")
        print(
            f"built {objects:,} empty files in {DIRS:,} partitions in {time.perf_counter() - started:.1f} s "
            f"under {args.dir or 'the temp dir'}"
        )
        default = sys.getswitchinterval()
        paused = getattr(scanner_module, "SLICE_PAUSE", None)  # None: a scanner without the pause
        # An arm: (label, switch interval to impose or None, the scanner's SLICE_PAUSE or None).
        arms: list[tuple[str, float | None, float | None]] = [("default", None, None)]
        if args.compare_switch_interval is not None:
            arms = [
                (f"switch interval {default * 1000:g} ms", default, None),
                (f"switch interval {args.compare_switch_interval * 1000:g} ms", args.compare_switch_interval, None),
            ]
        elif args.compare_slice_pause is not None:
            if paused is None:
                raise SystemExit("--compare-slice-pause needs a scanner with SLICE_PAUSE")
            arms = [
                ("slice pause 0", None, 0.0),
                (f"slice pause {args.compare_slice_pause:g}", None, args.compare_slice_pause),
            ]
        for backend in backends:
            results: dict[str, list[dict[str, object]]] = {arm[0]: [] for arm in arms}
            for round_ in range(args.rounds):
                for label, switch, pause in arms if round_ % 2 == 0 else arms[::-1]:  # alternate: drift hits both
                    workdir = base / f"{backend}-{round_}-{len(results[label])}-{label.replace(' ', '_')}"
                    workdir.mkdir()
                    sys.setswitchinterval(default)
                    if pause is not None:
                        scanner_module.SLICE_PAUSE = pause  # type: ignore[attr-defined]
                    try:
                        result = measure(backend, base / "tree", args, workdir, switch)
                    finally:
                        if paused is not None:
                            scanner_module.SLICE_PAUSE = paused  # type: ignore[attr-defined]
                    result["switch_ms"] = sys.getswitchinterval() * 1000  # as the round ran it
                    results[label].append(result)
            sys.setswitchinterval(default)
            summaries = {}
            for label, _, _ in arms:
                name = backend if len(arms) == 1 else f"{backend}, {label}"
                ran = sorted({result["switch_ms"] for result in results[label]})  # type: ignore[type-var]
                if ran != [default * 1000]:
                    print(f"[{name}] rounds ran with a switch interval of {', '.join(f'{v:g}' for v in ran)} ms")
                summaries[label] = report(name, results[label])
            passed = summaries[arms[0][0]][0] and passed
            if len(arms) > 1:
                compare(backend, summaries[arms[0][0]][1], summaries[arms[1][0]][1], f"{arms[1][0]} vs {arms[0][0]}")
    finally:
        shutil.rmtree(base)
    print(f"overall: {'PASS' if passed else 'MISS'} (target: step p99 < {TARGET_MS:g} ms during the scan)")


if __name__ == "__main__":
    main()
