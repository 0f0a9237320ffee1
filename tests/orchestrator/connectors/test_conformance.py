"""The conformance harness: the in-memory connector passes it; broken connectors fail it by name."""

from __future__ import annotations

import dataclasses
import itertools
import os
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from partbuild.orchestrator.connectors.conformance import (
    ConformanceCase,
    ConformanceFailure,
    Rule,
    check_deterministic,
    check_drain,
    check_forbidden_fragments,
    check_reads,
    check_split_points,
    check_token_fallback,
    run_conformance,
    standard_cases,
)
from partbuild.orchestrator.connectors.conformance_pytest import conformance_suite
from partbuild.orchestrator.connectors.contract import Capabilities
from partbuild.orchestrator.connectors.in_memory import InMemoryConnector, MemoryItem
from partbuild.orchestrator.connectors.items import Location, Page
from partbuild.orchestrator.connectors.paging import Budgets, Cursor, KeyRange
from partbuild.orchestrator.connectors.toxic import ItemKey, ItemRef

from connectorkit import clicks_items, key, with_refs

SECRET = b"hunter2-api-key"
ITEMS = clicks_items(days=12)
CASES = [
    *standard_cases(secrets=(SECRET,)),
    ConformanceCase("one-day", Budgets(2, 900), KeyRange(key("clicks/date=2026-01-05"), key("clicks/date=2026-01-06"))),
    ConformanceCase("from-day-10", Budgets(4, 1500), KeyRange(key("clicks/date=2026-01-10"))),
    ConformanceCase("empty-range", Budgets(4, 1500), KeyRange(key("zzz"))),
]

# The reference passes every check on every case, with and without tokens.
TestInMemoryConformance = conformance_suite(lambda: InMemoryConnector(ITEMS), CASES)
TestInMemoryWithTokensConformance = conformance_suite(lambda: InMemoryConnector(ITEMS, tokens=True), CASES)


def test_run_conformance_passes_the_reference() -> None:
    run_conformance(lambda: InMemoryConnector(clicks_items(days=4), tokens=True), standard_cases())
    run_conformance(lambda: InMemoryConnector([MemoryItem(key("only"), b"x" * 99)]), standard_cases())
    run_conformance(lambda: InMemoryConnector([]), standard_cases())


# -- broken connectors, each breaking one rule


class Wrapper:
    """Delegates to an in-memory connector; subclasses break one rule."""

    def __init__(self, inner: InMemoryConnector) -> None:
        self.inner = inner
        self.tag = inner.tag

    def capabilities(self) -> Capabilities:
        return self.inner.capabilities()

    def fill_page(self, key_range: KeyRange, cursor: Cursor, budgets: Budgets) -> Page | None:
        return self.inner.fill_page(key_range, cursor, budgets)

    def choose_split_point(self, key_range: KeyRange, cursor: Cursor, budgets: Budgets) -> ItemKey | None:
        return self.inner.choose_split_point(key_range, cursor, budgets)

    def open(self, item_ref: ItemRef, budgets: Budgets):  # type: ignore[no-untyped-def]
        return self.inner.open(item_ref, budgets)

    def read_range(self, item_ref: ItemRef, offset: int, length: int, budgets: Budgets) -> bytes:
        return self.inner.read_range(item_ref, offset, length, budgets)


class RestartsEveryOtherPage(Wrapper):
    """Ignores the cursor on every second call: goes back to the start."""

    calls = 0

    def fill_page(self, key_range: KeyRange, cursor: Cursor, budgets: Budgets) -> Page | None:
        self.calls += 1
        return super().fill_page(key_range, Cursor() if self.calls % 2 == 0 else cursor, budgets)


class IgnoresMaxItems(Wrapper):
    def fill_page(self, key_range: KeyRange, cursor: Cursor, budgets: Budgets) -> Page | None:
        return super().fill_page(key_range, cursor, dataclasses.replace(budgets, max_items=budgets.max_items + 2))


class IgnoresMaxBytes(Wrapper):
    def fill_page(self, key_range: KeyRange, cursor: Cursor, budgets: Budgets) -> Page | None:
        return super().fill_page(key_range, cursor, dataclasses.replace(budgets, max_bytes=1 << 40))


