"""Time travel on a 1,000,000-instance W1 log: reads as of never-visited seqs, and what they cost around them.

Targets (issue 22), for the checkout under test (`--checkout`):
1. a first API read as of a never-visited seq (canonical, instance, lineage both ways depth 2, want detail,
   job-run detail): p99 <= 20 ms for each;
2. the server's RSS after 50 distinct seqs visited within 5% of its RSS before them;
3. a web page on its first visit as of a new seq (`?as_of=N`: want, partition, instance, lineage, job run):
   p99 <= 100 ms for each (printed next to the same pages of the present);
and against a baseline checkout (`--baseline`), measured in the same run, alternating:
4. `partbuild up`'s peak RSS (VmHWM) loading the log (cold: full replay; restart: from its checkpoint):
   checkout <= baseline;
5. replay throughput (`partbuild replay --db`, a full replay): checkout >= baseline (with `--side-by-side`,
   both replay at once, a core each, swapped every round, and the ratio is the median of the rounds' ratios:
   a neighbour that slows the machine down then slows both alike);
6. snapshot size (the one `partbuild replay --save-snapshot` stores): checkout <= 1.2x baseline.

The log is the benchmarks' W1 history (`_common.build`, at least `--instances` partition instances), built
once into `<cache-dir>/w1-<instances>.db` (the build is timed) and never opened for writing again: every
server, `up` and replay gets its own byte-for-byte copy (they write snapshots into it), in a temporary
directory under the cache dir. The benchmark reads the log with sqlite3, read-only, so the same cached file
serves checkouts of different schema revisions (SQLite copies are upgraded by the checkout that opens them),
provided the oldest of them built it: an older partbuild refuses a log at a revision it does not know, so
against an older `--baseline`, build the cache by running this script from the baseline's checkout first.

Parts 1-3 run against one real server process of the checkout, `<checkout>/.venv/bin/partbuild serve` on
SQLite (one uvicorn worker, loopback, no tokens). Requests go one at a time on one keep-alive connection
(http.client); a figure is the client's round trip on loopback (the server's time plus a few tenths of a
millisecond). Each table's title adds the server's CPU time per read on average (/proc/<pid>/stat), which
does not count waiting for a core: on a shared machine the round trips' tail can be other processes'.
Before anything is timed, present reads of every kind warm the server up (untimed).
Read targets are sampled from the log with a fixed seed: refs (from WantCreate and PartitionObserved),
instances (JobRunBuffer's), wants (WantCreate) and job runs (JobRunBuffer), each with the seq it first
exists at; each read picks a target and a seq drawn uniformly between that seq and the head, never used
before in the run (each seq is visited once: every timed as-of read is a first read at its seq). An answer
that says which seq it is as of (`as_of_seq`) must say the seq asked for. A kind whose API operation does
not take `as_of_seq` (the server's OpenAPI document says) is printed "not supported" and not measured.
Part 2 visits `--rss-seqs` new seqs with one read of every supported kind each, and compares VmRSS
(/proc/<pid>/status) before and after them; it runs first, so the other parts' visits are not in it.

A build that replays to answer as of a seq (every first visit a replay) takes seconds per visit:
`--visits`, `--rss-seqs` and `--web-visits` cap it, and the report says when they are below the defaults.
A guard stops the server (SIGKILL) when the machine's MemAvailable drops under `--min-available-gib`.

    .venv/bin/python bench/time_travel.py --checkout PATH [--baseline PATH] [--instances 1000000]
        [--cache-dir /work/benchdata] [--parts reads,rss,web,up,replay] [--visits 200] [--rss-seqs 50]
        [--web-visits 100] [--up-rounds 1] [--replay-rounds 2] [--side-by-side] [--seed 1]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Self
from urllib.parse import quote, urlencode

from _common import FULL_SIZE, build, exit_on_sigterm, machine, percentile
from _servekit import MIB, Client, Server, die_with_parent, mem_available
from up_memory import SCENARIOS, Run, copy_log, graph_of, run_up, sidecars

from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.log.store import EventLog

TARGET_READ_P99_MS = 20.0
TARGET_RSS_RATIO = 1.05
TARGET_WEB_P99_MS = 100.0
TARGET_UP_RATIO = 1.0  # peak RSS, checkout / baseline, at most
TARGET_REPLAY_RATIO = 1.0  # events/s, checkout / baseline, at least
TARGET_SNAPSHOT_RATIO = 1.2
DEFAULT_CACHE = Path("/work/benchdata")
PARTS = ("reads", "rss", "web", "up", "replay")
SAMPLE_KEEP = 5_000  # targets kept per kind (reservoir)


# ----------------------------------------------------------------- the log


def cached_log(cache_dir: Path, instances: int) -> Path:
    """The W1 log of at least `instances` partition instances, built into `cache_dir` unless already there."""
    cache_dir.mkdir(parents=True, exist_ok=True)
    path = cache_dir / f"w1-{instances}.db"
    if path.exists():
        print(f"log: reusing {path} ({path.stat().st_size / MIB:,.0f} MiB)", flush=True)
        return path
    partial = cache_dir / f"w1-{instances}.db.partial"
    for leftover in sidecars(partial):
        leftover.unlink(missing_ok=True)
    started = time.perf_counter()
    with EventLog.open(f"sqlite:///{partial}") as log:
        build(log, instances)
    for sidecar, final in zip(sidecars(partial), sidecars(path), strict=True):
        if sidecar.exists():
            sidecar.replace(final)
    print(f"log: built {path} in {time.perf_counter() - started:.0f} s (once; cached)", flush=True)
    return path


def read_only(path: Path) -> sqlite3.Connection:
    """A read-only sqlite3 connection: the cached log is never written after it was built."""
    return sqlite3.connect(f"file:{path}?mode=ro", uri=True)


def payloads(path: Path, page: int = 20_000) -> Iterator[tuple[int, bytes]]:
    """(seq, payload) of every event, in seq ranges of `page`."""
    with contextlib.closing(read_only(path)) as conn:
        head = conn.execute("SELECT max(seq) FROM events").fetchone()[0] or 0
        for start in range(0, head, page):
            yield from conn.execute(
                "SELECT seq, payload FROM events WHERE seq > ? AND seq <= ? ORDER BY seq", (start, start + page)
            )


@dataclass
class Targets:
    """What reads ask for: (id, the seq it first exists at) per kind, sampled from the log."""

    head: int
    refs: list[tuple[str, int]]
    instances: list[tuple[str, int]]
    wants: list[tuple[str, int]]
    runs: list[tuple[str, int]]


class Reservoir:
    """A uniform sample of at most `keep` items of a stream (algorithm R), first occurrence of each id only."""

    def __init__(self, rng: random.Random, keep: int) -> None:
        self.rng, self.keep = rng, keep
        self.items: list[tuple[str, int]] = []
        self.seen = 0
        self.ids: set[str] = set()

    def offer(self, item_id: str, seq: int) -> None:
        if item_id in self.ids:
            return
        self.ids.add(item_id)
        self.seen += 1
        if len(self.items) < self.keep:
            self.items.append((item_id, seq))
        elif (slot := self.rng.randrange(self.seen)) < self.keep:
            self.items[slot] = (item_id, seq)


def sample_targets(path: Path, seed: int) -> Targets:
    """Refs, instances, wants and job runs of the log, each with its first seq; a seeded sample of each kind."""
    started = time.perf_counter()
    rng = random.Random(f"{seed}-targets")
    refs, instances, wants, runs = (Reservoir(rng, SAMPLE_KEEP) for _ in range(4))
    event = pb.Event()
    head = 0
    for seq, payload in payloads(path):
        head = seq
        event.ParseFromString(payload)
        which = event.WhichOneof("payload")
        if which == "want_create":
            wants.offer(event.want_create.want_id, seq)
            for ref in event.want_create.partition_refs:
                refs.offer(ref, seq)
        elif which == "partition_observed":
            refs.offer(event.partition_observed.partition_ref, seq)
        elif which == "job_run_buffer":
            runs.offer(event.job_run_buffer.job_run_id, seq)
            for uuid in event.job_run_buffer.instance_uuids:
                instances.offer(uuid, seq)
    found = Targets(head, refs.items, instances.items, wants.items, runs.items)
    print(
        f"targets: {refs.seen:,} refs, {instances.seen:,} built instances, {wants.seen:,} wants, {runs.seen:,} "
        f"job runs in {head:,} events (read in {time.perf_counter() - started:.0f} s; {SAMPLE_KEEP:,} of each "
        f"kind kept, seed {seed})",
        flush=True,
    )
    return found


class SeqPicker:
    """(target, seq) pairs whose seqs were never used before in this run; each kind draws from its own stream."""

    def __init__(self, targets: Targets, seed: int) -> None:
        self.targets, self.seed = targets, seed
        self.used: set[int] = set()
        self.streams: dict[str, random.Random] = {}

    def pick(self, stream: str, pool: list[tuple[str, int]]) -> tuple[str, int]:
        rng = self.streams.setdefault(stream, random.Random(f"{self.seed}-{stream}"))
        while True:
            target, first = rng.choice(pool)
            seq = rng.randint(first, self.targets.head)
            if seq not in self.used:
                self.used.add(seq)
                return target, seq


# ----------------------------------------------------------------- the reads


@dataclass(frozen=True)
class Kind:
    """One kind of read: its targets, its path (as of a seq, or of the present with None)."""

    name: str
    pool: Callable[[Targets], list[tuple[str, int]]]
    path: Callable[[str, int | None], str]
    operation: str = ""  # the API operation's path in the OpenAPI document (API kinds only)


def _with(path: str, **query: object) -> str:
    given = {name: value for name, value in query.items() if value is not None}
    return f"{path}?{urlencode(given)}" if given else path


def _ref(ref: str) -> str:
    return quote(ref, safe="/")


API_KINDS = [
    Kind(
        "canonical",
        lambda t: t.refs,
        lambda ref, seq: _with(f"/api/v1/partitions/canonical/{_ref(ref)}", as_of_seq=seq),
        "/api/v1/partitions/canonical/{ref}",
    ),
    Kind(
        "instance",
        lambda t: t.instances,
        lambda uuid, seq: _with(f"/api/v1/instances/{uuid}", as_of_seq=seq),
        "/api/v1/instances/{uuid}",
    ),
    Kind(
        "lineage (both, depth 2)",
        lambda t: t.instances,
        lambda uuid, seq: _with(f"/api/v1/instances/{uuid}/lineage", direction="both", depth=2, as_of_seq=seq),
        "/api/v1/instances/{uuid}/lineage",
    ),
    Kind(
        "want detail",
        lambda t: t.wants,
        lambda want, seq: _with(f"/api/v1/wants/{quote(want, safe='')}", as_of_seq=seq),
        "/api/v1/wants/{want_id}",
    ),
    Kind(
        "job-run detail",
        lambda t: t.runs,
        lambda run, seq: _with(f"/api/v1/job-runs/{quote(run, safe='')}", as_of_seq=seq),
        "/api/v1/job-runs/{job_run_id}",
    ),
]
WEB_KINDS = [
    Kind("want page", lambda t: t.wants, lambda want, seq: _with(f"/wants/{quote(want, safe='')}", as_of=seq)),
    Kind("partition page", lambda t: t.refs, lambda ref, seq: _with("/partition", ref=ref, as_of=seq)),
    Kind("instance page", lambda t: t.instances, lambda uuid, seq: _with(f"/instances/{uuid}", as_of=seq)),
    Kind(
        "lineage page (both, depth 3)",
        lambda t: t.instances,
        lambda uuid, seq: _with(f"/instances/{uuid}", direction="both", depth=3, as_of=seq),
    ),
    Kind("job run page", lambda t: t.runs, lambda run, seq: _with(f"/runs/{quote(run, safe='')}", as_of=seq)),
]


@dataclass
class Timings:
    """Round trips (ms) of one kind of read, and what went wrong."""

    ms: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def line(self, label: str, target_ms: float | None = None) -> tuple[str, bool]:
        """A table line (count, p50, p99, max, verdict against `target_ms`) and whether it passed."""
        if not self.ms:
            return f"  {label:<30} no answers; {len(self.errors)} errors", False
        p99 = percentile(self.ms, 0.99)
        ok = not self.errors and (target_ms is None or p99 <= target_ms)
        verdict = "" if target_ms is None else f"  {'PASS' if ok else 'MISS'}"
        return (
            f"  {label:<30} {len(self.ms):>5} {percentile(self.ms, 0.5):>9.1f} {p99:>9.1f} {max(self.ms):>9.1f}"
            f" {len(self.errors):>6}{verdict}",
            ok,
        )


def timed(client: Client, into: Timings, path: str, seq: int | None) -> None:
    """GET `path`; its time into `into` when it answered 200 (as of `seq`, when the answer says), else an error."""
    status, body, ms = client.get(path)
    if status != 200:
        into.errors.append(f"HTTP {status} for {path}: {body[:160]!r}")
        return
    if seq is not None and body[:1] == b"{":
        said = json.loads(body).get("as_of_seq")
        if said is not None and said != seq:
            into.errors.append(f"{path} answered as of seq {said}")
            return
    into.ms.append(ms)


TABLE_HEAD = f"  {'read (ms, round trip)':<30} {'count':>5} {'p50':>9} {'p99':>9} {'max':>9} {'errors':>6}"


# ----------------------------------------------------------------- parts 1-3: one server


def warm_up(client: Client, picker: SeqPicker, kinds: list[Kind], rounds: int) -> None:
    """Present reads of every kind, untimed: the server's code paths and templates warm."""
    rng = random.Random(f"{picker.seed}-warm-up")
    for _ in range(rounds):
        for kind in kinds:
            target, _ = rng.choice(kind.pool(picker.targets))
            status, body, _ = client.get(kind.path(target, None))
            if status != 200:
                raise RuntimeError(f"warm-up {kind.name}: HTTP {status}: {body[:160]!r}")


