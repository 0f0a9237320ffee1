"""Throughput of job runs that sleep 1 s (no Spark) with 1, 2 and 4 workers of one group.

Target: 4 workers complete at least 3.2x the runs per second of one worker (2 workers
are reported against 1.6x, the same 80% efficiency).

For each k in 1, 2, 4, on a fresh log (a new PostgreSQL schema; `--backend sqlite`
for a SQLite file): `partbuild serve` for the API, then k `partbuild run --group`
workers on `bench/graphs/sleep.py` (`--buckets 32`), wait until the group's current
epoch has exactly those k members, every bucket owned and loads within one bucket,
let the workers settle (3 s), then record M wants of one partition each in one request
(`POST /api/v1/wants/batch`, what `partbuild want --file --want-per-ref` sends) and time from just
before the request to the envelope timestamp of the event that made the last want
SUCCESSFUL (the log's own clock, same machine: no polling delay in the figure).
runs/s = M / that time. Then SIGTERM the workers (they leave the group cleanly).
Also printed: each run's time from its buffer to its success (1 s of sleep plus
dispatch and outcome), the slot time left empty per run (shared slots), and the
window's CPU split between the workers, the API server, PostgreSQL, this process
and everything else on the machine (`/proc`).

Slots. The job's `max_concurrency` is a limit on the whole log, shared by every worker
of the group, not a per-worker one. So with `--slots shared` (the default) k workers
get `max_concurrency = 4 * k`: four runs per worker on average, but whoever decides
first fills a free slot with a run of its own buckets. With `--slots per-worker`,
each worker process sleeps at most 4 runs at once (a semaphore in the job, with an
unlimited `max_concurrency`): a worker whose own capacity is fixed, so a worker with
more partitions in its buckets finishes later. `--control` (on by default, shared
slots only) adds one worker with 16 slots: the same concurrency as 4 workers in one
process, telling the orchestrator's own limits from the group's.

M = 240 by default: 4 slots x 4 workers x 15 waves, so the 4-worker run is 15 s of
sleeping (15 waves) against 60 s for one worker, long enough that the fixed costs
(the request, the first decision, the last success) are a few percent of it.
`--rounds 2` alternates the order of k (1, 2, 4 then 4, 2, 1) and reports medians.

    .venv/bin/python bench/group_throughput.py [--backend postgres|sqlite] [--slots shared|per-worker]
                                               [--wants 240] [--rounds 2] [--buckets 32] [--no-control] [--keep DIR]
                                               [--count-conflicts]
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import time
from collections import Counter
from dataclasses import dataclass, field

from _common import machine
from _groupkit import (
    CpuMeter,
    RunsInFlight,
    Tail,
    Workers,
    api_server,
    conflicts,
    fresh_log,
    is_balanced,
    now_ms,
    pid_of,
    successful_wants,
    want_each,
    workdir,
)
from graphs.sleep import sleep_refs

from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.fold.build_state import BuildState
from partbuild.state.rules.bucketing import bucket
from partbuild.state.rules.group import GroupState

TARGET_4 = 3.2
TARGET_2 = 1.6
SETTLE_S = 3.0  # after the group is balanced: the workers' start-up work out of the measured window
TIMEOUT_S = 600.0
CORES = os.cpu_count() or 1


@dataclass
class Result:
    """One measurement: k workers building M partitions."""

    label: str
    workers: int
    slots: int  # runs at once the graph allows in all (shared) or per worker
    seconds: float = math.nan
    first_run_s: float = math.nan  # request sent -> first JobRunBuffer
    partitions_by_worker: list[int] = field(default_factory=list)  # in the buckets each worker owns
    runs_by_worker: list[int] = field(default_factory=list)
    peak_in_flight: list[int] = field(default_factory=list)
    failures: int = 0
    rejections: int = 0
    run_s: float = math.nan  # mean time of a run from its buffer to its success (1 s of it sleeping)
    idle_slot_s: float = math.nan  # per run: slot time with no run in it (shared slots: slots x time - runs' time)
    cpu: dict[str, float] = field(default_factory=dict)  # CpuMeter's split of the measured window

    @property
    def rate(self) -> float:
        return sum(self.runs_by_worker) / self.seconds


class Progress(RunsInFlight):
    """Runs in flight per worker, and when the last of `wants` wants became SUCCESSFUL (envelope time)."""

    def __init__(self, wants: int) -> None:
        super().__init__()
        self.wants = wants
        self.done_ms: int | None = None

    def __call__(self, seq: int, event: pb.Event, state: BuildState) -> None:
        super().__call__(seq, event, state)
        if self.done_ms is None and successful_wants(state) == self.wants:
            self.done_ms = event.timestamp_ms


def measure(backend: str, k: int, slots_mode: str, args: argparse.Namespace, refs: list[str], slots: int) -> Result:
    """Start k workers on a fresh log, wait for a balanced group, time M wants to SUCCESSFUL.

    `slots`: the graph's `max_concurrency` with shared slots (ignored per worker: each has its own).
    """
    label = f"{k} worker{'s' if k > 1 else ''}"
    if slots_mode == "shared":
        env = {"PARTBUILD_SLEEP_CONCURRENCY": str(slots)}
        label += f", {slots} shared slots"
    else:
        env = {"PARTBUILD_SLEEP_CONCURRENCY": str(len(refs)), "PARTBUILD_SLEEP_SLOTS": str(args.slots_per_worker)}
        label += f", {args.slots_per_worker} slots each"
    env |= {"PARTBUILD_SLEEP_PARTITIONS": str(len(refs)), "PARTBUILD_SLEEP_S": str(args.sleep)}
    result = Result(label, k, slots)
    with (
        workdir(args.keep, f"{backend}-{k}-{slots_mode}-{slots}-{time.time_ns()}") as tmp,
        fresh_log(backend, tmp) as db,
        api_server(db, tmp) as api,
        Workers(
            db,
            tmp,
            buckets=args.buckets,
            member_timeout_s=10,
            env=env,
            # Runs last 1 s (or wait for a slot): few run heartbeats, and nobody dies here.
            heartbeat_interval_s=30,
            heartbeat_timeout_s=120,
            count_conflicts=args.count_conflicts,
        ) as workers,
        Tail(db) as tail,
    ):
        names = [f"w{n}" for n in range(1, k + 1)]
        pids = [workers.start(name).pid for name in names]
        formed = tail.wait("balanced", lambda _s: is_balanced(tail.group(), pids), workers, names)
        time.sleep(SETTLE_S)
        progress = Progress(len(refs))
        tail.poll()
        tail.watches.append(progress)
        meter = CpuMeter({"workers": pids, "api": [api.pid]})
        meter.start()
        started_ms = now_ms()
        want_each(api.client, refs)
        deadline = time.monotonic() + TIMEOUT_S
        while progress.done_ms is None:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{label}: {successful_wants(tail.state)} of {len(refs)} wants in {TIMEOUT_S:g} s")
            workers.check_running(names)
            time.sleep(0.1)
            tail.poll()
        result.cpu = meter.stop()
        result.seconds = (progress.done_ms - started_ms) / 1000
        assert progress.first_buffer_ms is not None
        result.first_run_s = (progress.first_buffer_ms - started_ms) / 1000
        group = tail.group()
        assert group is not None
        members = sorted(group.members, key=lambda task: pids.index(pid_of(task)))
        result.partitions_by_worker = owned_partitions(group, members, refs)
        result.runs_by_worker = [progress.buffered[task] for task in members]
        result.peak_in_flight = [progress.peak[task] for task in members]
        result.failures = progress.failures
        result.run_s = statistics.fmean(progress.run_ms) / 1000
        if slots_mode == "shared":
            result.idle_slot_s = (slots * result.seconds - sum(progress.run_ms) / 1000) / len(refs)
        result.rejections = len(tail.state.rejections)
        lost = ""
        if args.count_conflicts:
            found = conflicts(list(workers.started.values()), started_ms, progress.done_ms)
            lost = f"; appends that lost a race: {sum(found.values())} {dict(found.most_common())}"
        workers.stop(names)
        print(
            f"  {backend} {label}: {result.rate:.2f} runs/s ({len(refs)} runs in {result.seconds:.2f} s, "
            f"first run buffered {result.first_run_s:.2f} s after the request; group balanced "
            f"{formed:.1f} s after start); partitions in each worker's buckets {result.partitions_by_worker}, "
            f"runs per worker {result.runs_by_worker}, peak in flight "
            f"{result.peak_in_flight}; a run takes {result.run_s:.3f} s from buffer to success"
            + (f", a slot idles {result.idle_slot_s:.3f} s per run" if slots_mode == "shared" else " (waits included)")
            + f"; failures {result.failures}, rejected events {result.rejections}; "
            f"CPU s: {', '.join(f'{who} {used:.1f}' for who, used in result.cpu.items() if who != 'busy cores')}; "
            f"{result.cpu['busy cores']:.2f} of {CORES} cores busy{lost}",
            flush=True,
        )
    return result


def owned_partitions(group: GroupState, members: list[str], refs: list[str]) -> list[int]:
    """How many of `refs` fall in the buckets each of `members` owns."""
    counts = Counter(group.owners.get(bucket(group.namespace, ref, group.bucket_total)) for ref in refs)
    return [counts[task] for task in members]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", choices=["postgres", "sqlite"], default="postgres")
    parser.add_argument("--slots", choices=["shared", "per-worker"], default="shared", dest="slots_mode")
    parser.add_argument("--slots-per-worker", type=int, default=4)
    parser.add_argument("--wants", type=int, default=240)
    parser.add_argument("--sleep", type=float, default=1.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--buckets", type=int, default=32)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--control", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--keep", metavar="DIR", help="keep each log and the processes' outputs under DIR")
    parser.add_argument(
        "--count-conflicts", action="store_true", help="count appends that lose a race (bench/diag/sitecustomize.py)"
    )
    args = parser.parse_args()
    print(f"machine: {machine()}")
    refs = sleep_refs(args.wants)
    print(
        f"{args.backend}, {args.wants} wants of one 1-partition run each sleeping {args.sleep:g} s, "
        f"{args.buckets} buckets, slots {args.slots_mode} ({args.slots_per_worker} per worker)",
        flush=True,
    )
    results: dict[str, list[Result]] = {}
    for round_ in range(args.rounds):
        order = args.workers if round_ % 2 == 0 else list(reversed(args.workers))
        print(f"round {round_ + 1}: workers {order}", flush=True)
        for k in order:
            result = measure(args.backend, k, args.slots_mode, args, refs, args.slots_per_worker * k)
            results.setdefault(str(k), []).append(result)
        if args.control and args.slots_mode == "shared":
            slots = args.slots_per_worker * max(args.workers)
            control = measure(args.backend, 1, "shared", args, refs, slots)
            results.setdefault("control", []).append(control)

    print(f"machine: {machine()}")
    rates = {key: statistics.median(r.rate for r in found) for key, found in results.items()}
    for key, found in results.items():
        seconds = statistics.median(r.seconds for r in found)
        ideal = args.wants / found[0].slots * args.sleep if args.slots_mode == "shared" or key == "control" else None
        spread = "" if key == "control" else f"; partitions per worker {found[0].partitions_by_worker}"
        print(
            f"{found[0].label}: median {rates[key]:.2f} runs/s, {seconds:.2f} s "
            f"({', '.join(f'{r.rate:.2f}' for r in found)} runs/s over {len(found)} rounds"
            + (f"; ideal {ideal:.0f} s" if ideal else "")
            + spread
            + ")"
        )
    one = rates.get("1")
    for k, target in (("2", TARGET_2), ("4", TARGET_4)):
        if one is None or k not in rates:
            continue
        ratio = rates[k] / one
        verdict = "PASS" if ratio >= target else "MISS"
        print(
            f"group throughput ({args.backend}, {args.slots_mode} slots): {k} workers / 1 = {ratio:.2f}x "
            f"(target >= {target}x): {verdict}"
        )
    if "control" in rates and one is not None:
        print(
            f"control: 1 worker with {results['control'][0].slots} slots = {rates['control'] / one:.2f}x 1 worker "
            "with 4 (no group needed for that concurrency)"
        )


if __name__ == "__main__":
    main()
