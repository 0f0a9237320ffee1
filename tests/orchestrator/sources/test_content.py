"""A moved weak version counts only once the content differs: touched or copied files rebuild nothing.

Real parts: a real directory tree read by the `FilesystemConnector`, a real database (SQLite and
PostgreSQL) holding the log and the digest tables, the real fold. `SourceScanner.step()` is driven
directly. Files are touched with `os.utime`, copied with `shutil.copyfile` (a `cp` without `-p`),
and changed one byte with their size and mtime put back, as a tool preserving times would.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from partbuild.orchestrator.connectors.in_memory import InMemoryConnector, MemoryItem
from partbuild.orchestrator.connectors.paging import Budgets, Cursor, KeyRange
from partbuild.orchestrator.connectors.toxic import ItemKey
from partbuild.orchestrator.graph import PartitionPattern, SourceDataset
from partbuild.orchestrator.sources import content
from partbuild.orchestrator.sources.discovery import Discovery, filesystem_discovery
from partbuild.orchestrator.sources.partitions import PartitionAssembler
from partbuild.orchestrator.sources.scanner import SourceScanner
from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.database import Database
from partbuild.state.fold.records import InstanceState as I
from partbuild.state.log.events import envelope, from_job_run, manual
from partbuild.state.log.live import LiveState
from partbuild.state.rules.ids import instance_uuid

from scankit import drain, events, scanner

RAW = "raw/clicks/date={date:date}"
KEYS = "date={date:date}"
PARTS = (b"alpha,1\nbeta,2\n", b"gamma,3\n")  # two part files per day, and an empty _SUCCESS


def write_day(root: Path, day: int) -> Path:
    directory = root / f"date=2026-01-{day:02d}"
    directory.mkdir(parents=True, exist_ok=True)
    for n, rows in enumerate(PARTS):
        (directory / f"part-{n:05d}.csv").write_bytes(rows * day)
    (directory / "_SUCCESS").write_bytes(b"")
    return directory


def day_bytes(day: int) -> int:
    return sum(len(rows) * day for rows in PARTS)


def raw_ref(day: int) -> str:
    return f"raw/clicks/date=2026-01-{day:02d}"


@pytest.fixture
def root(tmp_path: Path) -> Path:
    tree = tmp_path / "raw"
    tree.mkdir()
    return tree


def source(root: Path, **options: Any) -> SourceDataset:
    options.setdefault("page_items", 2)
    return SourceDataset("raw", RAW, discovery=filesystem_discovery(root, KEYS, **options))


def scan_of(database: Database, root: Path, **options: Any) -> tuple[SourceScanner, LiveState]:
    """A scanner as a process starts one: its own live state, the database's digest store."""
    return scanner(database.log, source(root, **options), digests=database.content_digests)


def bytes_read(scan: SourceScanner) -> int:
    check = scan.content_check("raw")
    return 0 if check is None else check.bytes_read


def next_pass(database: Database, scan: SourceScanner, live: LiveState) -> None:
    database.log.append([envelope(pb.SourceScanRequest(source="raw", reason="test"), source=manual("ann"))])
    drain(scan, live)


def build_daily(database: Database, live: LiveState, day: int) -> str:
    """A daily built from raw day `day` (as a job run records it): the instance a new raw version taints."""
    live.catch_up()
    raw = live.state.canonical[raw_ref(day)]
    ref = f"daily/date=2026-01-{day:02d}"
    log = database.log
    seq = log.append([envelope(pb.WantCreate(want_id=f"w{day}", partition_refs=[ref]), source=manual("ann"))])
    uuid = instance_uuid(seq.first_seq, ref)
    log.append([envelope(pb.JobRunBuffer(job_run_id=f"run-{day}", job_label="daily", instance_uuids=[uuid]))])
    success = pb.JobRunSuccess(job_run_id=f"run-{day}", input_instance_uuids=[raw])
    log.append([envelope(success, source=from_job_run(f"run-{day}"))])
    live.catch_up()
    assert live.state.instances[uuid].state == I.LIVE
    return uuid


def observed(database: Database) -> list[str]:
    return [event.partition_observed.partition_ref for event in events(database.log, "partition_observed")]


