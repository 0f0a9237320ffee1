"""The conformance checks every connector must pass, each failing with the rule it broke.

A connector author points these at a factory that returns a fresh connector
over the same data each call (`conformance_pytest.conformance_suite` makes the
pytest tests). The checks drain key ranges through the public methods only:

- drain progresses strictly monotonically by key, stays in its key range and terminates;
- two fresh connectors give the same sequence;
- a corrupt or stale token falls back to resuming from the last key alone;
- no item ref or location holds a forbidden fragment (an absolute path of this
  host, a `..` segment, a configured secret);
- each page keeps its budgets, with the progress rule: only a lone first item
  may exceed `max_bytes`;
- a split point lies strictly inside what remains, and the two halves drain to
  the same sequence as the whole;
- a whole read returns `size_hint` bytes, and a range read the same bytes,
  never more than `max_bytes` (for connectors advertising range reads).

Failure messages name items by their redacted form only.
"""

from __future__ import annotations

import enum
import os
import tempfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from partbuild.orchestrator.connectors.contract import Connector
from partbuild.orchestrator.connectors.items import Page, ScanItem
from partbuild.orchestrator.connectors.paging import Budgets, Cursor, KeyRange
from partbuild.orchestrator.connectors.toxic import ItemKey, ResumeToken

ConnectorFactory = Callable[[], Connector]
CORRUPT_TOKEN = ResumeToken(b"\xffpartbuild-conformance corrupt token\x00")
MAX_RESUME_POINTS = 8  # resuming from every page boundary is quadratic; these are spread evenly


class Rule(enum.Enum):
    MONOTONIC = "drain progresses strictly monotonically by key"
    IN_KEY_RANGE = "items stay inside the key range"
    TERMINATES = "drain terminates"
    PAGE_SHAPE = "fill_page returns a Page or None"
    DETERMINISTIC = "two fresh connectors give the same sequence"
    TOKEN_FALLBACK = "a corrupt or stale token falls back to resuming from the last key"
    FORBIDDEN_FRAGMENT = "no item ref or location holds a forbidden fragment"
    MAX_ITEMS = "a page holds at most max_items items"
    MAX_BYTES = "a page holds at most max_bytes bytes, but for a lone first item (progress)"
    SPLIT_POINT = "a split point lies inside what remains and the halves drain to the whole"
    READS = "reads return the item's bytes, ranges within max_bytes"


class ConformanceFailure(AssertionError):
    """A connector broke a rule of the contract."""

    def __init__(self, rule: Rule, detail: str) -> None:
        self.rule = rule
        self.detail = detail
        super().__init__(f"connector broke rule {rule.name} ({rule.value}): {detail}")


@dataclass(frozen=True)
class ConformanceCase:
    """One shape of scan to check: budgets, key range, secrets no ref may contain, and a bound on pages."""

    name: str
    budgets: Budgets
    key_range: KeyRange = field(default_factory=KeyRange)
    secrets: tuple[bytes, ...] = ()
    max_pages: int = 100_000


def standard_cases(secrets: tuple[bytes, ...] = (), key_range: KeyRange | None = None) -> list[ConformanceCase]:
    """Budget shapes worth checking for any connector: one item a page, few, many, a tiny byte budget."""
    whole = key_range or KeyRange()
    shapes = [("one-item", 1, 1 << 40), ("three-items", 3, 1 << 40), ("byte-starved", 1000, 1), ("mixed", 7, 4096)]
    return [ConformanceCase(name, Budgets(items, size), whole, secrets) for name, items, size in shapes]


# -- draining


def _check_page(page: Page, case: ConformanceCase, after: ItemKey | None, number: int) -> None:
    budgets = case.budgets
    if len(page) > budgets.max_items:
        raise ConformanceFailure(Rule.MAX_ITEMS, f"page {number} holds {len(page)} > max_items={budgets.max_items}")
    if len(page) > 1 and page.total_size > budgets.max_bytes:
        raise ConformanceFailure(
            Rule.MAX_BYTES, f"page {number} holds {len(page)} items of {page.total_size} > {budgets.max_bytes} bytes"
        )
    for item in page.items:
        if after is not None and not item.key > after:
            raise ConformanceFailure(Rule.MONOTONIC, f"page {number}: {item.key!r} does not come after {after!r}")
        if item.key not in case.key_range:
            raise ConformanceFailure(Rule.IN_KEY_RANGE, f"page {number}: {item.key!r} is outside the key range")
        after = item.key


def drain(connector: Connector, case: ConformanceCase, cursor: Cursor | None = None) -> list[Page]:
    """Every page from `cursor` (the start) to done, each checked against the case's budgets and key range."""
    cursor = cursor or Cursor.initial()
    pages: list[Page] = []
    while True:
        page = connector.fill_page(case.key_range, cursor, case.budgets)
        if page is None:
            return pages
        if not isinstance(page, Page):
            raise ConformanceFailure(Rule.PAGE_SHAPE, f"got {type(page).__name__}")
        if len(pages) >= case.max_pages:
            raise ConformanceFailure(Rule.TERMINATES, f"still not done after {case.max_pages} pages")
        _check_page(page, case, cursor.last_key, len(pages))
        pages.append(page)
        cursor = page.cursor


