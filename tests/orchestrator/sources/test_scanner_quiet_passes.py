"""Quiet idle passes of sources scanned in key ranges (`Discovery.shards` > 1) and of content-checked sources.

Real parts: a directory tree read by the `FilesystemConnector`, a SQLite event log and the real fold, scanners
stepped directly with a clock the test moves. Once a source's split into key ranges has settled, an idle pass
appends nothing, whether one worker scans every range or two workers share them; a new partition appends its
observation and the progress of the pass that found it, nothing else.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from partbuild.orchestrator.graph import SourceDataset
from partbuild.orchestrator.sources import content
from partbuild.orchestrator.sources.discovery import filesystem_discovery
from partbuild.orchestrator.sources.scanner import SourceScanner
from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.fold.build_state import BuildState
from partbuild.state.log.live import LiveState
from partbuild.state.log.store import EventLog, parse_event

from scankit import drain, scanner

RAW = "raw/clicks/date={date:date}"
KEYS = "date={date:date}"
MINUTE_MS = 60_000


@pytest.fixture
def log(tmp_path: Path) -> Iterator[EventLog]:
    with EventLog.open(f"sqlite:///{tmp_path / 'partbuild.db'}", auto_upgrade=True) as opened:
        yield opened


@pytest.fixture
def root(tmp_path: Path) -> Path:
    tree = tmp_path / "raw"
    tree.mkdir()
    return tree


def write_day(root: Path, day: int, size: int = 100) -> None:
    """A complete Spark-like partition directory of January `day`: three part files and `_SUCCESS`."""
    directory = root / f"date=2026-01-{day:02d}"
    directory.mkdir()
    for index in range(3):
        (directory / f"part-{index}").write_bytes(b"x" * size)
    (directory / "_SUCCESS").write_bytes(b"")


def source(root: Path, **options: Any) -> SourceDataset:
    options = {"page_items": 10, "rescan_every_s": 60, **options}
    return SourceDataset("raw", RAW, discovery=filesystem_discovery(root, KEYS, **options))


def appended(log: EventLog, after: int) -> list[pb.Event]:
    return [parse_event(row.payload) for row in log.read(after, 10_000)]


class Clock:
    """The scanners' clock: a pass is due when the test moves it a minute on."""

    def __init__(self) -> None:
        self.now = 1_800_000_000_000

    def __call__(self) -> int:
        return self.now


def idle_passes(workers: list[tuple[SourceScanner, LiveState]], clock: Clock, passes: int) -> None:
    """`passes` passes of every worker, a minute apart, each ended by the worker itself (recorded or quiet)."""
    for _ in range(passes):
        clock.now += MINUTE_MS
        goal = [scan._scans[0].passes_ended + 1 for scan, _ in workers]
        step_until(
            workers,
            lambda goal=goal: all(s._scans[0].passes_ended >= n for (s, _), n in zip(workers, goal, strict=True)),
        )


def step_until(workers: list[tuple[SourceScanner, LiveState]], done: Callable[[], bool], limit: int = 500) -> None:
    """Step every worker (a slice of what is due by the clock, or nothing) until `done()`."""
    for _ in range(limit):
        if done():
            return
        for scan, live in workers:
            live.catch_up()
            scan._scans[0].next_due = 0.0  # no waiting in real time: due by the clock
            scan.step()
    raise AssertionError(f"not done in {limit} steps")


def settle(log: EventLog, workers: list[tuple[SourceScanner, LiveState]], clock: Clock) -> int:
    """Passes until one appends nothing (the split has settled); the log's head then."""
    for _ in range(8):
        head = log.head()
        idle_passes(workers, clock, 1)
        if log.head() == head:
            return head
    raise AssertionError("the split into key ranges never settled")