def test_touch_and_copy_of_unchanged_files_taint_nothing_and_observe_nothing(database: Database, root: Path) -> None:
    for day in (1, 2, 3):
        write_day(root, day)
    scan, live = scan_of(database, root)
    drain(scan, live)
    assert observed(database) == [raw_ref(1), raw_ref(2), raw_ref(3)]
    raws = dict(live.state.canonical)
    dailies = {day: build_daily(database, live, day) for day in (1, 2, 3)}
    read_before = bytes_read(scan)

    part = root / "date=2026-01-01" / "part-00000.csv"
    os.utime(part, ns=(part.stat().st_atime_ns, part.stat().st_mtime_ns + 10**9))  # touch
    for name in ("part-00000.csv", "part-00001.csv"):  # cp without -p: same bytes, new times
        shutil.copyfile(root / "date=2026-01-02" / name, root / "copy")
        shutil.copyfile(root / "copy", root / "date=2026-01-02" / name)
    (root / "copy").unlink()
    restored = root / "restored"  # a restore from backup: a fresh copy of the tree put in its place
    shutil.copytree(root / "date=2026-01-03", restored, copy_function=shutil.copyfile)
    shutil.rmtree(root / "date=2026-01-03")
    restored.rename(root / "date=2026-01-03")
    next_pass(database, scan, live)

    assert observed(database) == [raw_ref(1), raw_ref(2), raw_ref(3)]  # no new PartitionObserved
    state = live.state
    assert {ref: state.canonical[ref] for ref in raws} == raws
    assert all(state.instances[uuid].state == I.LIVE for uuid in dailies.values())
    # The weak versions did move: the touched and copied files were read (once) to confirm them.
    moved = len(PARTS[0]) * 1 + day_bytes(2) + day_bytes(3)
    assert bytes_read(scan) - read_before == moved
    next_pass(database, scan, live)
    assert bytes_read(scan) - read_before == moved and observed(database) == [raw_ref(1), raw_ref(2), raw_ref(3)]
    assert state.rejections == []


def change_one_byte_keeping_size_and_mtime(path: Path) -> None:
    before = path.stat()
    data = bytearray(path.read_bytes())
    data[0] ^= 0x01
    path.write_bytes(bytes(data))
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = path.stat()
    assert (after.st_size, after.st_mtime_ns) == (before.st_size, before.st_mtime_ns)


@pytest.mark.parametrize("change", ["one byte, same size and mtime", "size"])
def test_a_changed_byte_or_size_is_observed_and_taints_what_was_built(
    database: Database, root: Path, change: str
) -> None:
    for day in (1, 2):
        write_day(root, day)
    scan, live = scan_of(database, root)
    drain(scan, live)
    raws = dict(live.state.canonical)
    dailies = {day: build_daily(database, live, day) for day in (1, 2)}

    part = root / "date=2026-01-01" / "part-00001.csv"
    if change == "size":
        part.write_bytes(part.read_bytes() + b"delta,4\n")
    else:
        change_one_byte_keeping_size_and_mtime(part)
    next_pass(database, scan, live)

    assert observed(database) == [raw_ref(1), raw_ref(2), raw_ref(1)]
    state = live.state
    assert state.canonical[raw_ref(1)] != raws[raw_ref(1)] and state.canonical[raw_ref(2)] == raws[raw_ref(2)]
    assert state.instances[dailies[1]].state == I.TAINTED and state.instances[dailies[2]].state == I.LIVE
    assert state.rejections == []


def test_verify_content_false_keeps_every_moved_version_a_change_and_reads_nothing(
    database: Database, root: Path
) -> None:
    write_day(root, 1)
    scan, live = scan_of(database, root, verify_content=False)
    drain(scan, live)
    daily = build_daily(database, live, 1)
    part = root / "date=2026-01-01" / "part-00000.csv"
    os.utime(part, ns=(part.stat().st_atime_ns, part.stat().st_mtime_ns + 10**9))
    next_pass(database, scan, live)
    assert observed(database) == [raw_ref(1), raw_ref(1)]
    assert live.state.instances[daily].state == I.TAINTED
    assert scan.content_check("raw") is None and bytes_read(scan) == 0
    assert database.content_digests.partitions(content._id("raw"), content._id("date=2026-01-01"), ["x"]) == {}


def touch(path: Path) -> None:
    os.utime(path, ns=(path.stat().st_atime_ns, path.stat().st_mtime_ns + 10**9))