def present_reads(client: Client, picker: SeqPicker, kinds: list[Kind], count: int) -> dict[str, Timings]:
    """`count` reads of the present per kind, interleaved, for comparison."""
    rng = random.Random(f"{picker.seed}-present")
    found = {kind.name: Timings() for kind in kinds}
    for _ in range(count):
        for kind in kinds:
            target, _ = rng.choice(kind.pool(picker.targets))
            timed(client, found[kind.name], kind.path(target, None), None)
    return found


def first_reads(client: Client, picker: SeqPicker, kinds: list[Kind], visits: int, label: str) -> dict[str, Timings]:
    """`visits` reads per kind, each as of a seq never visited before, kinds interleaved."""
    found = {kind.name: Timings() for kind in kinds}
    progress = Progress(label, visits)
    for index in range(visits):
        for kind in kinds:
            target, seq = picker.pick(f"{label}-{kind.name}", kind.pool(picker.targets))
            timed(client, found[kind.name], kind.path(target, seq), seq)
        progress.tick(index + 1)
    return found


class Progress:
    """A line every 30 s of a slow loop (a build that replays for each visit): how far it got."""

    def __init__(self, label: str, total: int, extra: Callable[[], str] = lambda: "") -> None:
        self.label, self.total, self.extra = label, total, extra
        self.started = self.reported = time.perf_counter()

    def tick(self, done: int) -> None:
        now = time.perf_counter()
        if now - self.reported >= 30:
            self.reported = now
            print(f"  {self.label}: {done:,} of {self.total:,}, {now - self.started:.0f} s{self.extra()}", flush=True)


