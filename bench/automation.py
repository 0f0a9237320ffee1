"""Automation's costs (issue 25): reactions after a batch of changes, a step with many schedules due, idle steps.

Targets:
(a) a reaction evaluation after a batch of 1,000 changed instances on a 1,000,000-instance state: <= 50 ms
    (parsing the batch's events as `Reactor.read` does, `changes_in`, debouncing and firing the step's bounded
    batch of ReactionFired, `MAX_PER_STEP`, and noting the rest in the log, `ReactionsNoted`, so a restart
    owes them too; the rest of the batch is fired on the next steps, timed too);
(b) a step with 100 schedules due: <= 50 ms (`Ticker.due` making the 100 ticks with their wants, and the fold
    applying them to the same big state);
(c) the idle step of a real Orchestrator (SQLite log, waiting wants) with and without 100 schedules and
    reactions declared: the same-run ratio, target <= 1.2 (both skip their work when nothing was folded).

The big state is built in memory by folding synthetic events (no log): `--instances` / 2 raw partitions
observed with a version, each read by one daily partition (built by runs of 1,000, each output naming its
input), so the daily job's `on_upstream_change` has real consumers to follow. The batch is 1,000 raw days
observed again with a new version: the fold taints their dailies, the reactions want them again.

    .venv/bin/python bench/automation.py [--instances 1000000] [--changes 1000] [--schedules 100]
        [--idle-wants 10000] [--steps 200]
"""

from __future__ import annotations

import argparse
import datetime as dt
import statistics
import tempfile
import time
from pathlib import Path

from _common import machine

from partbuild.orchestrator.context import JobContext
from partbuild.orchestrator.graph import Graph, Job, Partition, SourceDataset
from partbuild.orchestrator.loop import Orchestrator
from partbuild.orchestrator.reactions import MAX_PER_STEP, on_upstream_change
from partbuild.orchestrator.reactor import Reactor
from partbuild.orchestrator.schedules import Schedule
from partbuild.orchestrator.ticks import Ticker
from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.database import Database
from partbuild.state.fold.build_state import BuildState
from partbuild.state.log.collector import settle_loaded_state
from partbuild.state.log.events import envelope, from_job_run, manual, system
from partbuild.state.rules.ids import instance_uuid

TARGET_REACTION_MS = 50.0
TARGET_TICKS_MS = 50.0
TARGET_IDLE_RATIO = 1.2
RUN = 1_000  # dailies built by one run
T0 = 1_800_000_000_000
SOURCE = system("orchestrator")


def do_nothing(_: JobContext) -> None:
    """Never runs here."""


def never_there(_: Partition) -> None:
    """The raw data never arrives (idle steps: every want stays waiting)."""


def daily_graph(schedules: int = 0, react: bool = True) -> Graph:
    reactions = [on_upstream_change()] if react else []
    every = [
        Schedule(f"s{n}", lambda tick, n=n: [f"daily/n={n}"], every=dt.timedelta(days=1)) for n in range(schedules)
    ]
    return Graph(
        [Job("daily", ["daily/n={n:int}"], do_nothing, inputs=lambda p: [f"raw/n={p['n']}"], reactions=reactions)],
        [SourceDataset("raw", "raw/n={n:int}", locate=never_there)],
        schedules=every,
    )


class Folder:
    """A BuildState and the events folded into it, each checked."""

    def __init__(self) -> None:
        self.state = BuildState()

    def add(self, payload: object, source: pb.EventSource = SOURCE) -> int:
        seq = self.state.head_seq + 1
        event = envelope(payload, source=source, timestamp_ms=T0 + seq, event_id=f"e{seq}")  # type: ignore[arg-type]
        problem = self.state.apply(seq, event)
        assert problem is None, problem
        return seq


def big_state(instances: int) -> tuple[Folder, list[str]]:
    """`instances` / 2 raws observed, each read by its daily; the raws' UUIDs in order."""
    folder = Folder()
    days = instances // 2
    raws = []
    connector = system("connector")
    for n in range(days):
        seen = pb.PartitionObserved(partition_ref=f"raw/n={n}", location=f"/raw/{n}", version="v1")
        raws.append(instance_uuid(folder.add(seen, connector), f"raw/n={n}"))
    for start in range(0, days, RUN):
        refs = [f"daily/n={n}" for n in range(start, min(days, start + RUN))]
        wanted = folder.add(pb.WantCreate(want_id=f"w{start}", partition_refs=refs), manual("bench"))
        uuids = [instance_uuid(wanted, ref) for ref in refs]
        run = f"r{start}"
        folder.add(pb.JobRunBuffer(job_run_id=run, job_label="daily", instance_uuids=uuids))
        outputs = [
            pb.OutputResult(instance_uuid=uuid, location=f"/daily/{start + i}", input_instance_uuids=[raws[start + i]])
            for i, uuid in enumerate(uuids)
        ]
        folder.add(pb.JobRunSuccess(job_run_id=run, outputs=outputs), from_job_run(run))
    settle_loaded_state()  # as a loaded LiveState does: the collector never scans the loaded records again
    return folder, raws


