"""The filesystem connector on real files: order, resume, confinement, budgets, reads, memory (killed and
resumed in a child process: tests/e2e/test_filesystem_connector_processes.py)."""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import socket
import stat
import tempfile
import time
import tracemalloc
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from partbuild.orchestrator.connectors.conformance import ConformanceCase, run_conformance, standard_cases
from partbuild.orchestrator.connectors.conformance_pytest import conformance_suite
from partbuild.orchestrator.connectors.contract import Connector
from partbuild.orchestrator.connectors.errors import EnumerateError, ReadError
from partbuild.orchestrator.connectors.filesystem import FILESYSTEM_TAG, FilesystemConnector
from partbuild.orchestrator.connectors.items import StableItemId
from partbuild.orchestrator.connectors.paging import Budgets, Cursor, KeyRange
from partbuild.orchestrator.connectors.toxic import ItemKey, ItemRef, ResumeToken

from fskit import BIG, clicks_tree, drain_keys, empty_files, write_tree

SECRET = b"hunter2-api-key"


def _conformance_root() -> Path:
    """One W1-shaped tree for every conformance case, built on first use and removed at exit."""
    global _ROOT
    if _ROOT is None:
        _ROOT = Path(tempfile.mkdtemp(prefix="pb-fs-conformance-"))
        atexit.register(shutil.rmtree, _ROOT, True)
        clicks_tree(_ROOT)
        (_ROOT / "empty-dir" / "deeper").mkdir(parents=True)
        os.symlink("/etc", _ROOT / "clicks" / "escape")  # skipped, never followed
        os.mkfifo(_ROOT / "clicks" / "date=2026-01-03" / "pipe")
    return _ROOT


_ROOT: Path | None = None


def key(text: str | bytes) -> ItemKey:
    return ItemKey(text.encode() if isinstance(text, str) else text)


CASES = [
    *standard_cases(secrets=(SECRET,)),
    ConformanceCase("one-day", Budgets(2, 900), KeyRange(key("clicks/date=2026-01-05"), key("clicks/date=2026-01-06"))),
    ConformanceCase("from-day-10", Budgets(4, 1500), KeyRange(key("clicks/date=2026-01-10"))),
    ConformanceCase("inside-a-name", Budgets(3, BIG), KeyRange(key("a/"), key("clicks/date=2026-01-02/part"))),
    ConformanceCase("empty-range", Budgets(4, 1500), KeyRange(key("zzz"))),
    ConformanceCase("deadline-far", Budgets(5, 2000, deadline=time.monotonic() + 3600)),
]

TestFilesystemConformance = conformance_suite(lambda: FilesystemConnector(_conformance_root()), CASES)