class Spent:
    """Wall time, the server's CPU time and the load average over a block of reads.

    The server's CPU per read does not count waiting for a core, so it shows what a read costs
    when the round trips' tail is other processes' doing (the machine is shared).
    """

    def __init__(self, server: Server) -> None:
        self.server = server
        self.wall_s = self.cpu_s = 0.0

    def __enter__(self) -> Self:
        self.wall_s, self.cpu_s = time.perf_counter(), self.server.cpu_seconds()
        return self

    def __exit__(self, *exc: object) -> None:
        self.wall_s = time.perf_counter() - self.wall_s
        self.cpu_s = self.server.cpu_seconds() - self.cpu_s

    def text(self, found: dict[str, Timings]) -> str:
        reads = max(1, sum(len(timings.ms) + len(timings.errors) for timings in found.values()))
        return (
            f"{self.wall_s:,.0f} s, server CPU {1e3 * self.cpu_s / reads:,.1f} ms per read on average, "
            f"load average {os.getloadavg()[0]:.2f}"
        )


def print_table(title: str, found: dict[str, Timings], target_ms: float | None) -> list[bool]:
    """The table of `found`, verdicts against `target_ms`; the first errors of each kind."""
    print(title)
    print(TABLE_HEAD)
    verdicts = []
    for name, timings in found.items():
        text, ok = timings.line(name, target_ms)
        verdicts.append(ok)
        print(text)
        for error in timings.errors[:3]:
            print(f"    error: {error}")
    return verdicts