def reactions_after_a_batch(folder: Folder, changes: int, version: str = "v2") -> tuple[list[float], int]:
    """(ms of each step until the batch was all fired, firings in all) after `changes` raws got a new version."""
    days = len(folder.state.canonical) // 2
    reactor = Reactor(daily_graph())
    reactor.seen_head = folder.state.head_seq
    payloads = []
    for n in range(0, days, max(1, days // changes))[:changes]:
        seen = pb.PartitionObserved(partition_ref=f"raw/n={n}", location=f"/raw/{n}/{version}", version=version)
        seq = folder.add(seen, system("connector"))
        payloads.append((seq, envelope(seen, source=SOURCE, timestamp_ms=T0 + seq).SerializeToString()))
    step_ms, fired, now = [], 0, T0 + folder.state.head_seq
    while True:
        started = time.perf_counter()
        if payloads:  # what `Reactor.read` does with a page of the log
            for seq, payload in payloads:
                event = pb.Event()
                event.ParseFromString(payload)
                if event.WhichOneof("payload") in ("partition_observed", "job_run_success"):
                    reactor._fresh.append((seq, event))
                reactor.seen_head = seq
            payloads = []
        events = reactor.due(folder.state, now, _everything, SOURCE)
        step_ms.append((time.perf_counter() - started) * 1000)
        if not events:
            break
        for event in events:  # appended and folded by the loop: not timed
            seq = folder.state.head_seq + 1
            assert folder.state.apply(seq, event) is None
        fired += sum(event.HasField("reaction_fired") for event in events)  # the rest: the step's notes
        now += 1
    return step_ms[:-1], fired


def ticks_due(folder: Folder, schedules: int) -> tuple[float, float, int]:
    """(ms to make the ticks, ms to fold them, ticks) with `schedules` due at once."""
    graph = daily_graph(schedules, react=False)
    ticker = Ticker(graph, clock=lambda: T0)
    day = 86_400_000
    first = T0 // day * day
    for name in graph.schedules:
        ticker.first_seen_ms[name] = first - 1  # seen just before a time: each is due once, now
    started = time.perf_counter()
    events = ticker.due(folder.state, first + 1_000, _everything, SOURCE)
    made_ms = (time.perf_counter() - started) * 1000
    started = time.perf_counter()
    for event in events:
        seq = folder.state.head_seq + 1
        assert folder.state.apply(seq, event) is None
    folded_ms = (time.perf_counter() - started) * 1000
    return made_ms, folded_ms, len(events)


def idle_steps(graph: Graph, wants: int, steps: int) -> list[float]:
    """ms of each idle step of a real Orchestrator whose `wants` wait for source data that never comes."""
    with tempfile.TemporaryDirectory() as tmp, Database.open(f"sqlite:///{Path(tmp) / 'idle.db'}") as db:
        events = [
            envelope(pb.WantCreate(want_id=f"w{n}", partition_refs=[f"daily/n={n}"]), source=manual("bench"))
            for n in range(wants)
        ]
        for start in range(0, len(events), 5_000):
            db.log.append(events[start : start + 5_000])
        orchestrator = Orchestrator(db, graph, warehouse=tmp, spark=None, source_check_interval_s=3600)
        try:
            while orchestrator.step():
                pass
            step_ms = []
            for _ in range(steps):
                started = time.perf_counter()
                assert not orchestrator.step(), "an idle step did something"
                step_ms.append((time.perf_counter() - started) * 1000)
        finally:
            orchestrator.close()
    return step_ms


def _everything(key: str) -> bool:
    return True


def verdict(ok: bool) -> str:
    return "PASS" if ok else "MISS"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--instances", type=int, default=1_000_000)
    parser.add_argument("--changes", type=int, default=1_000)
    parser.add_argument("--schedules", type=int, default=100)
    parser.add_argument("--idle-wants", type=int, default=10_000)
    parser.add_argument("--steps", type=int, default=200)
    args = parser.parse_args()
    print(f"machine: {machine()}", flush=True)

    started = time.perf_counter()
    folder, _ = big_state(args.instances)
    count = len(folder.state.instances)
    print(
        f"state: {count:,} instances, {folder.state.head_seq:,} events folded in {time.perf_counter() - started:.0f} s"
    )

    step_ms, fired = reactions_after_a_batch(folder, args.changes)
    first = step_ms[0]
    print(
        f"(a) {args.changes:,} changed instances: {fired:,} reactions fired in {len(step_ms)} steps of at most "
        f"{MAX_PER_STEP}; ms per step {', '.join(f'{ms:.1f}' for ms in step_ms)}"
    )
    print(
        f"(a) reaction evaluation: {max(step_ms):.1f} ms, the worst step (target <= {TARGET_REACTION_MS:g} ms): "
        f"{verdict(max(step_ms) <= TARGET_REACTION_MS)} (first step {first:.1f} ms)"
    )

    made_ms, folded_ms, ticks = ticks_due(folder, args.schedules)
    total = made_ms + folded_ms
    print(
        f"(b) {ticks} schedules due: ticks made in {made_ms:.1f} ms, folded in {folded_ms:.1f} ms: "
        f"{total:.1f} ms (target <= {TARGET_TICKS_MS:g} ms): {verdict(total <= TARGET_TICKS_MS)}"
    )

    plain = idle_steps(daily_graph(react=False), args.idle_wants, args.steps)
    automated = idle_steps(daily_graph(args.schedules, react=True), args.idle_wants, args.steps)
    plain_ms, automated_ms = statistics.median(plain), statistics.median(automated)
    ratio = automated_ms / plain_ms
    print(
        f"(c) idle step, {args.idle_wants:,} waiting wants: {plain_ms:.3f} ms plain, {automated_ms:.3f} ms with "
        f"{args.schedules} schedules and reactions declared (medians of {args.steps})"
    )
    print(f"(c) idle ratio {ratio:.2f} (target <= {TARGET_IDLE_RATIO}): {verdict(ratio <= TARGET_IDLE_RATIO)}")


if __name__ == "__main__":
    main()
