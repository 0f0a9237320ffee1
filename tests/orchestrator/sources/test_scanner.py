"""Discovering source partitions by scanning a connector: partitions from items, cursors in the log, versions, re-wants.

Real parts: a real directory tree read by the `FilesystemConnector`, a real event log
(SQLite, and PostgreSQL where the backend matters) and the real fold. `SourceScanner.step()`
is driven directly (one slice of each due source), so the tests decide when slices happen.
A scanning process killed in the middle of a scan: tests/e2e/test_scanner_processes.py.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable, Iterator
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
from partbuild.orchestrator.sources.key_ranges import next_split_keys
from partbuild.orchestrator.sources.partitions import PartitionAssembler
from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.database import Database
from partbuild.state.fold.build_state import BuildState
from partbuild.state.fold.records import InstanceState as I
from partbuild.state.fold.records import ScanRange
from partbuild.state.log.events import envelope, from_job_run, manual
from partbuild.state.log.live import LiveState
from partbuild.state.log.store import EventLog
from partbuild.state.rules.ids import instance_uuid

from scankit import drain, events, scanner

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


def new_pass(log: EventLog, live: LiveState, *names: str) -> None:
    """What `partbuild sources scan raw` appends (or for each of `names`): the next pass is due at once."""
    for name in names or ("raw",):
        log.append([envelope(pb.SourceScanRequest(source=name, reason="test"), source=manual("ann"))])
    live.catch_up()


# ----------------------------------------------------------------- items assembled into partitions


def memory_items(*keys: str, data: bytes = b"x") -> list[Any]:
    connector = InMemoryConnector([MemoryItem(ItemKey(key.encode()), data) for key in keys])
    page = connector.fill_page(KeyRange.everything(), Cursor.initial(), Budgets(1000, 1 << 40))
    assert page is not None
    return list(page.items)


def test_items_assemble_into_partition_directories_with_marker_version_and_settled_key() -> None:
    assembler = PartitionAssembler(PartitionPattern(KEYS), PartitionPattern(RAW), "_SUCCESS")
    items = memory_items(
        "README",  # outside every partition
        "date=2026-01-01/_SUCCESS",
        "date=2026-01-01/part-0",
        "date=2026-01-02/part-0",  # no marker: incomplete
        "date=2026-01-03/sub/part-0",  # deeper files belong to their partition
        "date=2026-01-03/sub/part-1",
        "date=2026-13-01/part-0",  # not a date: outside
    )  # (listed in key order)
    closed = assembler.feed(items[:4])
    assert [(p.ref, p.items, p.complete) for p in closed] == [(raw_ref(1), 2, True)]
    assert assembler.settled_key == b"date=2026-01-01/part-0"  # the open partition (day 2) is not settled yet
    closed = assembler.feed(items[4:]) + assembler.finish()
    assert [(p.ref, p.items, p.complete) for p in closed] == [(raw_ref(2), 1, False), (raw_ref(3), 2, False)]
    assert assembler.settled_key == b"date=2026-13-01/part-0" and assembler.unmatched == 2
    assert closed[1].directory == "date=2026-01-03" and closed[1].bytes == 2 and closed[1].strong


def test_a_partition_version_changes_with_any_file_and_only_then() -> None:
    def version_of(*keys: str, data: bytes = b"x") -> str:
        assembler = PartitionAssembler(PartitionPattern(KEYS), PartitionPattern(RAW), None)
        assembler.feed(memory_items(*keys, data=data))
        (found,) = assembler.finish()
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

    (root / "date=2026-01-01" / "part-00000.parquet").write_bytes(b"late rows")  # rewritten
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
    (root / "date=2026-01-01" / "part-00000.parquet").write_bytes(b"later rows")
    new_pass(log, live)
    drain(scan, live)
    assert len(events(log, "want_create")) == 3 and live.state.rejections == []


def test_a_day_overwritten_while_a_pass_saw_it_gone_taints_and_re_wants_what_it_fed(log: EventLog, root: Path) -> None:
    """A Spark overwrite deletes the directory, then writes it: a pass between the two says it is gone."""
    import shutil

    for day in (1, 2):
        write_day(root, day)
    scan, live = scanner(log, source(root, rewant_tainted=True))
    drain(scan, live)
    dailies = {day: _build_daily(log, live, day) for day in (1, 2)}
    old_raw = {day: live.state.canonical[raw_ref(day)] for day in (1, 2)}
    for day in (1, 2):
        shutil.rmtree(root / f"date=2026-01-{day:02d}")
    new_pass(log, live)
    drain(scan, live)
    assert all(live.state.instances[old_raw[day]].state == I.GONE for day in (1, 2))
    write_day(root, 1, b"other rows")  # day 1 written again, with other data; day 2 not yet
    new_pass(log, live)
    drain(scan, live)
    state = live.state
    assert state.canonical[raw_ref(1)] != old_raw[1] and state.instances[dailies[1]].state == I.TAINTED
    assert state.instances[old_raw[2]].state == I.GONE and state.instances[dailies[2]].state == I.LIVE
    (rewant,) = events(log, "want_create")[2:]
    assert list(rewant.want_create.partition_refs) == ["daily/date=2026-01-01"]
    assert state.rejections == []


def test_a_restarted_scanner_resumes_from_the_recorded_cursor(log: EventLog, root: Path) -> None:
    for day in range(1, 9):
        write_day(root, day)
    first, live = scanner(log, source(root))
    for _ in range(4):  # 4 pages of 3 items: part of the way
        first.step()
    live.catch_up()
    cursor = live.state.sources["raw"].ranges[0].last_key
    assert cursor.startswith(b"date=2026-01-0") and not live.state.sources["raw"].done
    recorded = len(events(log, "source_scan_progress"))
    # A new process: its own state, replayed from the log.
    second, second_live = scanner(log, source(root))
    drain(second, second_live)
    progress = [e.source_scan_progress for e in events(log, "source_scan_progress")]
    assert progress[recorded].after_key == cursor  # the second scanner began where the first stopped
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

    def fill_page(self, key_range: KeyRange, cursor: Cursor, budgets: Budgets) -> Page | None:
        self.calls += 1
        if self.calls >= 2 and self.failures:
            raise self.failures.pop(0)
        return super().fill_page(key_range, cursor, budgets)


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
        if "raw" in live.state.sources and live.state.sources["raw"].done:
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
    (pending,) = scan._scans
    assert pending.passes_ended == 1  # not due yet
    head = live.state.head_seq
    now[0] += 60_000
    drain(scan, live)  # a pass that finds nothing new is not recorded
    assert pending.passes_ended == 2 and live.state.head_seq == head
    write_day(root, 2)
    now[0] += 30_000
    for _ in range(3):
        scan.step()
        for pending in scan._scans:
            pending.next_due = 0.0
    assert pending.passes_ended == 2  # due 60 s after the quiet pass ended, not after the recorded one
    now[0] += 30_000
    drain(scan, live)
    assert live.state.sources["raw"].pass_number == 2  # the next recorded pass
    assert [e.partition_observed.partition_ref for e in events(log, "partition_observed")] == [raw_ref(1), raw_ref(2)]


# ----------------------------------------------------------------- in the orchestrator, and killed mid-scan


def test_the_orchestrator_builds_from_partitions_its_scanner_discovers(
    database: Database, root: Path, tmp_path: Path
) -> None:
    log = database.log
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
    orchestrator = Orchestrator(database, graph, warehouse=str(tmp_path / "w"), poll_interval_s=0.01)
    try:
        log.append(
            [envelope(pb.WantCreate(want_id="w", partition_refs=["daily/date=2026-01-01"]), source=manual("ann"))]
        )
        assert orchestrator.run_until_idle(timeout_s=30)
    finally:
        orchestrator.close()
    assert built == [str(root / "date=2026-01-01")]


# ----------------------------------------------------------------- passes split into key ranges


def ranges(*loads: tuple[bytes, int, bytes]) -> list[ScanRange]:
    """Finished key ranges from (start, bytes, split hint); ends follow from the next start."""
    made = []
    for index, (start, size, hint) in enumerate(loads):
        end = loads[index + 1][0] if index + 1 < len(loads) else b""
        key_range = ScanRange(start, end)
        key_range.bytes, key_range.split_hint, key_range.done = size, hint, True
        made.append(key_range)
    return made


def test_split_keys_grow_to_the_wanted_count_and_move_towards_equal_bytes() -> None:
    assert next_split_keys([], 4) == [] and next_split_keys(ranges((b"", 100, b"m")), 1) == []
    assert next_split_keys(ranges((b"", 100, b"m")), 4) == [b"m"]  # each key range splits once per pass
    assert next_split_keys(ranges((b"", 50, b"f"), (b"m", 50, b"t")), 4) == [b"f", b"m", b"t"]
    assert next_split_keys(ranges((b"", 50, b"f"), (b"m", 50, b"t")), 3) == [b"f", b"m"]
    # At the wanted count: the two lightest neighbours merge so the heaviest can split.
    loads = ranges((b"", 10, b"b"), (b"c", 10, b"d"), (b"e", 80, b"p"))
    assert next_split_keys(loads, 3) == [b"e", b"p"]
    balanced = ranges((b"", 30, b"b"), (b"c", 35, b"d"), (b"e", 35, b"p"))
    assert next_split_keys(balanced, 3) == [b"c", b"e"]  # a trade would not lower the heaviest load
    assert next_split_keys(ranges((b"", 50, b""), (b"m", 50, b"")), 2) == [b"m"]  # no hints: kept
    assert next_split_keys(balanced, 2) == [b"e"]  # fewer wanted: the lightest neighbours (30 + 35) merge


def fold(*slices: pb.SourceScanProgress) -> tuple[BuildState, list[str | None]]:
    state = BuildState(strict=True)
    reasons = [state.apply(seq, envelope(msg, timestamp_ms=seq)) for seq, msg in enumerate(slices, start=1)]
    return state, reasons


def test_the_fold_keeps_a_cursor_per_key_range_and_ends_the_pass_when_every_range_is_done() -> None:
    def slice_of(shard: int, after: bytes, last: bytes, **fields: Any) -> pb.SourceScanProgress:
        return pb.SourceScanProgress(source="raw", pass_number=1, shard=shard, after_key=after, last_key=last, **fields)

    state, reasons = fold(
        slice_of(0, b"", b"a", split_keys=[b"f", b"p"], items=2, bytes=20),
        slice_of(2, b"", b"q", items=1, bytes=5),
        slice_of(1, b"", b"g", items=1, bytes=7),
        slice_of(1, b"g", b"h", done=True, split_hint=b"g/"),
        slice_of(0, b"a", b"b", done=True),
        slice_of(3, b"", b"z"),  # no such key range
        slice_of(2, b"q", b"e"),  # before where it began
        slice_of(2, b"q", b"zz", done=True, split_hint=b"a"),  # the hint lies outside the key range
        slice_of(2, b"q", b"zz", split_keys=[b"x"]),  # only a pass's first slice splits it
        slice_of(1, b"h", b"i"),  # key range 1 is done
        slice_of(0, b"b", b"c"),  # so is shard 0
    )
    assert reasons[:5] == [None] * 5
    assert [reason.split(":")[0] if reason else None for reason in reasons[5:]] == [
        "pass 1 of source 'raw' has 3 shard(s), not a shard 3",
        "a slice's last key is before the key it began after",
        "a split hint comes with the slice that ends a shard, inside the shard",
        "only the slice that begins a pass may split it",
        "shard 1 of pass 1 of source 'raw' is done",
        "shard 0 of pass 1 of source 'raw' is done",
    ]
    scan = state.sources["raw"]
    assert not scan.done and [(s.start, s.end, s.last_key, s.done) for s in scan.ranges] == [
        (b"", b"f", b"b", True),
        (b"f", b"p", b"h", True),
        (b"p", b"", b"q", False),
    ]
    assert (scan.pass_items, scan.ranges[1].bytes, scan.ranges[1].split_hint) == (4, 7, b"g/")
    assert state.apply(12, envelope(slice_of(2, b"q", b"z", done=True), timestamp_ms=12)) is None
    assert scan.done and scan.passes_done == 1 and scan.last_pass_ranges == scan.ranges
    _, bad = fold(slice_of(0, b"", b"g", split_keys=[b"f"]), slice_of(0, b"", b"", split_keys=[b"p", b"f"]))
    assert bad == ["the slice's last key is outside shard 0", "split keys must increase"]


def day_tree(root: Path, days: int, files: int = 3) -> None:
    """`days` complete partitions of equal size, over two months (dates must be valid)."""
    for n in range(days):
        directory = root / f"date=2026-{1 + n // 28:02d}-{1 + n % 28:02d}"
        directory.mkdir(parents=True)
        for index in range(files):
            (directory / f"part-{index}").write_bytes(b"x" * 100)
        (directory / "_SUCCESS").write_bytes(b"")


def test_passes_split_into_balanced_key_ranges_over_a_few_passes(log: EventLog, root: Path) -> None:
    day_tree(root, 48)
    scan, live = scanner(log, source(root, shards=4, page_items=10))
    counts = []
    for _ in range(4):
        drain(scan, live)
        counts.append(len(live.state.sources["raw"].last_pass_ranges))
        new_pass(log, live)
        live.catch_up()
    assert counts == [1, 2, 4, 4]
    finished = live.state.sources["raw"].last_pass_ranges
    loads = [key_range.bytes for key_range in finished]
    assert sum(loads) == 48 * 300 and max(loads) <= 1.5 * min(loads), loads
    for key_range in finished:  # every boundary is the start of a partition directory
        assert key_range.start == b"" or (key_range.start.startswith(b"date=") and key_range.start.endswith(b"/"))
    refs = [e.partition_observed.partition_ref for e in events(log, "partition_observed")]
    assert len(refs) == len(set(refs)) == 48  # nothing observed twice, whatever the split
    assert live.state.rejections == []


def test_workers_owning_different_key_ranges_scan_one_pass_between_them(log: EventLog, root: Path) -> None:
    day_tree(root, 40)
    first, live = scanner(log, source(root, shards=2, page_items=10))
    drain(first, live)
    new_pass(log, live)
    drain(first, live)  # now the passes split in two
    new_pass(log, live)

    def owner(parity: int) -> Callable[[BuildState, str], bool]:
        return lambda state, key: int(key.rsplit("/", 1)[1]) % 2 == parity

    even, even_live = scanner(log, source(root, shards=2, page_items=10), owns=owner(0))
    odd, odd_live = scanner(log, source(root, shards=2, page_items=10), owns=owner(1))
    for _ in range(100):
        for worker in (even, odd):
            for pending in worker._scans:  # a worker idle while the pass had not begun: no waiting in a test
                pending.next_due = 0.0
            worker.step()
        even_live.catch_up()
        if even_live.state.sources["raw"].passes_done == 3:
            break
    record = even_live.state.sources["raw"]
    assert record.passes_done == 3 and len(record.last_pass_ranges) == 2
    writers = {
        (e.source_scan_progress.shard, e.source.system.worker, e.source.system.component)
        for e in events(log, "source_scan_progress")[-6:]
    }
    assert {shard for shard, _, _ in writers} == {0, 1}
    assert even_live.state.rejections == [] and odd_live.state.rejections == []


def test_a_scan_the_log_would_refuse_appends_nothing_and_waits(log: EventLog, root: Path) -> None:
    """Progress the fold would reject (here: a cursor a bug moved) is never appended, nor retried at once."""
    for day in (1, 2, 3):
        write_day(root, day)
    scan, live = scanner(log, source(root, page_items=2))
    scan.step()  # lists day 1: nothing settled yet, nothing recorded
    scan.step()  # day 2 closes day 1: the pass is in the log
    live.catch_up()
    head = live.state.head_seq
    assert head > 0
    (pending,) = scan._scans
    pending.logged_key = b"zzz"  # not the log's cursor: the fold would reject the slice
    for _ in range(5):
        scan.step()
    live.catch_up()
    assert live.state.head_seq == head and live.state.rejections == []
    assert pending.next_due > time.monotonic() + 30  # backs off instead of spinning


# ----------------------------------------------------------------- idle passes, gone partitions


def test_idle_passes_record_nothing_and_a_change_is_noticed_within_one_pass(log: EventLog, root: Path) -> None:
    other = root.parent / "other"
    for day in (1, 2):
        write_day(root, day)
        write_day(other, day)
    second = SourceDataset("other", "other/date={date:date}", discovery=filesystem_discovery(other, KEYS, page_items=3))
    now = [1_800_000_000_000]
    scan, live = scanner(log, source(root, rescan_every_s=60), second, clock=lambda: now[0])
    drain(scan, live)  # the first passes observe what is there
    head = live.state.head_seq
    for _ in range(20):  # a pass every 60 s: nothing to settle, nothing recorded
        now[0] += 60_000
        drain(scan, live)
    assert all(each.passes_ended == 21 for each in scan._scans)
    assert live.state.head_seq == head
    write_day(other, 3)  # a new partition is noticed by the next pass
    now[0] += 60_000
    drain(scan, live)
    assert events(log, "partition_observed")[-1].partition_observed.partition_ref == "other/date=2026-01-03"
    assert live.state.sources["other"].pass_number == 2 and live.state.rejections == []
    # A pass an operator asks for is recorded, found something or not: the request is answered in the log.
    new_pass(log, live, "raw")
    now[0] += 60_000  # (and the other source's next pass: quiet)
    drain(scan, live)
    record = live.state.sources["raw"]
    assert record.pass_number == 2 and record.done and not record.rescan_requested


def _build_daily(log: EventLog, live: LiveState, day: int) -> str:
    """What a daily run from raw day `day` appends: a want, a run, its success; the daily's instance UUID."""
    ref = f"daily/date=2026-01-{day:02d}"
    raw = live.state.canonical[raw_ref(day)]
    seq = log.append([envelope(pb.WantCreate(want_id=f"w{day}", partition_refs=[ref]), source=manual("ann"))]).first_seq
    uuid = instance_uuid(seq, ref)
    log.append([envelope(pb.JobRunBuffer(job_run_id=f"r{day}", job_label="daily", instance_uuids=[uuid]))])
    success = pb.JobRunSuccess(job_run_id=f"r{day}", input_instance_uuids=[raw])
    log.append([envelope(success, source=from_job_run(f"r{day}"))])
    live.catch_up()
    return uuid