@pytest.mark.parametrize("budget", [{"verify_bytes_per_pass": 1}, {"verify_s_per_pass": 1e-9}], ids=["bytes", "time"])
def test_a_new_partition_is_observed_at_once_and_its_digest_finished_over_later_passes_reading_each_byte_once(
    database: Database, root: Path, budget: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(content, "CHUNK_BYTES", 8)  # files of 15 and 8 bytes: chunks of 8, 7 and 8
    write_day(root, 1)
    scan, live = scan_of(database, root, **budget)
    reads = []
    for _ in range(4):  # a pass reads one chunk (the first of a pass always), so 3 passes read the day
        next_pass(database, scan, live)
        assert observed(database) == [raw_ref(1)]  # observed in the first pass, whatever the budget
        reads.append(bytes_read(scan))
    assert reads == [8, 15, 23, 23] and live.state.sources["raw"].passes_done == 4

    # A touch: confirmed by the digest (nothing observed), over two passes; a restarted scanner takes up
    # where the last stopped.
    touch(root / "date=2026-01-01" / "part-00000.csv")
    next_pass(database, scan, live)
    restarted, restarted_live = scan_of(database, root, **budget)
    next_pass(database, restarted, restarted_live)
    assert bytes_read(scan) == 23 + 8 and bytes_read(restarted) == 7  # the second chunk, not the first again
    next_pass(database, restarted, restarted_live)
    assert bytes_read(restarted) == 7 and observed(database) == [raw_ref(1)]


def test_a_new_partition_is_observed_in_its_first_pass_with_a_budget_of_one_byte(
    database: Database, root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(content, "CHUNK_BYTES", 8)
    for day in (1, 2, 3):
        write_day(root, day)
    scan, live = scan_of(database, root, verify_bytes_per_pass=1)
    drain(scan, live)
    assert observed(database) == [raw_ref(1), raw_ref(2), raw_ref(3)]
    assert bytes_read(scan) == 8  # one chunk read (after the observations); the rest in later passes
    assert {raw_ref(day) for day in (1, 2, 3)} <= set(live.state.canonical)


def test_a_digest_pending_when_a_restarted_scanner_starts_is_taken_up_from_the_store(
    database: Database, root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(content, "CHUNK_BYTES", 8)
    write_day(root, 1)
    first, live = scan_of(database, root, verify_bytes_per_pass=1)
    next_pass(database, first, live)
    assert bytes_read(first) == 8 and observed(database) == [raw_ref(1)]

    second, second_live = scan_of(database, root, verify_bytes_per_pass=1)  # a new process
    reads = []
    for _ in range(3):
        next_pass(database, second, second_live)
        reads.append(bytes_read(second))
    assert reads == [7, 15, 15]  # the rest of the day, each byte once; then nothing
    daily = build_daily(database, second_live, 1)
    touch(root / "date=2026-01-01" / "part-00001.csv")
    next_pass(database, second, second_live)  # the touched file's one chunk: same bytes
    assert bytes_read(second) == 23 and observed(database) == [raw_ref(1)]
    assert second_live.state.instances[daily].state == I.LIVE


def test_a_version_moving_while_its_first_digest_is_pending_counts_as_a_change(
    database: Database, root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No complete digest of what was observed: the move is a change, as before this check existed."""
    monkeypatch.setattr(content, "CHUNK_BYTES", 8)
    write_day(root, 1)
    scan, live = scan_of(database, root, verify_bytes_per_pass=1)
    next_pass(database, scan, live)
    assert bytes_read(scan) == 8 and observed(database) == [raw_ref(1)]  # observed; digest pending
    first = live.state.canonical[raw_ref(1)]
    daily = build_daily(database, live, 1)

    touch(root / "date=2026-01-01" / "part-00001.csv")  # same bytes, but the digest of them is not complete
    next_pass(database, scan, live)
    assert observed(database) == [raw_ref(1), raw_ref(1)]  # observed at once, not held back for a read
    assert live.state.canonical[raw_ref(1)] != first and live.state.instances[daily].state == I.TAINTED

    # The new version's digest is pending in turn; once complete, a touch is confirmed as unchanged.
    for _ in range(3):
        next_pass(database, scan, live)
    read = bytes_read(scan)
    touch(root / "date=2026-01-01" / "part-00000.csv")
    next_pass(database, scan, live)
    next_pass(database, scan, live)
    assert bytes_read(scan) == read + len(PARTS[0]) and observed(database) == [raw_ref(1), raw_ref(1)]
    assert live.state.rejections == []


def test_moved_versions_are_read_before_the_pending_digests_of_new_partitions(
    database: Database, root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A new partition earlier in the pass takes no budget from a moved one after it (whose observation waits)."""
    monkeypatch.setattr(content, "CHUNK_BYTES", 8)
    write_day(root, 2)
    first, live = scan_of(database, root)
    drain(first, live)  # day 2 observed and digested
    write_day(root, 1)  # new, listed before day 2 (in another slice: two items a page)
    change_one_byte_keeping_size_and_mtime(root / "date=2026-01-02" / "part-00001.csv")  # 16 bytes: two chunks
    scan, scan_live = scan_of(database, root, verify_bytes_per_pass=1)
    next_pass(database, scan, scan_live)
    assert observed(database) == [raw_ref(2), raw_ref(1)]  # day 1 at once; day 2 waits for its second chunk
    next_pass(database, scan, scan_live)
    assert observed(database) == [raw_ref(2), raw_ref(1), raw_ref(2)]  # both chunks were day 2's
    assert bytes_read(scan) == 16


def test_a_restarted_scanner_keeps_the_digests_and_reads_no_unchanged_file_again(
    database: Database, root: Path
) -> None:
    for day in (1, 2):
        write_day(root, day)
    first, live = scan_of(database, root)
    drain(first, live)
    assert bytes_read(first) == day_bytes(1) + day_bytes(2)  # new partitions: read once, after observed

    for path in root.rglob("*.csv"):  # a re-sync: every file touched
        os.utime(path, ns=(path.stat().st_atime_ns, path.stat().st_mtime_ns + 10**9))
    second, second_live = scan_of(database, root)  # a new process: its own state, the same database
    next_pass(database, second, second_live)
    assert bytes_read(second) == day_bytes(1) + day_bytes(2)  # each moved file read once

    third, third_live = scan_of(database, root)
    next_pass(database, third, third_live)
    assert bytes_read(third) == 0  # the digests at the new versions were kept
    assert observed(database) == [raw_ref(1), raw_ref(2)] and third_live.state.rejections == []


class CountingDigests:
    """The database's digest store, counting the queries made of it."""

    def __init__(self, store: Any) -> None:
        self.store, self.queries = store, 0

    def __getattr__(self, name: str) -> Any:
        self.queries += 1
        return getattr(self.store, name)


def test_a_restarted_scanner_looks_up_each_unchanged_partition_once_and_then_only_memory(
    database: Database, root: Path
) -> None:
    for day in (1, 2, 3):
        write_day(root, day)
    first, live = scan_of(database, root)
    drain(first, live)
    counting = CountingDigests(database.content_digests)
    restarted, restarted_live = scanner(database.log, source(root), digests=counting)
    next_pass(database, restarted, restarted_live)
    assert counting.queries == 3 and bytes_read(restarted) == 0  # each digest found complete
    for _ in range(2):
        next_pass(database, restarted, restarted_live)
    assert counting.queries == 3 and observed(database) == [raw_ref(1), raw_ref(2), raw_ref(3)]


def test_a_partition_observed_before_change_stamps_is_not_read_while_unchanged(database: Database, root: Path) -> None:
    """Versions observed without the ctime (before this check, or with it off) still match when nothing moved."""
    write_day(root, 1)
    before, live = scan_of(database, root, verify_content=False)
    drain(before, live)
    after, after_live = scan_of(database, root)
    next_pass(database, after, after_live)
    assert observed(database) == [raw_ref(1)] and bytes_read(after) == 0


def test_change_stamps_move_the_version_and_leave_the_unstamped_one_as_before(root: Path) -> None:
    write_day(root, 1)
    discovery = filesystem_discovery(root, KEYS)

    def found(stamps: bool) -> Any:
        page = discovery.connector.fill_page(KeyRange.everything(), Cursor.initial(), Budgets(100, 1 << 40))
        assert page is not None
        assembler = PartitionAssembler(PartitionPattern(KEYS), PartitionPattern(RAW), "_SUCCESS", stamps=stamps)
        (partition,) = assembler.feed(page.items) + assembler.finish()
        return partition

    plain, stamped = found(False), found(True)
    assert plain.unstamped_version is None and stamped.unstamped_version == plain.version != stamped.version
    change_one_byte_keeping_size_and_mtime(root / "date=2026-01-01" / "part-00000.csv")
    assert found(False).version == plain.version  # size and mtime alone cannot see it
    assert found(True).version != stamped.version and found(True).unstamped_version == plain.version


def test_strong_versions_are_content_hashes_already_and_never_read(database: Database) -> None:
    """An object store's ETags (here the in-memory connector's BLAKE3 versions) need no digest."""

    def scan_objects(part: bytes) -> SourceScanner:
        objects = [MemoryItem(ItemKey(b"date=2026-01-01/" + name), data) for name, data in ((b"_SUCCESS", b""), part)]
        discovery = Discovery(InMemoryConnector(objects), "s3a://bucket/raw", KEYS)
        scan, live = scanner(
            database.log, SourceDataset("raw", RAW, discovery=discovery), digests=database.content_digests
        )
        next_pass(database, scan, live)
        return scan

    first = scan_objects((b"part-0", b"rows"))
    again = scan_objects((b"part-0", b"rows"))
    changed = scan_objects((b"part-0", b"other rows"))
    assert observed(database) == [raw_ref(1), raw_ref(1)]  # the change, once; the same ETags, never
    assert bytes_read(first) == bytes_read(again) == bytes_read(changed) == 0