def test_conformance_of_edge_trees(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    run_conformance(lambda: FilesystemConnector(tmp_path / "empty"), standard_cases())
    write_tree(tmp_path / "one", {b"only": b"x" * 99})
    run_conformance(lambda: FilesystemConnector(tmp_path / "one"), standard_cases())
    write_tree(tmp_path / "deep", {b"/".join([b"d"] * 40) + b"/f": b"deep", b"d/e": b"", b"e": b"1"})
    run_conformance(lambda: FilesystemConnector(tmp_path / "deep"), standard_cases())


def test_meets_the_protocol(tmp_path: Path) -> None:
    connector = FilesystemConnector(tmp_path)
    assert isinstance(connector, Connector)
    caps = connector.capabilities()
    assert (caps.seek_by_key, caps.token_resume, caps.range_read, caps.split_hints) == (True, False, True, True)


# -- order


def test_order_is_by_full_path_bytes_not_per_directory_names(tmp_path: Path) -> None:
    # b"!" < b"/" < b"0": a plain per-directory sort would put the directory "a" before "a!b".
    write_tree(tmp_path, {b"a!b": b"", b"a/b": b"", b"a0": b"", b"a/c!d": b"", b"a/c/d": b"", b"a/c0": b""})
    got = drain_keys(FilesystemConnector(tmp_path), Budgets(2, BIG))
    assert got == [b"a!b", b"a/b", b"a/c!d", b"a/c/d", b"a/c0", b"a0"]
    assert got == sorted(got)


# Bytes around b"/" (0x2f) are where full-path order and per-directory name order part ways.
_BYTES = [b"a", b"!", b"0", b".", b"\x01", b"\xff", b"~"]
_NAMES = st.lists(st.sampled_from(_BYTES), min_size=1, max_size=3).map(b"".join).filter(lambda n: n.strip(b".") != b"")
_PATHS = st.lists(st.lists(_NAMES, min_size=1, max_size=3).map(b"/".join), min_size=0, max_size=25)
_PROBES = st.lists(st.sampled_from([*_BYTES, b"/"]), max_size=8).map(b"".join)


def _as_tree(paths: list[bytes]) -> list[bytes]:
    """The paths that can coexist: a path that is also another's directory is dropped."""
    unique = set(paths)
    return sorted(p for p in unique if not any(q.startswith(p + b"/") for q in unique))


@settings(max_examples=40, deadline=None)
@given(paths=_PATHS, probes=st.lists(_PROBES, min_size=1, max_size=4))
def test_any_tree_drains_in_sorted_order_and_resumes_or_splits_at_any_key(
    paths: list[bytes], probes: list[bytes]
) -> None:
    tree = _as_tree(paths)
    with tempfile.TemporaryDirectory(prefix="pb-fs-prop-") as root:
        write_tree(Path(root), dict.fromkeys(tree, b"x"))
        connector = FilesystemConnector(root)
        assert drain_keys(connector, Budgets(3, BIG)) == tree
        for probe in probes:
            if probe:
                assert drain_keys(connector, Budgets(2, BIG), Cursor(ItemKey(probe))) == [k for k in tree if k > probe]
            lower, upper = sorted((probe or b"\x00", probes[0] + b"\xff"))
            if lower < upper:
                key_range = KeyRange(ItemKey(lower), ItemKey(upper))
                got, cursor = [], Cursor()
                while (page := connector.fill_page(key_range, cursor, Budgets(2, BIG))) is not None:
                    got += [i.key.raw_bytes() for i in page.items]
                    cursor = page.cursor
                assert got == [k for k in tree if lower <= k < upper]


def test_unicode_and_non_utf8_names_are_keys_of_their_bytes(tmp_path: Path) -> None:
    names = ["é/ü.txt".encode(), "日本/語".encode(), b"raw\xff\xfe/x\x80", b"z\x01", os.fsencode("snow\u2603")]
    write_tree(tmp_path, dict.fromkeys(names, b"data"))
    got = drain_keys(FilesystemConnector(tmp_path), Budgets(3, BIG))
    assert got == sorted(names)
    connector = FilesystemConnector(tmp_path)
    assert connector.read_range(ItemRef(b"raw\xff\xfe/x\x80"), 0, 10, Budgets(1, 10)) == b"data"


def test_items_carry_relative_refs_weak_versions_sizes_and_stable_ids(tmp_path: Path) -> None:
    write_tree(tmp_path, {b"d/f": b"12345"})
    (item,) = FilesystemConnector(tmp_path).fill_page(KeyRange(), Cursor(), Budgets(10, BIG)).items  # type: ignore[union-attr]
    assert item.ref.raw_bytes() == b"d/f" and item.size_hint == 5 and item.location is None
    assert not item.version.is_strong
    assert item.item_id == StableItemId.derive(FILESYSTEM_TAG, key("d/f"))
    os.utime(tmp_path / "d" / "f", ns=(1, 2))
    (again,) = FilesystemConnector(tmp_path).fill_page(KeyRange(), Cursor(), Budgets(10, BIG)).items  # type: ignore[union-attr]
    assert again.version != item.version and again.item_id == item.item_id


def test_locations_are_opt_in_and_never_in_the_ref(tmp_path: Path) -> None:
    write_tree(tmp_path, {b"d/f": b"1"})
    (item,) = FilesystemConnector(tmp_path, locations=True).fill_page(KeyRange(), Cursor(), Budgets(1, BIG)).items  # type: ignore[union-attr]
    assert item.location is not None and item.location.display == "d/f"
    assert item.location.url == (tmp_path.resolve() / "d" / "f").as_uri()
    assert os.fsencode(tmp_path) not in item.ref.raw_bytes()


# -- resume


def test_resume_from_a_key_descends_without_listing_what_is_before(tmp_path: Path) -> None:
    empty_files(tmp_path, dirs=20, per_dir=50)
    connector = FilesystemConnector(tmp_path)
    page = connector.fill_page(KeyRange(), Cursor(key("d0013/f00020")), Budgets(5, BIG))
    assert page is not None
    assert [i.key.raw_bytes() for i in page.items] == [b"d0013/f%05d" % n for n in range(21, 26)]
    assert connector.stats.dirs_listed == 2  # the root and d0013, not the 13 directories before it


def test_resume_from_a_deleted_or_never_existing_key(tmp_path: Path) -> None:
    write_tree(tmp_path, {b"a/1": b"", b"a/3": b"", b"b/1": b"", b"c": b""})
    connector = FilesystemConnector(tmp_path)
    after = lambda last: drain_keys(connector, Budgets(10, BIG), Cursor(key(last)))  # noqa: E731
    assert after("a/2") == [b"a/3", b"b/1", b"c"]
    assert after("a/9/z") == [b"b/1", b"c"]
    assert after("a") == [b"a/1", b"a/3", b"b/1", b"c"]  # "a" < "a/1"
    assert after("b/1") == [b"c"]
    assert after("c") == []


def test_tokens_are_ignored_the_key_decides(tmp_path: Path) -> None:
    write_tree(tmp_path, {b"a": b"", b"b": b"", b"c": b""})
    connector = FilesystemConnector(tmp_path)
    page = connector.fill_page(KeyRange(), Cursor(key("a"), ResumeToken(b"\xffjunk")), Budgets(5, BIG))
    assert page is not None and page.token is None
    assert [i.key.raw_bytes() for i in page.items] == [b"b", b"c"]


def test_a_directory_deleted_between_pages_is_skipped_not_an_error(tmp_path: Path) -> None:
    write_tree(tmp_path, {b"a/1": b"", b"b/1": b"", b"b/2": b"", b"c/1": b""})
    connector = FilesystemConnector(tmp_path)
    first = connector.fill_page(KeyRange(), Cursor(), Budgets(2, BIG))
    assert first is not None
    shutil.rmtree(tmp_path / "b")
    assert drain_keys(connector, Budgets(2, BIG), first.cursor) == [b"c/1"]


# -- budgets


def test_byte_budget_progress_rule_and_deadline(tmp_path: Path) -> None:
    write_tree(tmp_path, {b"big": b"x" * 100, b"c1": b"1", b"c2": b"2"})
    connector = FilesystemConnector(tmp_path)
    page = connector.fill_page(KeyRange(), Cursor(), Budgets(10, 10))
    assert page is not None and [i.key.raw_bytes() for i in page.items] == [b"big"]  # alone, over budget
    page = connector.fill_page(KeyRange(), page.cursor, Budgets(10, 1))
    assert page is not None and len(page) == 1
    now = [100.0]
    timed = FilesystemConnector(tmp_path, clock=lambda: now[0])
    with pytest.raises(EnumerateError) as raised:
        timed.fill_page(KeyRange(), Cursor(), Budgets(10, BIG, deadline=100.0))
    assert raised.value.is_retryable

    def ticking() -> float:
        now[0] += 1
        return now[0]

    ticked = FilesystemConnector(tmp_path, clock=ticking)
    now[0] = 0.0
    page = ticked.fill_page(KeyRange(), Cursor(), Budgets(10, BIG, deadline=2.5))
    assert page is not None and 1 <= len(page) < 3  # ended early by the deadline, never empty


# -- confinement


def _skips(root: Path) -> tuple[list[bytes], dict[bytes, str]]:
    seen: dict[bytes, str] = {}
    keys = drain_keys(FilesystemConnector(root, on_skip=lambda path, why: seen.setdefault(path, why)), Budgets(3, BIG))
    return keys, seen


def test_symlinks_are_never_followed(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    write_tree(outside, {b"secret.txt": b"s", b"dir/inner": b"i"})
    root = write_tree(tmp_path / "root", {b"ok": b"1"})
    os.symlink(outside / "secret.txt", root / "file-link")
    os.symlink(outside / "dir", root / "dir-link")
    os.symlink("loop-b", root / "loop-a")
    os.symlink("loop-a", root / "loop-b")
    os.symlink("ok", root / "inside-link")  # even inside the root: a key is the file's own path
    keys, seen = _skips(root)
    assert keys == [b"ok"]
    assert seen == dict.fromkeys([b"file-link", b"dir-link", b"loop-a", b"loop-b", b"inside-link"], "symlink")


def test_fifos_sockets_and_devices_are_skipped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = write_tree(tmp_path / "root", {b"ok": b"1"})
    os.mkfifo(root / "pipe")
    monkeypatch.chdir(root)  # a socket path is limited to ~108 bytes: bind it by a relative name
    with socket.socket(socket.AF_UNIX) as server:
        server.bind("sock")
        expected = {b"pipe": "fifo", b"sock": "socket"}
        try:
            os.mknod(root / "null", stat.S_IFCHR | 0o600, os.makedev(1, 3))
            expected[b"null"] = "char device"
        except PermissionError:
            pass  # not root, or no CAP_MKNOD: the other kinds still run
        keys, seen = _skips(root)
    assert keys == [b"ok"]
    assert seen == expected


def test_char_device(tmp_path: Path) -> None:
    try:
        os.mknod(tmp_path / "null", stat.S_IFCHR | 0o600, os.makedev(1, 3))
    except PermissionError:
        pytest.skip("mknod of a char device is not permitted here")
    assert _skips(tmp_path) == ([], {b"null": "char device"})
    with pytest.raises(ReadError, match="not a regular file"):
        FilesystemConnector(tmp_path).read_range(ItemRef(b"null"), 0, 1, Budgets(1, 1))


def test_a_symlink_swapped_in_after_the_scan_is_refused(tmp_path: Path) -> None:
    outside = write_tree(tmp_path / "outside", {b"f": b"secret", b"d/f": b"secret"})
    root = write_tree(tmp_path / "root", {b"f": b"mine", b"d/f": b"mine"})
    connector = FilesystemConnector(root)
    refs = [item.ref for item in connector.fill_page(KeyRange(), Cursor(), Budgets(10, BIG)).items]  # type: ignore[union-attr]
    assert [ref.raw_bytes() for ref in refs] == [b"d/f", b"f"]
    (root / "f").unlink()
    os.symlink(outside / "f", root / "f")  # the file itself
    shutil.rmtree(root / "d")
    os.symlink(outside / "d", root / "d")  # a directory on the path
    budgets = Budgets(1, 100)
    for ref in refs:
        for read in (lambda r: connector.open(r, budgets), lambda r: connector.read_range(r, 0, 9, budgets)):
            with pytest.raises(ReadError, match="symlink") as raised:
                read(ref)
            assert not raised.value.is_retryable


def test_a_root_replaced_by_a_symlink_is_refused(tmp_path: Path) -> None:
    write_tree(tmp_path / "root", {b"f": b"mine"})
    write_tree(tmp_path / "outside", {b"f": b"secret"})
    connector = FilesystemConnector(tmp_path / "root")
    (tmp_path / "root").rename(tmp_path / "moved")
    os.symlink(tmp_path / "outside", tmp_path / "root")
    with pytest.raises(EnumerateError) as raised:
        connector.fill_page(KeyRange(), Cursor(), Budgets(1, BIG))
    assert not raised.value.is_retryable and "symlink" in str(raised.value)
    with pytest.raises(ReadError, match="symlink"):
        connector.read_range(ItemRef(b"f"), 0, 4, Budgets(1, 4))


def test_a_fifo_swapped_in_after_the_scan_is_refused_without_hanging(tmp_path: Path) -> None:
    write_tree(tmp_path, {b"f": b"data"})
    connector = FilesystemConnector(tmp_path)
    (tmp_path / "f").unlink()
    os.mkfifo(tmp_path / "f")
    with pytest.raises(ReadError, match="fifo"):
        connector.open(ItemRef(b"f"), Budgets(1, 100))


@pytest.mark.parametrize("raw", [b"/etc/passwd", b"../outside", b"a/../../b", b"a//b", b"./a", b"a/", b"a\x00b"])
def test_refs_that_could_leave_the_root_are_refused(tmp_path: Path, raw: bytes) -> None:
    write_tree(tmp_path, {b"a/b": b"x"})
    with pytest.raises(ReadError, match="refused") as raised:
        FilesystemConnector(tmp_path).read_range(ItemRef(raw), 0, 1, Budgets(1, 1))
    assert not raised.value.is_retryable and os.fsencode(raw) not in str(raised.value).encode()


@contextlib.contextmanager
def _without_root_privileges() -> Iterator[None]:
    """Run as nobody (effective uid only, restored after) so permission bits apply; as is when not root."""
    if os.geteuid() != 0:
        yield
        return
    os.setegid(NOBODY)
    os.seteuid(NOBODY)
    try:
        yield
    finally:
        os.seteuid(0)
        os.setegid(0)


NOBODY = 65534


def test_permission_denied_skips_in_a_scan_and_fails_a_read_permanently() -> None:
    # Not under tmp_path: pytest's base directory is private to its owner, and nobody must traverse the tree.
    base = Path(tempfile.mkdtemp(prefix="pb-fs-denied-"))
    try:
        write_tree(base, {b"a/x": b"", b"b/locked/x": b"", b"b/secret": b"s", b"c": b""})
        for path in (base, base / "a", base / "b", base / "b" / "locked"):
            path.chmod(0o755)
        for path in (base / "a" / "x", base / "b" / "secret", base / "c"):
            path.chmod(0o644)
        (base / "b" / "locked").chmod(0)
        (base / "b" / "secret").chmod(0)
        with _without_root_privileges():
            keys, seen = _skips(base)
            with pytest.raises(ReadError, match="EACCES") as raised:
                FilesystemConnector(base).read_range(ItemRef(b"b/secret"), 0, 1, Budgets(1, 1))
        # The entry is listed and its metadata readable; only its content is not ours to read.
        assert keys == [b"a/x", b"b/secret", b"c"]
        assert seen == {b"b/locked/": "permission denied"}
        assert not raised.value.is_retryable
    finally:
        (base / "b" / "locked").chmod(0o755)
        shutil.rmtree(base)


# -- reads


def test_reads_are_bounded(tmp_path: Path) -> None:
    write_tree(tmp_path, {b"f": b"0123456789"})
    connector = FilesystemConnector(tmp_path)
    with connector.open(ItemRef(b"f"), Budgets(1, 10)) as reader:
        assert reader.read() == b"0123456789"
    with pytest.raises(ReadError, match="exceeds max_bytes"):
        connector.open(ItemRef(b"f"), Budgets(1, 9))
    reader = connector.open(ItemRef(b"f"), Budgets(1, 10))
    with open(tmp_path / "f", "ab") as grow:
        grow.write(b"more")
    with pytest.raises(ReadError, match="grew"), reader:
        reader.read()
    assert connector.read_range(ItemRef(b"f"), 3, 4, Budgets(1, 100)) == b"3456"
    assert connector.read_range(ItemRef(b"f"), 3, 100, Budgets(1, 2)) == b"34"
    assert connector.read_range(ItemRef(b"f"), 99, 4, Budgets(1, 100)) == b""
    with pytest.raises(ReadError, match="not found"):
        connector.read_range(ItemRef(b"missing"), 0, 1, Budgets(1, 1))


def test_a_read_as_listed_refuses_a_file_written_since_it_was_listed_even_with_size_and_mtime_put_back(
    tmp_path: Path,
) -> None:
    write_tree(tmp_path, {b"f": b"0123456789"})
    connector = FilesystemConnector(tmp_path)
    page = connector.fill_page(KeyRange(), Cursor(), Budgets(10, 1 << 40))
    assert page is not None
    (item,) = page.items
    assert item.change_stamp == (tmp_path / "f").stat().st_ctime_ns  # the ctime: moved by any write
    assert connector.read_range_as_listed(item, 2, 3, Budgets(1, 100)) == b"234"
    before = (tmp_path / "f").stat()
    (tmp_path / "f").write_bytes(b"0123456780")
    os.utime(tmp_path / "f", ns=(before.st_atime_ns, before.st_mtime_ns))  # same size, same mtime
    with pytest.raises(ReadError, match="changed since it was listed") as refused:
        connector.read_range_as_listed(item, 0, 10, Budgets(1, 100))
    assert refused.value.is_retryable


# -- split points


def test_split_point_is_the_byte_median_of_the_walked_files(tmp_path: Path) -> None:
    write_tree(tmp_path, {b"a": b"x" * 10, b"b": b"x" * 10, b"c/d": b"x" * 60, b"e": b"x" * 10, b"f": b"x" * 10})
    connector = FilesystemConnector(tmp_path)
    assert connector.choose_split_point(KeyRange(), Cursor(), Budgets(100, 1)) == key("c/d")
    assert connector.choose_split_point(KeyRange(), Cursor(key("c/d")), Budgets(100, 1)) == key("f")
    assert connector.choose_split_point(KeyRange(), Cursor(key("e")), Budgets(100, 1)) is None
    # A budget of two files splits only those two.
    assert connector.choose_split_point(KeyRange(), Cursor(), Budgets(2, 1)) == key("b")


# -- memory


@pytest.fixture(scope="module")
def trees(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[int, Path]]:
    """10,000 and 100,000 empty files, both in directories of 1,000: depth and width equal, only size differs.

    Built in /dev/shm when there is one: 110,000 creations take under 3 s on tmpfs and
    minutes on a busy disk, and the walker's memory does not depend on where the tree is.
    """
    shm = Path("/dev/shm")
    base = Path(tempfile.mkdtemp(prefix="pb-fs-memory-", dir=shm)) if os.access(shm, os.W_OK) else None
    root = base or tmp_path_factory.mktemp("fs-memory")
    try:
        yield {n: empty_files(root / str(n), dirs=n // 1000, per_dir=1000) for n in (10_000, 100_000)}
    finally:
        if base is not None:
            shutil.rmtree(base)


def _drain_peak(root: Path) -> tuple[int, int]:
    """(items, peak traced bytes) of a full drain in pages of 500, counting keys without keeping them."""
    connector = FilesystemConnector(root)
    cursor, count, last = Cursor(), 0, b""
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        while (page := connector.fill_page(KeyRange(), cursor, Budgets(500, BIG))) is not None:
            count += len(page)
            assert page.items[0].key.raw_bytes() > last
            last = page.last_key.raw_bytes()
            cursor = page.cursor
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return count, peak


def test_peak_memory_does_not_grow_with_the_tree(trees: dict[int, Path]) -> None:
    small_items, small_peak = _drain_peak(trees[10_000])
    large_items, large_peak = _drain_peak(trees[100_000])
    assert (small_items, large_items) == (10_000, 100_000)
    assert large_peak <= 1.5 * small_peak, (small_peak, large_peak)