def test_a_deleted_day_is_gone_within_one_pass_its_daily_waits_and_a_restore_is_a_new_live_instance(
    log: EventLog, root: Path
) -> None:
    import shutil

    from partbuild.orchestrator.decide import decide

    for day in (1, 2, 3):
        write_day(root, day)
    raw = source(root)
    scan, live = scanner(log, raw)
    drain(scan, live)
    daily1 = _build_daily(log, live, 1)
    old = {day: live.state.canonical[raw_ref(day)] for day in (1, 2)}
    shutil.rmtree(root / "date=2026-01-01")
    shutil.rmtree(root / "date=2026-01-02")
    new_pass(log, live)
    drain(scan, live)
    state = live.state
    for day in (1, 2):
        gone = state.instances[old[day]]
        assert gone.state == I.GONE and state.canonical[raw_ref(day)] == old[day]
        assert gone.note is not None and "gone" in gone.note and "pass 2 of source raw" in gone.note
    assert state.instances[state.canonical[raw_ref(3)]].state == I.LIVE
    assert state.instances[daily1].state == I.LIVE  # built from raw day 1: its data exists
    assert state.rejections == []

    # A new want for the daily of day 2 waits for its raw day: the decision wants it, and nothing builds it.
    daily = Job(
        "daily", ["daily/date={date:date}"], run=lambda ctx: None, inputs=lambda p: [f"raw/clicks/date={p['date']}"]
    )
    graph = Graph(jobs=[daily], sources=[raw])
    log.append(
        [envelope(pb.WantCreate(want_id="again", partition_refs=["daily/date=2026-01-02"]), source=manual("ann"))]
    )
    for _ in range(3):
        live.catch_up()
        decision = decide(live.state, graph, 1_900_000_000_000)
        assert decision.new_runs == []
        if decision.events:
            log.append(decision.events)
    live.catch_up()
    state = live.state
    waiting = state.instances[state.canonical["daily/date=2026-01-02"]]
    assert waiting.state == I.UPSTREAM_BUILDING and state.waiting_for(raw_ref(2)) == [waiting.uuid]
    assert state.wants["again"].state.name == "UPSTREAM_BUILDING"
    assert {want.refs for want in state.active_wants_for_ref(raw_ref(2))} == {(raw_ref(2),)}  # its derivative

    # Restored: observed again, a new Live instance; the daily it waited for can now be built.
    write_day(root, 2)
    new_pass(log, live)
    drain(scan, live)
    state = live.state
    restored = state.instances[state.canonical[raw_ref(2)]]
    assert restored.uuid != old[2] and restored.state == I.LIVE
    assert state.instances[old[2]].state == I.GONE and state.instances[old[2]].superseded_seq
    assert state.instances[waiting.uuid].state == I.MISSING  # woken: schedulable again
    assert state.rejections == []


