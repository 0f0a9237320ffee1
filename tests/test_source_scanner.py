"""Discovering source partitions by scanning a connector: grouping, cursors in the log, versions, re-wants.

Real parts: a real directory tree read by the `FilesystemConnector`, a real event log
(SQLite, and PostgreSQL where the backend matters), the real fold, and a real process
killed with SIGKILL in the middle of a scan. `SourceScanner.step()` is driven directly
(one slice of each due source), so the tests decide when slices happen.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from partbuild.orchestrator.connectors.errors import EnumerateError
from partbuild.orchestrator.connectors.in_memory import InMemoryConnector, MemoryItem
from partbuild.orchestrator.connectors.items import Page
from partbuild.orchestrator.connectors.paging import Budgets, Cursor, KeyRange
from partbuild.orchestrator.connectors.toxic import ItemKey
from partbuild.orchestrator.context import JobContext
from partbuild.orchestrator.graph import Graph, GraphError, Job, PartitionPattern, SourceDataset
from partbuild.orchestrator.loop import Orchestrator
from partbuild.orchestrator.sources.discovery import Discovery, filesystem_discovery
from partbuild.orchestrator.sources.partitions import PartitionGrouper
from partbuild.orchestrator.sources.scanner import SourceScanner
from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.events import envelope, from_job_run, manual
from partbuild.state.ids import instance_uuid
from partbuild.state.live import LiveState
from partbuild.state.model import InstanceState as I
from partbuild.state.store import EventLog, parse_event

RAW = "raw/clicks/date={date:date}"
KEYS = "date={date:date}"


def write_day(root: Path, day: int, rows: bytes = b"rows", *, marker: bool = True, files: int = 2) -> None:
    """A Spark-like partition directory: part files and, when complete, `_SUCCESS`."""
    directory = root / f"date=2026-01-{day:02d}"
    directory.mkdir(parents=True, exist_ok=True)
    for n in range(files):
        (directory / f"part-{n:05d}.parquet").write_bytes(rows * (n + 1))
    if marker:
        (directory / "_SUCCESS").write_bytes(b"")


def raw_ref(day: int) -> str:
    return f"raw/clicks/date=2026-01-{day:02d}"


@pytest.fixture
def root(tmp_path: Path) -> Path:
    tree = tmp_path / "raw"
    tree.mkdir()
    return tree


@pytest.fixture
def log(db_url: str) -> Iterator[EventLog]:
    with EventLog.open(db_url, auto_upgrade=True) as opened:
        yield opened


def source(root: Path, **options: Any) -> SourceDataset:
    options.setdefault("page_items", 3)
    return SourceDataset("raw", RAW, discovery=filesystem_discovery(root, KEYS, **options))


def scanner(log: EventLog, *sources: SourceDataset, **options: Any) -> tuple[SourceScanner, LiveState]:
    live = LiveState(log)
    options.setdefault("checkpoint_every_s", 0.0)
    return SourceScanner(log, live, list(sources), **options), live


def drain(scan: SourceScanner, live: LiveState, passes: int = 1, limit: int = 500) -> None:
    """Step until `passes` more passes of every source are done."""
    live.catch_up()
    goal = {name: record.passes_done + passes for name, record in live.state.sources.items()}
    for _ in range(limit):
        scan.step()
        records = live.state.sources
        if records and all(records[name].passes_done >= goal.get(name, passes) for name in records):
            return
    raise AssertionError(f"no pass finished in {limit} slices: {live.state.sources}")


def events(log: EventLog, kind: str) -> list[pb.Event]:
    return [parse_event(row.payload) for row in log.read(0, 10_000) if row.event_type == kind]


def new_pass(log: EventLog, live: LiveState) -> None:
    """What `partbuild sources scan raw` appends: the next pass, from the start, at once."""
    live.catch_up()
    record = live.state.sources["raw"]
    log.append(
        [envelope(pb.SourceScanProgress(source="raw", pass_number=record.pass_number + 1), source=manual("ann"))]
    )


# ----------------------------------------------------------------- grouping items into partitions


def memory_items(*keys: str, data: bytes = b"x") -> list[Any]:
    connector = InMemoryConnector([MemoryItem(ItemKey(key.encode()), data) for key in keys])
    page = connector.fill_page(KeyRange.everything(), Cursor.initial(), Budgets(1000, 1 << 40))
    assert page is not None
    return list(page.items)


def test_items_group_into_partition_directories_with_marker_version_and_settled_key() -> None:
    grouper = PartitionGrouper(PartitionPattern(KEYS), PartitionPattern(RAW), "_SUCCESS")
    items = memory_items(
        "README",  # outside every partition
        "date=2026-01-01/_SUCCESS",
        "date=2026-01-01/part-0",
        "date=2026-01-02/part-0",  # no marker: incomplete
        "date=2026-01-03/sub/part-0",  # deeper files belong to their partition
        "date=2026-01-03/sub/part-1",
        "date=2026-13-01/part-0",  # not a date: outside
    )  # (listed in key order)
    closed = grouper.feed(items[:4])
    assert [(p.ref, p.items, p.complete) for p in closed] == [(raw_ref(1), 2, True)]
    assert grouper.settled_key == b"date=2026-01-01/part-0"  # the open partition (day 2) is not settled yet
    closed = grouper.feed(items[4:]) + grouper.finish()
    assert [(p.ref, p.items, p.complete) for p in closed] == [(raw_ref(2), 1, False), (raw_ref(3), 2, False)]
    assert grouper.settled_key == b"date=2026-13-01/part-0" and grouper.unmatched == 2
    assert closed[1].directory == "date=2026-01-03" and closed[1].bytes == 2 and closed[1].strong


def test_a_partition_version_changes_with_any_file_and_only_then() -> None:
    def version_of(*keys: str, data: bytes = b"x") -> str:
        grouper = PartitionGrouper(PartitionPattern(KEYS), PartitionPattern(RAW), None)
        grouper.feed(memory_items(*keys, data=data))
        (found,) = grouper.finish()
        return found.version

    base = version_of("date=2026-01-01/a", "date=2026-01-01/b")
    assert base == version_of("date=2026-01-01/a", "date=2026-01-01/b")
    assert base != version_of("date=2026-01-01/a", "date=2026-01-01/b", data=b"y")  # content
    assert base != version_of("date=2026-01-01/a", "date=2026-01-01/c")  # a renamed file
    assert base != version_of("date=2026-01-01/a")  # a file fewer


def test_a_key_pattern_must_have_the_source_fields() -> None:
    with pytest.raises(GraphError, match="fields"):
        SourceDataset("raw", RAW, discovery=Discovery(InMemoryConnector([]), "/data", keys="day={day:date}"))
    with pytest.raises(GraphError, match="same types"):
        SourceDataset("raw", RAW, discovery=Discovery(InMemoryConnector([]), "/data", keys="date={date:int}"))
    with pytest.raises(GraphError, match="locate function or a discovery"):
        SourceDataset("raw", RAW)
    with pytest.raises(ValueError, match="complete_marker"):
        Discovery(InMemoryConnector([]), "/data", complete_marker="a/b")
    with pytest.raises(ValueError, match="page_items"):
        Discovery(InMemoryConnector([]), "/data", page_items="10")  # type: ignore[arg-type]


# ----------------------------------------------------------------- scanning into the log


def test_a_pass_observes_every_complete_partition_once_with_location_size_and_version(
    log: EventLog, root: Path
) -> None:
    for day in (1, 2, 4):
        write_day(root, day)
    write_day(root, 3, marker=False)  # being written: not observed
    scan, live = scanner(log, source(root))
    drain(scan, live)
    state = live.state
    observed = {instance.ref: instance for instance in state.instances.values()}
    assert sorted(observed) == [raw_ref(1), raw_ref(2), raw_ref(4)]
    day1 = observed[raw_ref(1)]
    assert day1.state == I.LIVE and day1.location == str(root / "date=2026-01-01")
    assert day1.byte_count == len(b"rows") * 3 and day1.metadata == {"files": "3"}
    assert day1.version is not None and day1.version[1] is False  # files: weak versions (size, mtime)
    record = state.sources["raw"]
    assert (record.passes_done, record.last_pass_items, record.last_pass_partitions) == (1, 11, 3)
    assert state.rejections == []

    # The next pass sees day 3 complete and changes nothing else: unchanged partitions are not appended.
    write_day(root, 3)
    new_pass(log, live)
    drain(scan, live)
    assert [e.partition_observed.partition_ref for e in events(log, "partition_observed")] == [
        raw_ref(1),
        raw_ref(2),
        raw_ref(4),
        raw_ref(3),
    ]
    assert live.state.rejections == []


def test_a_rewritten_partition_is_a_new_instance_that_taints_and_re_wants_what_a_person_wanted(
    log: EventLog, root: Path
) -> None:
    for day in (1, 2):
        write_day(root, day)
    scan, live = scanner(log, source(root, rewant_tainted=True))
    drain(scan, live)
    old_raw = {day: live.state.canonical[raw_ref(day)] for day in (1, 2)}
    # daily/1 wanted by a person and built from raw/1; daily/2 built from raw/2; weekly from both.
    built = {}
    for name, refs, inputs in (
        ("d1", ["daily/date=2026-01-01"], [old_raw[1]]),
        ("d2", ["daily/date=2026-01-02"], [old_raw[2]]),
    ):
        seq = log.append([envelope(pb.WantCreate(want_id=name, partition_refs=refs), source=manual("ann"))]).first_seq
        uuid = instance_uuid(seq, refs[0])
        log.append([envelope(pb.JobRunBuffer(job_run_id=f"run-{name}", job_label="daily", instance_uuids=[uuid]))])
        success = pb.JobRunSuccess(job_run_id=f"run-{name}", input_instance_uuids=inputs)
        log.append([envelope(success, source=from_job_run(f"run-{name}"))])
        built[name] = uuid
    live.catch_up()
    assert all(live.state.instances[uuid].state == I.LIVE for uuid in built.values())

    os.utime(root / "date=2026-01-01" / "part-00000.parquet", ns=(1, 1))  # rewritten: a new mtime
    new_pass(log, live)
    drain(scan, live)
    state = live.state
    assert state.canonical[raw_ref(1)] != old_raw[1] and state.canonical[raw_ref(2)] == old_raw[2]
    assert state.instances[built["d1"]].state == I.TAINTED and state.instances[built["d2"]].state == I.LIVE
    (rewant,) = events(log, "want_create")[2:]
    assert list(rewant.want_create.partition_refs) == ["daily/date=2026-01-01"]
    assert rewant.source.system.component == "source-scanner" and "late data" in rewant.want_create.comment
    assert state.wants[rewant.want_create.want_id].refs == ("daily/date=2026-01-01",)
    # Observed again while its re-want is active: no second re-want.
    os.utime(root / "date=2026-01-01" / "part-00000.parquet", ns=(2, 2))
    new_pass(log, live)
    drain(scan, live)
    assert len(events(log, "want_create")) == 3 and live.state.rejections == []


def test_a_restarted_scanner_resumes_from_the_recorded_cursor(log: EventLog, root: Path) -> None:
    for day in range(1, 9):
        write_day(root, day)
    first, live = scanner(log, source(root))
    for _ in range(4):  # 4 pages of 3 items: part of the way
        first.step()
    live.catch_up()
    cursor = live.state.sources["raw"].last_key
    assert cursor.startswith(b"date=2026-01-0") and not live.state.sources["raw"].done
    # A new process: its own state, replayed from the log.
    second, second_live = scanner(log, source(root))
    drain(second, second_live)
    progress = [e.source_scan_progress for e in events(log, "source_scan_progress")]
    assert progress[4].after_key == cursor  # the second scanner began where the first stopped
    refs = [e.partition_observed.partition_ref for e in events(log, "partition_observed")]
    assert sorted(refs) == [raw_ref(day) for day in range(1, 9)]  # each exactly once
    assert second_live.state.rejections == []


def test_two_scanners_of_one_source_never_observe_a_partition_twice(log: EventLog, root: Path) -> None:
    for day in range(1, 11):
        write_day(root, day)
    a, live_a = scanner(log, source(root))
    b, _ = scanner(log, source(root))
    for _ in range(200):
        a.step()
        b.step()
        live_a.catch_up()
        if live_a.state.sources.get("raw") is not None and live_a.state.sources["raw"].done:
            break
    refs = [e.partition_observed.partition_ref for e in events(log, "partition_observed")]
    assert Counter(refs) == Counter(raw_ref(day) for day in range(1, 11))
    # The head guard makes a lost race a redo on the newer state, not a rejected event.
    assert live_a.state.rejections == []


class FlakyConnector(InMemoryConnector):
    """Fails its second listing call: throttled with a Retry-After, then a permanent error, then recovers."""

    def __init__(self, items: list[MemoryItem], failures: list[EnumerateError]) -> None:
        super().__init__(items)
        self.calls = 0
        self.failures = failures

    def fill_page(self, shard: KeyRange, cursor: Cursor, budgets: Budgets) -> Page | None:
        self.calls += 1
        if self.calls >= 2 and self.failures:
            raise self.failures.pop(0)
        return super().fill_page(shard, cursor, budgets)


def test_connector_errors_are_recorded_and_the_scan_goes_on_after_them(
    log: EventLog, caplog: pytest.LogCaptureFixture
) -> None:
    secret = "date=2026-01-01/api_key=hunter2"
    items = [
        MemoryItem(ItemKey(f"date=2026-01-0{day}/{name}".encode()), b"d")
        for day in (1, 2)
        for name in ("p", "_SUCCESS")
    ]
    items.append(MemoryItem(ItemKey(secret.encode()), b"s"))
    failures = [
        EnumerateError.rate_limited("SlowDown (503)", retry_after=0.0),
        EnumerateError.permanent("NoSuchBucket (404)"),
    ]
    connector = FlakyConnector(items, failures)
    discovered = SourceDataset("raw", RAW, discovery=Discovery(connector, "s3a://bucket/raw", KEYS, page_items=2))
    scan, live = scanner(log, discovered)
    caplog.set_level(logging.DEBUG)
    for _ in range(50):
        scan.step()
        for pending in scan._scans:  # no waiting for the backoff in a test
            pending.next_due = 0.0
        live.catch_up()
        if live.state.sources["raw"].done:
            break
    record = live.state.sources["raw"]
    assert record.done and record.errors_total == 2
    assert (record.last_error, record.last_error_retryable) == ("NoSuchBucket (404)", False)
    errors = [e.source_scan_progress for e in events(log, "source_scan_progress") if e.source_scan_progress.error]
    assert [(e.error, e.error_retryable) for e in errors] == [("SlowDown (503)", True), ("NoSuchBucket (404)", False)]
    assert sorted(e.partition_observed.partition_ref for e in events(log, "partition_observed")) == [
        raw_ref(1),
        raw_ref(2),
    ]
    assert live.state.instances[live.state.canonical[raw_ref(1)]].location == "s3a://bucket/raw/date=2026-01-01"
    assert "hunter2" not in caplog.text and "hunter2" not in repr(record)


def test_a_worker_scans_only_the_sources_its_scope_owns(log: EventLog, root: Path) -> None:
    write_day(root, 1)
    scan, _ = scanner(log, source(root), owns=lambda state, key: False)
    for _ in range(5):
        scan.step()
    assert list(log.read(0, 10)) == []


def test_a_scan_starts_over_after_its_rescan_interval(log: EventLog, root: Path) -> None:
    write_day(root, 1)
    now = [1_800_000_000_000]
    scan, live = scanner(log, source(root, rescan_every_s=60), clock=lambda: now[0])
    drain(scan, live)
    for _ in range(3):
        scan.step()
        for pending in scan._scans:
            pending.next_due = 0.0
    assert live.state.sources["raw"].pass_number == 1  # not due yet
    now[0] += 60_000
    scan.step()
    live.catch_up()
    assert live.state.sources["raw"].pass_number == 2


# ----------------------------------------------------------------- in the orchestrator, and killed mid-scan


def test_the_orchestrator_builds_from_partitions_its_scanner_discovers(
    log: EventLog, root: Path, tmp_path: Path
) -> None:
    write_day(root, 1)
    built: list[str] = []

    def run_daily(ctx: JobContext) -> None:
        for target in ctx.outputs:
            (location,) = ctx.inputs([raw_ref(1)])
            built.append(location)
            Path(target.location).mkdir(parents=True)

    graph = Graph(
        jobs=[Job("daily", ["daily/date={date:date}"], run=run_daily, inputs=lambda p: [raw_ref(1)])],
        sources=[source(root, rescan_every_s=0.2)],
    )
    orchestrator = Orchestrator(log, graph, warehouse=str(tmp_path / "w"), poll_interval_s=0.01)
    try:
        log.append(
            [envelope(pb.WantCreate(want_id="w", partition_refs=["daily/date=2026-01-01"]), source=manual("ann"))]
        )
        assert orchestrator.run_until_idle(timeout_s=30)
    finally:
        orchestrator.close()
    assert built == [str(root / "date=2026-01-01")]


SCAN_SCRIPT = textwrap.dedent(
    """
    import sys, time
    from partbuild.orchestrator.graph import SourceDataset
    from partbuild.orchestrator.sources.discovery import filesystem_discovery
    from partbuild.orchestrator.sources.scanner import SourceScanner
    from partbuild.state.live import LiveState
    from partbuild.state.store import EventLog

    url, root = sys.argv[1], sys.argv[2]
    source = SourceDataset("raw", "raw/n={n:int}", discovery=filesystem_discovery(root, "n={n:int}", page_items=7))
    with EventLog.open(url) as log:
        scanner = SourceScanner(log, LiveState(log), [source], checkpoint_every_s=0.0)
        while True:
            scanner.step()
            time.sleep(0.002)
    """
)


def test_a_scan_killed_mid_pass_resumes_without_repeating_or_skipping_a_partition(
    db_url: str, log: EventLog, tmp_path: Path
) -> None:
    root = tmp_path / "tree"
    for n in range(300):
        directory = root / f"n={n}"
        directory.mkdir(parents=True)
        for name in ("part-0", "part-1", "_SUCCESS"):
            (directory / name).write_bytes(b"x")
    process = subprocess.Popen([sys.executable, "-c", SCAN_SCRIPT, db_url, str(root)])
    try:
        deadline = time.monotonic() + 60
        while len(events(log, "partition_observed")) < 40:
            assert time.monotonic() < deadline and process.poll() is None, "the scanner made no progress"
            time.sleep(0.05)
        process.send_signal(signal.SIGKILL)
        process.wait(10)
    finally:
        process.kill()
    before = len(events(log, "partition_observed"))
    assert before < 300, "the scan finished before the kill: make the tree bigger"
    source_set = SourceDataset("raw", "raw/n={n:int}", discovery=filesystem_discovery(root, "n={n:int}", page_items=7))
    scan, live = scanner(log, source_set)
    drain(scan, live)
    refs = Counter(e.partition_observed.partition_ref for e in events(log, "partition_observed"))
    assert refs == Counter(f"raw/n={n}" for n in range(300))
    assert live.state.rejections == [] and live.state.sources["raw"].passes_done == 1
