"""Concurrent writer processes and a tailing reader: the reader sees every event, gaplessly, in order.

This is the test of the commit-order guarantee in `EventLog.append`: with seqs
allocated before commit, the reader would occasionally step over a seq that
commits later and the "no gaps" assertion would fail.
"""

from __future__ import annotations

import multiprocessing
import queue
import random
import threading
import time
from collections import Counter
from multiprocessing.queues import Queue
from multiprocessing.synchronize import Event as MpEvent

import pytest

from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.log.store import EventLog

pytestmark = pytest.mark.process

WRITERS = 4
BATCHES_PER_WRITER = 50
MAX_BATCH = 20
JOIN_TIMEOUT_S = 60


def _writer(url: str, writer: int, start: MpEvent, results: Queue) -> None:
    """Child process: append random-sized batches; report (event_ids, first_seq, last_seq) per batch."""
    rng = random.Random(writer)
    batches: list[tuple[list[str], int, int]] = []
    with EventLog.open(url, auto_upgrade=False) as log:
        start.wait()
        for batch in range(BATCHES_PER_WRITER):
            events = []
            for i in range(rng.randint(1, MAX_BATCH)):
                event = pb.Event(event_id=f"w{writer}-b{batch}-e{i}")
                event.want_create.want_id = f"want-{writer}-{batch}-{i}"
                event.want_create.partition_refs.append(f"agg/daily_clicks/date=2026-01-{i + 1:02d}")
                events.append(event)
            result = log.append(events)
            batches.append(([e.event_id for e in events], result.first_seq, result.last_seq))
    results.put((writer, batches))


def _tail(log: EventLog, writers_done: threading.Event, seen: list[tuple[int, str]], reads: list[int]) -> None:
    """Tail the log with small pages until the writers are done and the head is reached."""
    rng = random.Random(0)
    last = 0
    while True:
        done = writers_done.is_set()  # read before the page, so the final pass sees everything
        page = log.read(after_seq=last, limit=rng.randint(1, 16))
        reads.append(len(page))
        for stored in page:
            seen.append((stored.seq, stored.event_id))
        if page:
            last = page[-1].seq
        elif done:
            return


def _collect(results: Queue, procs: list[multiprocessing.process.BaseProcess]) -> dict[int, list]:
    """Each writer's report; fails fast when a writer process dies instead of reporting."""
    reported: dict[int, list] = {}
    deadline = time.monotonic() + JOIN_TIMEOUT_S
    while len(reported) < len(procs):
        assert time.monotonic() < deadline, "writers did not finish in time"
        try:
            writer, batches = results.get(timeout=0.2)
        except queue.Empty:
            crashed = [p.exitcode for p in procs if p.exitcode not in (None, 0)]
            assert not crashed, f"writer process failed with exit codes {crashed}"
            continue
        reported[writer] = batches
    return reported


def test_concurrent_writers_and_tailing_reader(db_url: str) -> None:
    with EventLog.open(db_url, auto_upgrade=True) as log:
        ctx = multiprocessing.get_context("spawn")
        start = ctx.Event()
        results: Queue = ctx.Queue()
        procs = [ctx.Process(target=_writer, args=(db_url, w, start, results)) for w in range(WRITERS)]
        writers_done = threading.Event()
        seen: list[tuple[int, str]] = []
        reads: list[int] = []
        reader = threading.Thread(target=_tail, args=(log, writers_done, seen, reads))
        try:
            for proc in procs:
                proc.start()
            reader.start()
            start.set()
            reported = _collect(results, procs)
            for proc in procs:
                proc.join(timeout=JOIN_TIMEOUT_S)
                assert proc.exitcode == 0
        finally:
            writers_done.set()
            for proc in procs:
                if proc.is_alive():
                    proc.terminate()
                    proc.join()
        reader.join(timeout=JOIN_TIMEOUT_S)
        assert not reader.is_alive()

        head = log.head()
        written = [event_id for batches in reported.values() for ids, _, _ in batches for event_id in ids]
        assert head == len(written)

        # The tailing reader saw exactly 1..head, in order: no gap, no duplicate, nothing skipped.
        assert [seq for seq, _ in seen] == list(range(1, head + 1))
        assert Counter(event_id for _, event_id in seen) == Counter(written)
        assert sum(1 for n in reads if n) > 1, "the reader should have tailed in several pages"

        # The full log read afterwards agrees, and every batch sits at the seqs append reported.
        full = [stored for after in range(0, head, 10_000) for stored in log.read(after, 10_000)]
        assert [(stored.seq, stored.event_id) for stored in full] == seen
        by_seq = {stored.seq: stored.event_id for stored in full}
        for batches in reported.values():
            for ids, first_seq, last_seq in batches:
                assert [by_seq[seq] for seq in range(first_seq, last_seq + 1)] == ids