class ChangingConnector(InMemoryConnector):
    """Lists `self.listing` (an in-memory connector the test replaces), failing calls while `failures` remain."""

    def __init__(self, items: list[MemoryItem]) -> None:
        super().__init__(items)
        self.listing = InMemoryConnector(items)
        self.failures: list[EnumerateError] = []

    def fill_page(self, key_range: KeyRange, cursor: Cursor, budgets: Budgets) -> Page | None:
        if cursor.last_key is not None and self.failures:  # fails after the first page of a pass
            raise self.failures.pop(0)
        return self.listing.fill_page(key_range, cursor, budgets)


def test_a_pass_with_an_error_never_says_gone_and_the_next_complete_pass_does(log: EventLog) -> None:
    days = (1, 2, 3)
    items = [
        MemoryItem(ItemKey(f"date=2026-01-0{day}/{name}".encode()), b"d") for day in days for name in ("p", "_SUCCESS")
    ]
    connector = ChangingConnector(items)
    discovered = SourceDataset("raw", RAW, discovery=Discovery(connector, "/data", KEYS, page_items=2))
    scan, live = scanner(log, discovered)
    drain(scan, live)
    connector.listing = InMemoryConnector([item for item in items if b"-02/" not in item.key.raw_bytes()])
    connector.failures = [EnumerateError.retryable("connection reset")]
    new_pass(log, live)
    for _ in range(50):  # no waiting for the backoff in a test
        scan.step()
        for pending in scan._scans:
            pending.next_due = 0.0
        if scan._scans[0].passes_ended == 2:
            break
    assert scan._scans[0].passes_ended == 2 and live.state.sources["raw"].errors_total == 1
    assert events(log, "partition_gone") == []  # it listed everything in the end, but not in one go
    new_pass(log, live)
    drain(scan, live)
    (gone,) = events(log, "partition_gone")
    assert gone.partition_gone.partition_ref == raw_ref(2) and gone.partition_gone.location == "/data/date=2026-01-02"
    assert live.state.instances[live.state.canonical[raw_ref(2)]].state == I.GONE


def test_a_stale_scanner_cannot_say_gone(log: EventLog, root: Path) -> None:
    """Two scanners of one source: the one whose slice the fold rejects has its gones rejected with it."""
    for day in (1, 2):
        write_day(root, day)
    scan, live = scanner(log, source(root))
    drain(scan, live)
    record = live.state.sources["raw"]
    uuid = live.state.canonical[raw_ref(1)]
    location = live.state.instances[uuid].location
    stale = pb.SourceScanProgress(
        source="raw", pass_number=record.pass_number, last_key=b"date=2026-01-02/x", done=True
    )
    head = live.state.head_seq
    gone = pb.PartitionGone(
        partition_ref=raw_ref(1), location=location, source="raw", pass_number=record.pass_number, scan_seq=head + 1
    )
    log.append([envelope(stale, source=manual("bob")), envelope(gone, source=manual("bob"))], expected_head=head)
    live.catch_up()
    reasons = [rejection.reason for rejection in live.state.rejections]
    assert len(reasons) == 2 and "stale scanner" in reasons[1]
    assert live.state.instances[uuid].state == I.LIVE