def part_rss(server: Server, client: Client, picker: SeqPicker, kinds: list[Kind], args: argparse.Namespace) -> None:
    """VmRSS before and after `--rss-seqs` new seqs, each visited with one read of every supported kind."""
    rss_before, _ = server.memory()
    found = {kind.name: Timings() for kind in kinds}
    started = time.perf_counter()
    progress = Progress("rss seqs", args.rss_seqs, lambda: f", server RSS {server.memory()[0] / MIB:,.0f} MiB")
    for index in range(args.rss_seqs):
        first, *others = kinds
        target, seq = picker.pick("rss", first.pool(picker.targets))
        timed(client, found[first.name], first.path(target, seq), seq)
        for kind in others:  # the same seq: a target of this kind that exists by then
            rng = random.Random(f"{picker.seed}-rss-{index}-{kind.name}")
            existing = [t for t, since in kind.pool(picker.targets) if since <= seq]
            if existing:
                timed(client, found[kind.name], kind.path(rng.choice(existing), seq), seq)
        progress.tick(index + 1)
    spent = time.perf_counter() - started
    rss_after, peak = server.memory()
    errors = sum(len(timings.errors) for timings in found.values())
    ratio = rss_after / rss_before
    ok = ratio <= TARGET_RSS_RATIO and not errors and args.rss_seqs >= 50
    capped = "" if args.rss_seqs >= 50 else f" (capped at {args.rss_seqs} seqs: the target is for 50)"
    print(
        f"server RSS: {rss_before / MIB:,.0f} MiB before, {rss_after / MIB:,.0f} MiB after {args.rss_seqs} distinct "
        f"seqs visited{capped} ({len(kinds)} reads each, {spent:.1f} s, {errors} errors; peak {peak / MIB:,.0f} MiB): "
        f"{ratio:.3f}x (target <= {TARGET_RSS_RATIO:.2f}x): {'PASS' if ok else 'MISS'}",
        flush=True,
    )