class IgnoresKeyRangeEnd(Wrapper):
    def fill_page(self, key_range: KeyRange, cursor: Cursor, budgets: Budgets) -> Page | None:
        return super().fill_page(KeyRange(key_range.start), cursor, budgets)


class TrustsTokensOnly(Wrapper):
    """Resumes from a token it cannot read at the very start, instead of from the last key."""

    def fill_page(self, key_range: KeyRange, cursor: Cursor, budgets: Budgets) -> Page | None:
        if cursor.token is not None and cursor.token.raw_bytes().startswith(b"\xff"):
            cursor = Cursor()
        return super().fill_page(key_range, cursor, budgets)


class SplitsAtTheCursor(Wrapper):
    def capabilities(self) -> Capabilities:
        return dataclasses.replace(self.inner.capabilities(), split_hints=True)

    def choose_split_point(self, key_range: KeyRange, cursor: Cursor, budgets: Budgets) -> ItemKey | None:
        return cursor.last_key or self.inner.fill_page(key_range, cursor, budgets).items[0].key  # type: ignore[union-attr]


class ReadsPastTheBudget(Wrapper):
    def read_range(self, item_ref: ItemRef, offset: int, length: int, budgets: Budgets) -> bytes:
        return self.inner.read_range(item_ref, offset, length, Budgets(1, 1 << 40))


class Endless(Wrapper):
    """Makes up a new key after every page: never done."""

    def fill_page(self, key_range: KeyRange, cursor: Cursor, budgets: Budgets) -> Page | None:
        number = 0 if cursor.last_key is None else int(cursor.last_key.raw_bytes()) + 1
        return InMemoryConnector([MemoryItem(ItemKey(b"%09d" % number), b"x")]).fill_page(key_range, Cursor(), budgets)


_instances = itertools.count()


def nondeterministic() -> InMemoryConnector:
    """Each fresh connector sees one more raw day than the one before."""
    return InMemoryConnector(clicks_items(days=3 + next(_instances)))


def leaking(make_ref: Callable[[bytes], bytes]) -> Callable[[], InMemoryConnector]:
    return lambda: InMemoryConnector(with_refs(clicks_items(days=2), make_ref))


CWD = os.fsencode(os.getcwd())
ONE_PAGE_EACH = ConformanceCase("one-item", Budgets(1, 1 << 40), secrets=(SECRET,))
THREE = ConformanceCase("three", Budgets(3, 1 << 40), secrets=(SECRET,))
BROKEN = [
    ("non-monotonic", lambda: RestartsEveryOtherPage(InMemoryConnector(ITEMS)), check_drain, THREE, Rule.MONOTONIC),
    ("ignores max_items", lambda: IgnoresMaxItems(InMemoryConnector(ITEMS)), check_drain, THREE, Rule.MAX_ITEMS),
    (
        "ignores max_bytes",
        lambda: IgnoresMaxBytes(InMemoryConnector(ITEMS)),
        check_drain,
        ConformanceCase("bytes", Budgets(100, 10)),
        Rule.MAX_BYTES,
    ),
    (
        "ignores the key range end",
        lambda: IgnoresKeyRangeEnd(InMemoryConnector(ITEMS)),
        check_drain,
        ConformanceCase("key-range", Budgets(3, 1 << 40), KeyRange(None, key("clicks/date=2026-01-02"))),
        Rule.IN_KEY_RANGE,
    ),
    (
        "endless",
        lambda: Endless(InMemoryConnector([])),
        check_drain,
        dataclasses.replace(THREE, max_pages=50),
        Rule.TERMINATES,
    ),
    ("non-deterministic", nondeterministic, check_deterministic, THREE, Rule.DETERMINISTIC),
    (
        "restarts on a corrupt token",
        lambda: TrustsTokensOnly(InMemoryConnector(ITEMS, tokens=True)),
        check_token_fallback,
        THREE,
        Rule.TOKEN_FALLBACK,
    ),
    (
        "leaks the working dir",
        leaking(lambda k: CWD + b"/" + k),
        check_forbidden_fragments,
        THREE,
        Rule.FORBIDDEN_FRAGMENT,
    ),
    (
        "leaks a file URL",
        leaking(lambda k: b"file://" + CWD + b"/" + k),
        check_forbidden_fragments,
        THREE,
        Rule.FORBIDDEN_FRAGMENT,
    ),
    ("climbs out with ..", leaking(lambda k: b"../" + k), check_forbidden_fragments, THREE, Rule.FORBIDDEN_FRAGMENT),
    (
        "leaks a secret",
        leaking(lambda k: k + b"?sig=" + SECRET),
        check_forbidden_fragments,
        THREE,
        Rule.FORBIDDEN_FRAGMENT,
    ),
    (
        "splits at the cursor",
        lambda: SplitsAtTheCursor(InMemoryConnector(ITEMS)),
        check_split_points,
        ONE_PAGE_EACH,
        Rule.SPLIT_POINT,
    ),
    ("reads past max_bytes", lambda: ReadsPastTheBudget(InMemoryConnector(ITEMS)), check_reads, THREE, Rule.READS),
]


