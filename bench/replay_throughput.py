"""Replay throughput of a 1,000,000-event log from SQLite.

Target: >= 200,000 events/s on one core for the full replay (read + parse + fold).
Measured in the same run, so the ratios hold on a noisy machine: reading rows
alone, reading and parsing, and the full replay. Two log shapes: the W1 history
(every job run sends one heartbeat, so events are dense with partition
transitions) and the same history with 10 heartbeats per run (long-running jobs).

    .venv/bin/python bench/replay_throughput.py [--events 1000000] [--heartbeats 1]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from _common import machine, w1_history

from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.fold.build_state import BuildState
from partbuild.state.log.digest import state_digest
from partbuild.state.log.replay import checkpoint, load_state, replay_into
from partbuild.state.log.snapshot import decode_state, encode_state
from partbuild.state.log.store import EventLog

TARGET_EVENTS_PER_S = 200_000
BATCH = 5_000


def fill(log: EventLog, events: int, heartbeats: int) -> float:
    """Append the history in batches; returns seconds spent in append only."""
    spent = 0.0
    batch: list[pb.Event] = []
    for event in w1_history(events, heartbeats):
        batch.append(event)
        if len(batch) == BATCH:
            started = time.perf_counter()
            log.append(batch, expected_head=log.head())
            spent += time.perf_counter() - started
            batch = []
    if batch:
        started = time.perf_counter()
        log.append(batch)
        spent += time.perf_counter() - started
    return spent


def measure(log: EventLog) -> dict[str, float]:
    timings: dict[str, float] = {}
    started = time.perf_counter()
    rows = sum(1 for _ in log.iter_payloads())
    timings["read"] = time.perf_counter() - started

    scratch = pb.Event()
    started = time.perf_counter()
    for _, payload in log.iter_payloads():
        scratch.ParseFromString(payload)
        scratch.WhichOneof("payload")
    timings["read+parse"] = time.perf_counter() - started

    state = BuildState()
    started = time.perf_counter()
    replayed = replay_into(state, log)
    timings["replay"] = time.perf_counter() - started
    assert replayed == rows == log.head(), (replayed, rows)
    assert not state.rejections, state.rejections[:3]

    started = time.perf_counter()
    state_digest(state)
    timings["digest"] = time.perf_counter() - started
    started = time.perf_counter()
    blob = encode_state(state)
    timings["snapshot encode"] = time.perf_counter() - started
    started = time.perf_counter()
    decode_state(blob)
    timings["snapshot decode"] = time.perf_counter() - started
    timings["instances"] = len(state.instances)
    timings["snapshot MB"] = len(blob) / 1e6
    del blob

    # What a restart costs after `up`/`serve`/`run` checkpointed: newest snapshot from the store + empty tail.
    snapshots = log.snapshots
    started = time.perf_counter()
    assert checkpoint(state, snapshots, every_events=1) == state.head_seq
    timings["checkpoint"] = time.perf_counter() - started
    del state
    started = time.perf_counter()
    loaded, report = load_state(log, snapshots)
    timings["start from snapshot"] = time.perf_counter() - started
    assert report.snapshot_seq == loaded.head_seq == rows and report.replayed == 0
    return timings


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--heartbeats", type=int, default=1, help="heartbeats per job run in the history")
    parser.add_argument("--db", help="SQLite URL to use (default: a temporary file)")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        url = args.db or f"sqlite:///{Path(tmp) / 'bench.db'}"
        with EventLog.open(url) as log:
            if log.head() == 0:
                append_s = fill(log, args.events, args.heartbeats)
                print(f"append: {log.head():,} events in {append_s:.1f} s = {log.head() / append_s:,.0f} events/s")
            n = log.head()
            t = measure(log)

    print(f"machine: {machine()}")
    print(
        f"log: {n:,} events, W1 history with {args.heartbeats} heartbeat(s) per job run, "
        f"{int(t['instances']):,} partition instances"
    )
    for name in ("read", "read+parse", "replay"):
        print(f"  {name:<11} {t[name]:6.2f} s = {n / t[name]:>10,.0f} events/s")
    print(
        f"  fold alone  {t['replay'] - t['read+parse']:6.2f} s "
        f"(replay is {t['replay'] / t['read+parse']:.1f}x read+parse)"
    )
    print(f"  instances   {t['instances'] / t['replay']:>10,.0f} partition instances built per second of replay")
    print(
        f"  digest {t['digest']:.2f} s; snapshot {t['snapshot MB']:.0f} MB, "
        f"encode {t['snapshot encode']:.2f} s, decode {t['snapshot decode']:.2f} s"
    )
    print(
        f"  restart: checkpoint {t['checkpoint']:.2f} s, then start from it {t['start from snapshot']:.2f} s "
        f"instead of replaying {t['replay']:.2f} s ({t['replay'] / t['start from snapshot']:.1f}x faster)"
    )
    rate = n / t["replay"]
    verdict = "PASS" if rate >= TARGET_EVENTS_PER_S else "MISS"
    print(
        f"replay: {n:,} events in {t['replay']:.1f} s = {rate:,.0f} events/s "
        f"(target >= {TARGET_EVENTS_PER_S:,} events/s on one core): {verdict}"
    )


if __name__ == "__main__":
    main()