def part_reads(
    server: Server, client: Client, picker: SeqPicker, kinds: list[Kind], unsupported: list[str], visits: int
) -> None:
    """First API reads as of never-visited seqs, with the same reads of the present beside them."""
    with Spent(server) as spent:
        present = present_reads(client, picker, kinds, 100)
    print_table(f"API reads of the present (100 per kind, for comparison; {spent.text(present)}):", present, None)
    with Spent(server) as spent:
        found = first_reads(client, picker, kinds, visits, "api")
    capped = "" if visits >= 200 else f"; capped at {visits} per kind (default 200)"
    verdicts = print_table(
        f"API first reads as of a never-visited seq ({visits} per kind{capped}; {spent.text(found)}):",
        found,
        TARGET_READ_P99_MS,
    )
    for name in unsupported:
        print(f"  {name:<30} not supported (its operation takes no as_of_seq)")
    worst = max(found, key=lambda name: percentile(found[name].ms, 0.99))
    ok = all(verdicts) and not unsupported
    print(
        f"api first reads as of a new seq: worst p99 {percentile(found[worst].ms, 0.99):,.1f} ms ({worst}), "
        f"{len(unsupported)} kinds not supported (target p99 <= {TARGET_READ_P99_MS:.0f} ms for each of "
        f"{len(API_KINDS)} kinds): {'PASS' if ok else 'MISS'}",
        flush=True,
    )


def part_web(server: Server, client: Client, picker: SeqPicker, visits: int) -> None:
    """Web pages on their first visit as of a new seq, and the same pages of the present."""
    with Spent(server) as spent_present:
        present = present_reads(client, picker, WEB_KINDS, 100)
    with Spent(server) as spent:
        found = first_reads(client, picker, WEB_KINDS, visits, "web")
    capped = "" if visits >= 100 else f"; capped at {visits} per kind (default 100)"
    print_table(f"web pages of the present (100 per kind; {spent_present.text(present)}):", present, None)
    verdicts = print_table(
        f"web pages on their first visit as of a new seq ({visits} per kind{capped}; {spent.text(found)}):",
        found,
        TARGET_WEB_P99_MS,
    )
    for kind in WEB_KINDS:
        then, now = percentile(found[kind.name].ms, 0.99), percentile(present[kind.name].ms, 0.99)
        print(f"  {kind.name:<30} p99 as of a new seq / present: {then / now:,.2f}x ({then:,.1f} / {now:,.1f} ms)")
    worst = max(found, key=lambda name: percentile(found[name].ms, 0.99))
    print(
        f"web time travel, first visits: worst p99 {percentile(found[worst].ms, 0.99):,.1f} ms ({worst}) "
        f"(target p99 <= {TARGET_WEB_P99_MS:.0f} ms for each of {len(WEB_KINDS)} pages): "
        f"{'PASS' if all(verdicts) else 'MISS'}",
        flush=True,
    )


