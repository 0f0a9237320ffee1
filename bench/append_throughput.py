"""Append throughput of the event log: small WantCreate events in batches.

Target: >= 100,000 events/s on SQLite (the embedded default) with batches of 1,000.
The timer covers `EventLog.append` only (serialization, seq allocation, insert,
commit), not building the protobuf messages, which every caller does anyway.

    python bench/append_throughput.py [--db URL] [--events N] [--batch N]
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.log.store import EventLog

TARGET_EVENTS_PER_S = 100_000
FIRST_DAY = dt.date(2026, 1, 1)


def make_batch(start: int, size: int, now_ms: int) -> list[pb.Event]:
    """`size` realistic small events: one want for one daily partition each."""
    batch = []
    for n in range(start, start + size):
        event = pb.Event(event_id=f"bench-{n:012d}", timestamp_ms=now_ms)
        event.source.manual.user = "bench"
        day = FIRST_DAY + dt.timedelta(days=n % 3650)
        event.want_create.want_id = f"want-{n:012d}"
        event.want_create.partition_refs.append(f"agg/daily_clicks/date={day.isoformat()}")
        event.want_create.ttl_seconds = 86_400
        batch.append(event)
    return batch


def run(url: str, total: int, batch_size: int) -> float:
    """Append `total` events in batches; return the seconds spent inside `append`."""
    with EventLog.open(url, auto_upgrade=True) as log:
        first_head = log.head()
        now_ms = int(time.time() * 1000)
        spent = 0.0
        for start in range(0, total, batch_size):
            batch = make_batch(start, min(batch_size, total - start), now_ms)
            began = time.perf_counter()
            log.append(batch)
            spent += time.perf_counter() - began
        appended = log.head() - first_head
        if appended != total:
            raise SystemExit(f"head moved by {appended}, expected {total}: another writer?")
    return spent


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", help="database URL (default: a fresh temporary SQLite file)")
    parser.add_argument("--events", type=int, default=1_000_000, help="events to append (default 1,000,000)")
    parser.add_argument("--batch", type=int, default=1000, help="events per append (default 1000)")
    args = parser.parse_args(argv)
    if args.events < 1 or args.batch < 1:
        parser.error("--events and --batch must be >= 1")

    print(
        f"machine: {os.cpu_count()} CPUs, Python {platform.python_version()}, "
        f"SQLite {sqlite3.sqlite_version}, {platform.platform()}"
    )
    with tempfile.TemporaryDirectory(prefix="partbuild-bench-") as tmp:
        url = args.db or f"sqlite:///{Path(tmp) / 'append.db'}"
        print(f"database: {url}  batch: {args.batch}")
        seconds = run(url, args.events, args.batch)

    rate = args.events / seconds
    verdict = "PASS" if rate >= TARGET_EVENTS_PER_S else "FAIL"
    if not url.startswith("sqlite"):
        verdict = "n/a (the target is for SQLite)"
    print(
        f"append: {args.events} events in {seconds:.1f} s = {rate:,.0f} events/s "
        f"(target >= {TARGET_EVENTS_PER_S:,} events/s on SQLite): {verdict}"
    )
    return 1 if verdict == "FAIL" else 0


if __name__ == "__main__":
    sys.exit(main())