@pytest.mark.parametrize(("factory", "check", "case", "rule"), [b[1:] for b in BROKEN], ids=[b[0] for b in BROKEN])
def test_a_broken_connector_fails_with_the_rule_it_broke(factory, check, case, rule) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ConformanceFailure) as caught:
        check(factory, case)
    assert caught.value.rule is rule
    assert rule.name in str(caught.value) and rule.value in str(caught.value)
    # The failure names items by their redacted form only.
    assert SECRET.decode() not in str(caught.value) and os.getcwd() not in str(caught.value)


def test_run_conformance_names_the_case_and_check() -> None:
    with pytest.raises(ConformanceFailure, match=r"MAX_ITEMS .*case 'one-item', check drain: page 0 holds 3"):
        run_conformance(lambda: IgnoresMaxItems(InMemoryConnector(ITEMS)), standard_cases())


def test_the_forbidden_path_rule_ignores_paths_that_merely_contain_a_host_name() -> None:
    innocent = [b"data/tmp/x", b"root/tmpfoo", b"a..b/c", b"archive/work/home/file"]
    items = [MemoryItem(ItemKey(ref), b"x") for ref in innocent]
    check_forbidden_fragments(lambda: InMemoryConnector(items), THREE)


def test_locations_are_checked_too() -> None:
    leaky = InMemoryConnector(ITEMS)
    original = leaky.fill_page

    def fill_page(key_range: KeyRange, cursor: Cursor, budgets: Budgets) -> Page | None:
        page = original(key_range, cursor, budgets)
        if page is None:
            return None
        where = Location("raw file", url="file://" + os.getcwd() + "/x")
        return Page([dataclasses.replace(item, location=where) for item in page.items], page.token)

    leaky.fill_page = fill_page  # type: ignore[method-assign]
    with pytest.raises(ConformanceFailure, match="location url"):
        check_forbidden_fragments(lambda: leaky, THREE)


def test_the_in_memory_connector_meets_the_protocol() -> None:
    from partbuild.orchestrator.connectors.contract import Connector

    assert isinstance(InMemoryConnector([]), Connector)


@settings(max_examples=60, deadline=None)
@given(
    # No dots: a key of ".." would be a ref with a ".." segment, which the harness rightly refuses.
    st.dictionaries(
        st.binary(min_size=1, max_size=5).filter(lambda k: b"." not in k), st.integers(0, 300), max_size=40
    ),
    st.integers(1, 6),
    st.integers(1, 900),
    st.booleans(),
)
def test_any_in_memory_data_set_passes_the_harness(
    contents: dict[bytes, int], max_items: int, max_bytes: int, tokens: bool
) -> None:
    items = [MemoryItem(ItemKey(k), b"x" * size) for k, size in contents.items()]
    case = ConformanceCase("generated", Budgets(max_items, max_bytes), secrets=(SECRET,))
    run_conformance(lambda: InMemoryConnector(items, tokens=tokens), [case])
    drained = [
        item.key.raw_bytes() for page in check_drain(lambda: InMemoryConnector(items), case) for item in page.items
    ]
    assert drained == sorted(contents)