def parts_on_server(log_file: Path, checkout: Path, targets: Targets, args: argparse.Namespace) -> None:
    """Parts 1-3 against one `partbuild serve` of `checkout` on a copy of the log."""
    with tempfile.TemporaryDirectory(prefix="time-travel-serve-", dir=args.cache_dir) as tmp:
        workdir = Path(tmp)
        db_file = workdir / "partbuild.db"
        copy_log(log_file, db_file)
        with Server(partbuild(checkout), db_file, workdir, args.startup_timeout, args.min_available_gib) as server:
            rss, _ = server.memory()
            print(
                f"server: `partbuild serve` pid {server.pid}, start-up {server.startup_s:.1f} s to healthy at seq "
                f"{server.head_seq:,} ({server.instances():,} partition instances); RSS {rss / MIB:,.0f} MiB; "
                f"load average {os.getloadavg()[0]:.2f}",
                flush=True,
            )
            taking = server.operations_taking("as_of_seq")
            kinds = [kind for kind in API_KINDS if kind.operation in taking]
            unsupported = [kind.name for kind in API_KINDS if kind.operation not in taking]
            picker = SeqPicker(targets, args.seed)
            client = Client(server.base_url, args.request_timeout)
            try:
                warm_up(client, picker, [*API_KINDS, *WEB_KINDS], 20)
                if "rss" in args.parts:
                    part_rss(server, client, picker, kinds, args)
                if "reads" in args.parts:
                    part_reads(server, client, picker, kinds, unsupported, args.visits)
                if "web" in args.parts:
                    part_web(server, client, picker, args.web_visits)
            finally:
                client.close()
            rss, peak = server.memory()
            print(f"server RSS at the end {rss / MIB:,.0f} MiB, peak {peak / MIB:,.0f} MiB", flush=True)


# ----------------------------------------------------------------- parts 4-6: checkout and baseline


def partbuild(checkout: Path) -> Path:
    return checkout / ".venv" / "bin" / "partbuild"


def part_up(log_file: Path, checkouts: dict[str, Path], args: argparse.Namespace) -> None:
    """`up` cold (full replay) then restart (its checkpoint), on a fresh copy per round; labels alternate."""
    runs: list[Run] = []
    labels = list(checkouts)
    up_args = argparse.Namespace(startup_timeout=args.startup_timeout, settle=args.settle, stop_timeout=120.0)
    for round_no in range(1, args.up_rounds + 1):
        for label in labels if round_no % 2 else labels[::-1]:
            with tempfile.TemporaryDirectory(prefix=f"time-travel-up-{label}-", dir=args.cache_dir) as tmp:
                workdir = Path(tmp)
                copy_log(log_file, workdir / "partbuild.db")
                executable = str(partbuild(checkouts[label]))
                for scenario in SCENARIOS:
                    run = Run(label, round_no, scenario)
                    run_up(executable, workdir / "partbuild.db", graph_of(executable), workdir, run, up_args)
                    runs.append(run)
                    print(
                        f"  up {label} round {round_no} {scenario}: healthy {run.healthy_s:.1f} s, peak "
                        f"{run.peak / MIB:,.0f} MiB{'  ERROR ' + run.error if run.error else ''}",
                        flush=True,
                    )
    peaks = {
        (label, scenario): [r.peak for r in runs if r.label == label and r.scenario == scenario and not r.error]
        for label in labels
        for scenario in SCENARIOS
    }
    for (label, scenario), values in peaks.items():
        print(f"up peak RSS (VmHWM), {label} {scenario}: {_span(values)} MiB over {len(values)} round(s)")
    if "baseline" not in checkouts:
        print("up peak RSS: no --baseline, no ratio")
        return
    ratios = [_ratio(peaks[("checkout", s)], peaks[("baseline", s)]) for s in SCENARIOS]
    text = ", ".join(f"{s} {r:.3f}x" for s, r in zip(SCENARIOS, ratios, strict=True))
    ok = max(ratios) <= TARGET_UP_RATIO and not any(r.error or r.exit_code != 0 for r in runs)
    print(f"up peak RSS checkout/baseline: {text} (target <= {TARGET_UP_RATIO:.1f}x): {'PASS' if ok else 'MISS'}")


@dataclass
class Replay:
    """One `partbuild replay --save-snapshot` of a fresh copy."""

    events_per_s: float
    seconds: float
    events: int
    digest: str
    snapshot_bytes: int
    peak_rss: int  # the replaying process's ru_maxrss