def _items(pages: Sequence[Page]) -> list[ScanItem]:
    return [item for page in pages for item in page.items]


def _first_difference(got: Sequence[ScanItem], expected: Sequence[ScanItem]) -> str:
    for index, (a, b) in enumerate(zip(got, expected, strict=False)):
        if a != b:
            return f"item {index} differs: {a.key!r} vs {b.key!r}"
    return f"{len(got)} items vs {len(expected)}"


# -- the checks


def check_drain(factory: ConnectorFactory, case: ConformanceCase) -> list[Page]:
    """Monotonic, in the key range, within budgets, terminating; returns the pages for further checks."""
    return drain(factory(), case)


def check_deterministic(factory: ConnectorFactory, case: ConformanceCase) -> None:
    first, second = _items(drain(factory(), case)), _items(drain(factory(), case))
    if first != second:
        raise ConformanceFailure(Rule.DETERMINISTIC, _first_difference(second, first))


def _resume_points(pages: Sequence[Page]) -> list[int]:
    """Indexes of pages to resume after (never the last: nothing follows it)."""
    boundaries = len(pages) - 1
    if boundaries <= 0:
        return []
    step = max(1, boundaries // MAX_RESUME_POINTS)
    return list(range(0, boundaries, step))[:MAX_RESUME_POINTS]


def check_token_fallback(factory: ConnectorFactory, case: ConformanceCase) -> None:
    """Resuming after page i with no, a corrupt and a stale token gives the reference's remainder."""
    pages = drain(factory(), case)
    tokens = [page.token for page in pages if page.token is not None]
    for index in _resume_points(pages):
        expected = _items(pages[index + 1 :])
        last_key = pages[index].last_key
        variants: list[tuple[str, ResumeToken | None]] = [("no", None), ("a corrupt", CORRUPT_TOKEN)]
        stale = next((token for token in tokens if token != pages[index].token), None)
        if stale is not None:
            variants.append(("a stale", stale))
        for label, token in variants:
            where = f"resuming after page {index} with {label} token"
            try:
                got = _items(drain(factory(), case, Cursor(last_key, token)))
            except ConformanceFailure as failure:  # e.g. went back before the last key: still this rule
                raise ConformanceFailure(Rule.TOKEN_FALLBACK, f"{where}: {failure.detail}") from failure
            if got != expected:
                raise ConformanceFailure(Rule.TOKEN_FALLBACK, f"{where}: {_first_difference(got, expected)}")


def host_fragments() -> list[tuple[str, bytes]]:
    """Absolute paths of this host that must not appear in a ref: working, home and temporary directories."""
    found: dict[bytes, str] = {}
    for label, path in (
        ("working dir", os.getcwd()),
        ("home dir", str(Path.home())),
        ("tmp dir", tempfile.gettempdir()),
    ):
        for variant in (path, os.path.realpath(path)):
            raw = os.fsencode(variant).rstrip(b"/")
            if len(raw) > 1:  # "/" alone would match every path-like ref
                found.setdefault(raw, label)
    return [(label, raw) for raw, label in found.items()]


_PATH_CHARS = frozenset(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")


def _holds_path(raw: bytes, path: bytes) -> bool:
    """Whether `path` occurs in `raw` as a whole path: not glued to a longer name on either side."""
    start = raw.find(path)
    while start != -1:
        end = start + len(path)
        glued_before = start > 0 and raw[start - 1] in _PATH_CHARS  # "data/tmp/x" holds no "/tmp"
        glued_after = end < len(raw) and raw[end] in _PATH_CHARS  # "/tmpfoo" is not "/tmp"
        if not glued_before and not glued_after:
            return True
        start = raw.find(path, start + 1)
    return False


def _fragment_problem(raw: bytes, case: ConformanceCase, hosts: list[tuple[str, bytes]]) -> str | None:
    segments = raw.replace(b"\\", b"/").split(b"/")
    if b".." in segments:
        return "a '..' segment"
    for label, path in hosts:
        if _holds_path(raw, path):
            return f"this host's {label}"
    for number, secret in enumerate(case.secrets):
        if secret and secret in raw:
            return f"configured secret #{number}"  # never the secret itself
    return None


def _texts(item: ScanItem) -> Iterator[tuple[str, bytes]]:
    yield "ref", item.ref.raw_bytes()
    if item.location is not None:
        yield "location", item.location.display.encode("utf-8", "surrogateescape")
        if item.location.url is not None:
            yield "location url", item.location.url.encode("utf-8", "surrogateescape")


def check_forbidden_fragments(factory: ConnectorFactory, case: ConformanceCase) -> None:
    hosts = host_fragments()  # once per check: it resolves paths on the host
    for item in _items(drain(factory(), case)):
        for what, raw in _texts(item):
            problem = _fragment_problem(raw, case, hosts)
            if problem is not None:
                detail = f"the {what} of {item.key!r} ({item.ref!r}) holds {problem}"
                raise ConformanceFailure(Rule.FORBIDDEN_FRAGMENT, detail)


def _check_split_at(connector: Connector, factory: ConnectorFactory, case: ConformanceCase, cursor: Cursor) -> None:
    split = connector.choose_split_point(case.key_range, cursor, case.budgets)
    if split is None:
        return
    where = f"split point {split!r} after {cursor.last_key!r}"
    if not isinstance(split, ItemKey):
        raise ConformanceFailure(Rule.SPLIT_POINT, f"got {type(split).__name__}, not ItemKey")
    bounds = case.key_range
    if split not in bounds or (bounds.start is not None and split == bounds.start):
        raise ConformanceFailure(Rule.SPLIT_POINT, f"{where} is not strictly inside the key range")
    if cursor.last_key is not None and not split > cursor.last_key:
        raise ConformanceFailure(Rule.SPLIT_POINT, f"{where} does not come after the cursor")
    whole = _items(drain(factory(), case, cursor))
    lower = ConformanceCase(case.name, case.budgets, KeyRange(bounds.start, split), case.secrets, case.max_pages)
    upper = ConformanceCase(case.name, case.budgets, KeyRange(split, bounds.end), case.secrets, case.max_pages)
    low, high = _items(drain(factory(), lower, cursor)), _items(drain(factory(), upper, cursor))
    if not low or not high:
        raise ConformanceFailure(Rule.SPLIT_POINT, f"{where} leaves a half empty ({len(low)} + {len(high)} items)")
    if low + high != whole:
        raise ConformanceFailure(
            Rule.SPLIT_POINT, f"{where}: halves differ from the whole: {_first_difference(low + high, whole)}"
        )


def check_split_points(factory: ConnectorFactory, case: ConformanceCase) -> None:
    """At the start and at a few page boundaries (only for connectors advertising split hints)."""
    connector = factory()
    if not connector.capabilities().split_hints:
        return
    pages = drain(factory(), case)
    cursors = [Cursor.initial()] + [pages[index].cursor for index in _resume_points(pages)]
    for cursor in cursors:
        _check_split_at(connector, factory, case, cursor)


READ_SAMPLE = 5  # items read per case: reads are I/O, a few show the rule


def _check_item_reads(connector: Connector, item: ScanItem) -> None:
    where = f"reading {item.key!r}"
    whole_budget = Budgets(1, max(item.size, 1))
    with connector.open(item.ref, whole_budget) as reader:
        whole = reader.read()
    if item.size_hint is not None and len(whole) != item.size_hint:
        raise ConformanceFailure(Rule.READS, f"{where}: open gave {len(whole)} bytes, size_hint {item.size_hint}")
    if not connector.capabilities().range_read or not whole:
        return
    ranged = connector.read_range(item.ref, 0, len(whole), whole_budget)
    if ranged != whole:
        raise ConformanceFailure(Rule.READS, f"{where}: read_range(0, {len(whole)}) differs from open")
    clamped = connector.read_range(item.ref, 0, len(whole) + 10, Budgets(1, 1))
    if len(clamped) > 1:
        raise ConformanceFailure(Rule.READS, f"{where}: read_range gave {len(clamped)} bytes with max_bytes=1")
    if connector.read_range(item.ref, len(whole) // 2, len(whole), whole_budget) != whole[len(whole) // 2 :]:
        raise ConformanceFailure(Rule.READS, f"{where}: read_range from the middle differs from open")


def check_reads(factory: ConnectorFactory, case: ConformanceCase) -> None:
    """The first few items of the case read back whole and by range."""
    connector = factory()
    for item in _items(drain(factory(), case))[:READ_SAMPLE]:
        _check_item_reads(connector, item)


CHECKS: dict[str, Callable[[ConnectorFactory, ConformanceCase], object]] = {
    "drain": check_drain,
    "deterministic": check_deterministic,
    "token_fallback": check_token_fallback,
    "forbidden_fragments": check_forbidden_fragments,
    "split_points": check_split_points,
    "reads": check_reads,
}


def run_conformance(factory: ConnectorFactory, cases: Sequence[ConformanceCase]) -> None:
    """Every check on every case; raises the first `ConformanceFailure`, naming the case."""
    for case in cases:
        for name, check in CHECKS.items():
            try:
                check(factory, case)
            except ConformanceFailure as failure:
                raise ConformanceFailure(
                    failure.rule, f"case {case.name!r}, check {name}: {failure.detail}"
                ) from failure