def test_idle_passes_over_key_ranges_append_nothing_and_a_new_partition_only_its_observation(
    log: EventLog, root: Path
) -> None:
    for day in range(1, 26):
        if day != 14:
            write_day(root, day)
    clock = Clock()
    scan, live = scanner(log, source(root, shards=4), clock=clock)
    head = settle(log, [(scan, live)], clock)
    assert len(live.state.sources["raw"].last_pass_ranges) == 4  # split in four, in the log
    before = scan._scans[0].passes_ended
    idle_passes([(scan, live)], clock, 10)
    assert log.head() == head and scan._scans[0].passes_ended == before + 10  # ten passes, nothing appended

    write_day(root, 14)  # in a key range after the first: the pass begins in the log at range 0
    idle_passes([(scan, live)], clock, 1)
    found = appended(log, head)
    begin, first = found[0].source_scan_progress, found[1].source_scan_progress
    assert (begin.shard, begin.last_key, len(begin.split_keys)) == (0, b"", 3)  # range 0 not listed yet
    assert first.shard > 0 and first.pass_number == begin.pass_number  # the range that found it
    kinds = [event.WhichOneof("payload") for event in found]
    assert set(kinds) == {"source_scan_progress", "partition_observed"}
    assert [e.partition_observed.partition_ref for e in found if e.HasField("partition_observed")] == [
        "raw/clicks/date=2026-01-14"
    ]
    slices = [event.source_scan_progress for event in found if event.HasField("source_scan_progress")]
    assert {each.shard for each in slices if each.done} == {0, 1, 2, 3}  # every range listed, recorded
    assert live.state.sources["raw"].done and live.state.rejections == []
    head = settle(log, [(scan, live)], clock)  # (the split may move once more, to the new bytes)
    idle_passes([(scan, live)], clock, 5)
    assert log.head() == head


def test_workers_sharing_the_key_ranges_are_quiet_too_and_a_change_is_taken_up_by_each_for_its_ranges(
    log: EventLog, root: Path
) -> None:
    for day in range(1, 26):
        if day != 20:
            write_day(root, day)
    clock = Clock()

    def owner(parity: int) -> Callable[[BuildState, str], bool]:
        return lambda state, key: int(key.rsplit("/", 1)[1]) % 2 == parity

    solo = scanner(log, source(root, shards=2), clock=clock)
    settle(log, [solo], clock)  # one worker splits the source in two
    workers = [scanner(log, source(root, shards=2), owns=owner(n), clock=clock) for n in (0, 1)]
    clock.now += 10 * MINUTE_MS
    head = log.head()
    idle_passes(workers, clock, 5)
    assert log.head() == head  # each worker scans its own range, quietly

    write_day(root, 20)  # in range 1: the odd worker begins the pass, the even one takes up range 0
    live = workers[0][1]
    passes = live.state.sources["raw"].pass_number
    clock.now += MINUTE_MS
    step_until(workers, lambda: live.state.sources["raw"].pass_number > passes and live.state.sources["raw"].done)
    found = appended(log, head)
    observed = [e.partition_observed.partition_ref for e in found if e.HasField("partition_observed")]
    assert observed == ["raw/clicks/date=2026-01-20"]
    slices = [event.source_scan_progress for event in found if event.HasField("source_scan_progress")]
    assert (slices[0].shard, slices[0].last_key, slices[1].shard) == (0, b"", 1)  # begun by the odd worker
    assert {each.shard for each in slices if each.done} == {0, 1}  # range 0 then listed by the even one
    assert all(each.state.rejections == [] for _, each in workers)


def test_a_digest_goes_on_over_quiet_passes_each_with_a_fresh_budget(
    log: EventLog, root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A quiet pass repeats the pass number of the next recorded one: its reading budget is its own all the same."""
    monkeypatch.setattr(content, "CHUNK_BYTES", 64)  # a day of three 100-byte files: six chunks
    write_day(root, 1)
    clock = Clock()
    scan, live = scanner(log, source(root, verify_bytes_per_pass=1), clock=clock)
    drain(scan, live)  # observed, and its first chunk read
    check = scan.content_check("raw")
    assert check is not None
    head, reads = log.head(), [check.bytes_read]
    for _ in range(5):
        idle_passes([(scan, live)], clock, 1)
        reads.append(check.bytes_read)
    assert reads == [64, 100, 164, 200, 264, 300] and log.head() == head