def replay_once(log_file: Path, checkout: Path, cache_dir: Path, cpu: int | None = None) -> Replay:
    """Replay a fresh copy of the log with the checkout's CLI (on core `cpu` alone, when given); the snapshot it
    saved, measured in the copy."""

    def start_child() -> None:
        die_with_parent()
        if cpu is not None:
            os.sched_setaffinity(0, {cpu})

    with tempfile.TemporaryDirectory(prefix="time-travel-replay-", dir=cache_dir) as tmp:
        db_file = Path(tmp) / "partbuild.db"
        copy_log(log_file, db_file)
        output = Path(tmp) / "replay.json"
        command = [str(partbuild(checkout)), "replay", "--db", f"sqlite:///{db_file}", "--json", "--save-snapshot"]
        with open(output, "wb") as out:
            process = subprocess.Popen(command, stdout=out, stderr=subprocess.DEVNULL, preexec_fn=start_child)
        _, status, usage = os.wait4(process.pid, 0)
        process.returncode = os.waitstatus_to_exitcode(status)
        if process.returncode != 0:
            raise RuntimeError(f"{' '.join(command)} exited {process.returncode}")
        report = json.loads(output.read_text())
        if report["snapshot_seq"] != 0:
            raise RuntimeError(f"the copy's replay started from a snapshot at {report['snapshot_seq']}")
        with contextlib.closing(read_only(db_file)) as conn:
            size = conn.execute("SELECT coalesce(sum(length(payload)), 0) FROM snapshots").fetchone()[0]
    return Replay(
        report["events_per_second"], report["seconds"], report["replayed_events"], report["digest"], size,
        usage.ru_maxrss * 1024,
    )  # fmt: skip


def _side_by_side(log_file: Path, checkouts: dict[str, Path], cache_dir: Path, round_no: int) -> dict[str, Replay]:
    """Both checkouts' replays at the same time, each on a core of its own (swapped every round): a neighbour
    that slows the machine down slows both alike, so the ratio of the pair holds on a noisy host."""
    labels = list(checkouts)
    cores = sorted(os.sched_getaffinity(0))[:2]
    if round_no % 2 == 0:
        cores.reverse()
    with ThreadPoolExecutor(2) as pool:
        futures = {
            label: pool.submit(replay_once, log_file, checkouts[label], cache_dir, cpu)
            for label, cpu in zip(labels, cores, strict=True)
        }
        return {label: future.result() for label, future in futures.items()}


def part_replay(log_file: Path, checkouts: dict[str, Path], args: argparse.Namespace) -> None:
    """Full replays alternating between the checkouts (or side by side); events/s and the snapshot each saved."""
    found: dict[str, list[Replay]] = {label: [] for label in checkouts}
    labels = list(checkouts)
    side_by_side = args.side_by_side  # main() made sure there is a baseline and two cores
    for round_no in range(1, args.replay_rounds + 1):
        if side_by_side:
            replays = _side_by_side(log_file, checkouts, args.cache_dir, round_no)
        else:
            replays = {
                label: replay_once(log_file, checkouts[label], args.cache_dir)
                for label in (labels if round_no % 2 else labels[::-1])
            }
        for label, replay in replays.items():
            found[label].append(replay)
            print(
                f"  replay {label} round {round_no}: {replay.events:,} events in {replay.seconds:.1f} s = "
                f"{replay.events_per_s:,.0f} events/s; snapshot {replay.snapshot_bytes:,} bytes; process peak "
                f"{replay.peak_rss / MIB:,.0f} MiB; digest {replay.digest[:16]}",
                flush=True,
            )
    pairs = []
    if side_by_side:
        pairs = [c.events_per_s / b.events_per_s for c, b in zip(found["checkout"], found["baseline"], strict=True)]
        print(f"replay side by side, checkout/baseline per round: {', '.join(f'{r:.3f}' for r in pairs)}")
    for label, replays in found.items():
        print(
            f"replay {label}: {_span([r.events_per_s for r in replays], 1)} events/s; snapshot "
            f"{replays[-1].snapshot_bytes:,} bytes"
        )
    if "baseline" not in checkouts:
        print("replay and snapshot: no --baseline, no ratio")
        return
    rate = (  # side by side: the median of the rounds' ratios, each measured under the same load
        statistics.median(pairs)
        if pairs
        else _ratio([r.events_per_s for r in found["checkout"]], [r.events_per_s for r in found["baseline"]])
    )
    size = found["checkout"][-1].snapshot_bytes / found["baseline"][-1].snapshot_bytes
    same = found["checkout"][-1].digest == found["baseline"][-1].digest
    print(
        f"replay throughput checkout/baseline: {rate:.3f}x (target >= {TARGET_REPLAY_RATIO:.1f}x): "
        f"{'PASS' if rate >= TARGET_REPLAY_RATIO else 'MISS'}; digests {'equal' if same else 'DIFFER'}"
    )
    print(
        f"snapshot size checkout/baseline: {size:.3f}x (target <= {TARGET_SNAPSHOT_RATIO:.1f}x): "
        f"{'PASS' if size <= TARGET_SNAPSHOT_RATIO else 'MISS'}"
    )


