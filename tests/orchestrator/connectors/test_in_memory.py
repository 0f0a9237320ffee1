"""The in-memory reference connector: paging, resume, tokens, budgets, split points, reads."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from partbuild.orchestrator.connectors.errors import EnumerateError, ReadError
from partbuild.orchestrator.connectors.in_memory import InMemoryConnector, MemoryItem
from partbuild.orchestrator.connectors.paging import Budgets, Cursor, KeyRange
from partbuild.orchestrator.connectors.toxic import ItemRef, ResumeToken

from connectorkit import clicks_items, key

BIG = 1 << 40


def drain_keys(connector: InMemoryConnector, budgets: Budgets, key_range: KeyRange | None = None) -> list[bytes]:
    cursor, keys = Cursor(), []
    while (page := connector.fill_page(key_range or KeyRange(), cursor, budgets)) is not None:
        keys += [item.key.raw_bytes() for item in page.items]
        cursor = page.cursor
    return keys


def test_items_come_sorted_by_key_in_pages() -> None:
    connector = InMemoryConnector([MemoryItem(key(k), b"x") for k in ["c", "a", "b", "e", "d"]])
    first = connector.fill_page(KeyRange(), Cursor(), Budgets(2, BIG))
    assert first is not None and [i.key for i in first.items] == [key("a"), key("b")]
    assert first.token is None  # tokens are off by default
    assert drain_keys(connector, Budgets(2, BIG)) == [b"a", b"b", b"c", b"d", b"e"]


def test_key_ranges_are_half_open() -> None:
    connector = InMemoryConnector([MemoryItem(key(k), b"x") for k in "abcdef"])
    assert drain_keys(connector, Budgets(10, BIG), KeyRange(key("b"), key("e"))) == [b"b", b"c", b"d"]
    assert drain_keys(connector, Budgets(10, BIG), KeyRange(key("bb"), key("dd"))) == [b"c", b"d"]
    assert drain_keys(connector, Budgets(10, BIG), KeyRange(None, key("b"))) == [b"a"]
    assert connector.fill_page(KeyRange(key("x")), Cursor(), Budgets(1, 1)) is None


def test_resume_from_a_key_that_is_not_an_item() -> None:
    connector = InMemoryConnector([MemoryItem(key(k), b"x") for k in ["a", "c", "e"]])
    page = connector.fill_page(KeyRange(), Cursor(key("b")), Budgets(10, BIG))
    assert page is not None and [i.key for i in page.items] == [key("c"), key("e")]
    assert connector.fill_page(KeyRange(), Cursor(key("e")), Budgets(10, BIG)) is None


def test_byte_budget_and_the_progress_rule() -> None:
    sizes = [5, 50, 3, 3, 3, 100]
    connector = InMemoryConnector([MemoryItem(key(f"k{i}"), b"x" * n) for i, n in enumerate(sizes)])
    pages, cursor = [], Cursor()
    while (page := connector.fill_page(KeyRange(), cursor, Budgets(10, 10))) is not None:
        pages.append([item.size for item in page.items])
        cursor = page.cursor
    # 50 and 100 exceed the budget alone: each goes out as a page of its own.
    assert pages == [[5], [50], [3, 3, 3], [100]]


def test_deadline() -> None:
    now = [0.0]

    def clock() -> float:
        now[0] += 1.0  # every look at the clock takes a second
        return now[0]

    connector = InMemoryConnector([MemoryItem(key(f"k{i}"), b"x") for i in range(10)], clock=clock)
    page = connector.fill_page(KeyRange(), Cursor(), Budgets(10, BIG, deadline=3.5))
    assert page is not None and 1 <= len(page) < 10
    with pytest.raises(EnumerateError, match="deadline") as caught:
        connector.fill_page(KeyRange(), Cursor(), Budgets(10, BIG, deadline=0.5))
    assert caught.value.is_retryable


def test_tokens_resume_and_bad_tokens_fall_back() -> None:
    connector = InMemoryConnector([MemoryItem(key(f"k{i:02d}"), b"x") for i in range(20)], tokens=True)
    assert connector.capabilities().token_resume
    first = connector.fill_page(KeyRange(), Cursor(), Budgets(5, BIG))
    second = connector.fill_page(KeyRange(), first.cursor, Budgets(5, BIG)) if first else None
    assert first is not None and second is not None and first.token is not None
    expected = [i.key for i in second.items]
    for token in (first.token, second.token, ResumeToken(b"garbage"), ResumeToken(first.token.raw_bytes()[:-1] + b"?")):
        page = connector.fill_page(KeyRange(), Cursor(first.last_key, token), Budgets(5, BIG))
        assert page is not None and [i.key for i in page.items] == expected


def test_a_token_of_other_data_falls_back() -> None:
    old = InMemoryConnector([MemoryItem(key(k), b"x") for k in "abcdef"], tokens=True)
    new = InMemoryConnector([MemoryItem(key(k), b"x") for k in "abxcdef"], tokens=True)
    page = old.fill_page(KeyRange(), Cursor(), Budgets(2, BIG))
    assert page is not None
    resumed = new.fill_page(KeyRange(), page.cursor, Budgets(10, BIG))
    assert resumed is not None and [i.key.raw_bytes() for i in resumed.items] == [b"c", b"d", b"e", b"f", b"x"]


def test_split_point_is_the_byte_median() -> None:
    sizes = [1, 1, 1, 1, 96, 1]  # the heavy item decides
    connector = InMemoryConnector([MemoryItem(key(f"k{i}"), b"x" * n) for i, n in enumerate(sizes)])
    split = connector.choose_split_point(KeyRange(), Cursor(), Budgets(1, 1))
    assert split in (key("k4"), key("k5"))
    assert connector.choose_split_point(KeyRange(), Cursor(key("k4")), Budgets(1, 1)) is None  # one item left
    equal = InMemoryConnector([MemoryItem(key(f"k{i}"), b"x" * 10) for i in range(10)])
    assert equal.choose_split_point(KeyRange(), Cursor(), Budgets(1, 1)) == key("k5")
    assert equal.choose_split_point(KeyRange(), Cursor(key("k5")), Budgets(1, 1)) == key("k8")


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 1000), min_size=2, max_size=60), st.data())
def test_split_point_is_inside_and_nearest_the_middle(sizes: list[int], data: st.DataObject) -> None:
    connector = InMemoryConnector([MemoryItem(key(f"k{i:03d}"), b"x" * n) for i, n in enumerate(sizes)])
    start = data.draw(st.integers(0, len(sizes) - 2))
    cursor = Cursor(key(f"k{start - 1:03d}")) if start else Cursor()
    split = connector.choose_split_point(KeyRange(), cursor, Budgets(1, 1))
    assert split is not None
    index = int(split.raw_bytes()[1:])
    assert start < index < len(sizes)
    remaining = sizes[start:]
    best = min(abs(2 * sum(remaining[: s - start]) - sum(remaining)) for s in range(start + 1, len(sizes)))
    assert abs(2 * sum(sizes[start:index]) - sum(remaining)) == best


def test_reads() -> None:
    connector = InMemoryConnector([MemoryItem(key("a"), b"0123456789", ItemRef(b"ref-a"))])
    assert connector.open(ItemRef(b"ref-a"), Budgets(1, 100)).read() == b"0123456789"
    assert connector.read_range(ItemRef(b"ref-a"), 2, 3, Budgets(1, 100)) == b"234"
    assert connector.read_range(ItemRef(b"ref-a"), 2, 50, Budgets(1, 4)) == b"2345"  # clamped to max_bytes
    assert connector.read_range(ItemRef(b"ref-a"), 20, 5, Budgets(1, 100)) == b""
    with pytest.raises(ReadError, match="exceeds max_bytes"):
        connector.open(ItemRef(b"ref-a"), Budgets(1, 5))
    with pytest.raises(ReadError, match="no item has this ref") as caught:
        connector.open(ItemRef(b"secret-ref"), Budgets(1, 5))
    assert not caught.value.is_retryable and "secret" not in str(caught.value)
    with pytest.raises(TypeError, match="offset must be an int"):
        connector.read_range(ItemRef(b"ref-a"), "2", 3, Budgets(1, 100))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="length must be at least 0"):
        connector.read_range(ItemRef(b"ref-a"), 0, -1, Budgets(1, 100))


def test_construction_rejects_duplicates() -> None:
    with pytest.raises(ValueError, match="share a key"):
        InMemoryConnector([MemoryItem(key("a"), b""), MemoryItem(key("a"), b"x")])
    with pytest.raises(ValueError, match="share a ref"):
        InMemoryConnector([MemoryItem(key("a"), b"", ItemRef(b"r")), MemoryItem(key("b"), b"", ItemRef(b"r"))])


def test_w1_shaped_tree_drains_in_path_order() -> None:
    items = clicks_items(days=3)
    keys = drain_keys(InMemoryConnector(items), Budgets(2, 500))
    assert keys == sorted(item.key.raw_bytes() for item in items)
    assert keys[:4] == [
        b"clicks/date=2026-01-01/_SUCCESS",
        b"clicks/date=2026-01-01/part-00000.json",
        b"clicks/date=2026-01-01/part-00001.json",
        b"clicks/date=2026-01-01/part-00002.json",
    ]