def _span(values: list[float], scale: float = MIB) -> str:
    """`median (min - max)` of `values` / `scale`."""
    if not values:
        return "n/a"
    med, low, high = (v / scale for v in (statistics.median(values), min(values), max(values)))
    return f"{med:,.0f}" if len(values) == 1 else f"{med:,.0f} ({low:,.0f} - {high:,.0f})"


def _ratio(checkout: list[float], baseline: list[float]) -> float:
    """Median over median; NaN when either is missing."""
    return statistics.median(checkout) / statistics.median(baseline) if checkout and baseline else float("nan")


# ----------------------------------------------------------------- main


def describe(checkout: Path) -> str:
    """The checkout's commit, and whether its tree has changes."""
    commit = subprocess.run(
        ["git", "-C", str(checkout), "log", "-1", "--format=%h %s"], capture_output=True, text=True, check=False
    ).stdout.strip()
    dirty = subprocess.run(
        ["git", "-C", str(checkout), "status", "--porcelain", "--untracked-files=no"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()
    return f"{commit[:90]}{' (uncommitted changes)' if dirty else ''}"


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkout", type=Path, required=True, help="the checkout under test (its .venv)")
    parser.add_argument("--baseline", type=Path, help="a checkout to compare parts up and replay with")
    parser.add_argument("--instances", type=int, default=FULL_SIZE, help="partition instances of the W1 log")
    parser.add_argument("--cache-dir", type=Path, default=DEFAULT_CACHE, help="where the built log is kept")
    parser.add_argument("--parts", default=",".join(PARTS), help=f"which parts, comma-separated: {','.join(PARTS)}")
    parser.add_argument("--visits", type=int, default=200, help="first API reads per kind, each at a new seq")
    parser.add_argument("--rss-seqs", type=int, default=50, help="new seqs visited between the two RSS readings")
    parser.add_argument("--web-visits", type=int, default=100, help="first page visits per kind, each at a new seq")
    parser.add_argument("--up-rounds", type=int, default=1, help="rounds of `up` (cold + restart) per checkout")
    parser.add_argument("--settle", type=float, default=5.0, help="seconds `up` runs once healthy")
    parser.add_argument("--replay-rounds", type=int, default=2, help="full replays per checkout")
    parser.add_argument(
        "--side-by-side",
        action="store_true",
        help="replay both checkouts at once, a core each (swapped every round), instead of one after the other",
    )
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--startup-timeout", type=float, default=1_800.0, help="seconds at most for a start-up")
    parser.add_argument("--request-timeout", type=float, default=900.0, help="seconds at most for one request")
    parser.add_argument("--min-available-gib", type=float, default=2.0, help="memory guard: kill the server below")
    args = parser.parse_args()
    args.parts = [part.strip() for part in args.parts.split(",") if part.strip()]
    if unknown := [part for part in args.parts if part not in PARTS]:
        parser.error(f"--parts: unknown {', '.join(unknown)} (known: {', '.join(PARTS)})")
    if args.side_by_side and (args.baseline is None or len(os.sched_getaffinity(0)) < 2):
        parser.error("--side-by-side needs --baseline and two cores: each replay runs on a core of its own")
    for name in ("checkout", "baseline"):
        path = getattr(args, name)
        if path is not None:
            setattr(args, name, path.resolve())
            if not os.access(partbuild(path), os.X_OK):
                parser.error(f"--{name}: no {partbuild(path)} (run `make .venv/bin/.installed` there)")
    for name in ("visits", "rss_seqs", "web_visits", "up_rounds", "replay_rounds"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    args.cache_dir = args.cache_dir.resolve()
    return args


def main() -> None:
    args = parse_args()
    exit_on_sigterm()
    sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]  # a killed run keeps every line so far
    started = time.perf_counter()
    log_file = cached_log(args.cache_dir, args.instances)
    checkouts = {"checkout": args.checkout} | ({"baseline": args.baseline} if args.baseline else {})
    print(f"machine: {machine()}; load average {os.getloadavg()[0]:.2f}; {mem_available() / 2**30:.1f} GiB available")
    for label, path in checkouts.items():
        print(f"  {label}: {path} at {describe(path)}")
    print(f"parts: {', '.join(args.parts)}; seed {args.seed}", flush=True)
    if {"reads", "rss", "web"} & set(args.parts):
        targets = sample_targets(log_file, args.seed)
        parts_on_server(log_file, args.checkout, targets, args)
    if "up" in args.parts:
        part_up(log_file, checkouts, args)
    if "replay" in args.parts:
        part_replay(log_file, checkouts, args)
    print(f"time travel benchmark: {time.perf_counter() - started:.0f} s in all; load average {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
