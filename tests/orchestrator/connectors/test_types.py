"""The connector contract's value types: validation, redaction, strictness."""

from __future__ import annotations

import copy
import json
import logging
import pickle
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from partbuild.orchestrator.connectors.contract import Capabilities
from partbuild.orchestrator.connectors.errors import EnumerateError, ErrorClass, ReadError, sanitize_message
from partbuild.orchestrator.connectors.items import (
    ConnectorTag,
    Location,
    Page,
    ScanItem,
    StableItemId,
    Version,
    VersionStrength,
)
from partbuild.orchestrator.connectors.paging import Budgets, Cursor, KeyRange
from partbuild.orchestrator.connectors.toxic import ItemKey, ItemRef, ResumeToken

SECRET = b"AKIAIOSFODNN7EXAMPLE-s3cr3t"
REDACTED = r"^(ItemKey|ItemRef|ResumeToken)\(len=\d+, hash=[0-9a-f]{8}\.\.\)$"


def item(key: bytes, size: int | None = 1, tag: str = "test") -> ScanItem:
    k = ItemKey(key)
    return ScanItem(k, ItemRef(key), StableItemId.derive(ConnectorTag(tag), k), Version.from_content(key), size)


@pytest.mark.parametrize("kind", [ItemKey, ItemRef, ResumeToken])
def test_toxic_bytes_never_print_their_bytes(kind: type) -> None:
    value = kind(SECRET)
    for shown in (repr(value), str(value), f"{value}", f"{value!r}", f"{value:>60}", format(value, "")):
        assert "s3cr3t" not in shown

    assert re.match(REDACTED, repr(value))
    assert repr(value) == f"{kind.__name__}(len={len(SECRET)}, hash={value.digest_prefix()}..)"
    assert value.raw_bytes() == SECRET


def test_toxic_bytes_stay_out_of_logs_and_containers(caplog: pytest.LogCaptureFixture) -> None:
    key, token = ItemKey(SECRET), ResumeToken(SECRET)
    cursor = Cursor(key, token)
    with caplog.at_level(logging.DEBUG):
        logging.getLogger("partbuild.test").info("resuming at %s with %r; cursor %s", key, token, cursor)
        logging.getLogger("partbuild.test").info("items %s", [item(SECRET)])
    assert "s3cr3t" not in caplog.text
    assert "ItemKey(len=" in caplog.text
    assert "s3cr3t" not in repr(Page([item(SECRET)], token))


@pytest.mark.parametrize("kind", [ItemKey, ItemRef, ResumeToken])
def test_toxic_bytes_refuse_silent_serialization(kind: type) -> None:
    value = kind(SECRET)
    with pytest.raises(TypeError, match="refuses to be pickled"):
        pickle.dumps(value)
    with pytest.raises(TypeError, match="refuses to be pickled"):
        pickle.dumps(Cursor(ItemKey(SECRET)))
    with pytest.raises(TypeError):
        json.dumps(value)
    with pytest.raises(TypeError):
        bytes(value)
    assert copy.deepcopy(value) is value


def test_pydantic_serializes_the_redacted_form() -> None:
    from pydantic import BaseModel

    class Holder(BaseModel):
        key: ItemKey

    held = Holder(key=ItemKey(SECRET))
    assert "s3cr3t" not in held.model_dump_json()
    assert "ItemKey(len=" in held.model_dump_json()
    with pytest.raises(ValueError):
        Holder(key=SECRET)  # type: ignore[arg-type]


@pytest.mark.parametrize(("kind", "limit"), [(ItemKey, 4096), (ItemRef, 16384), (ResumeToken, 16384)])
def test_toxic_bytes_bounds(kind: type, limit: int) -> None:
    assert len(kind(b"x" * limit)) == limit
    with pytest.raises(ValueError, match=rf"must be 1\.\.{limit} bytes, got {limit + 1}"):
        kind(b"x" * (limit + 1))
    with pytest.raises(ValueError, match="got 0"):
        kind(b"")
    with pytest.raises(TypeError, match="not str"):
        kind("secret text")


def test_toxic_errors_never_quote_the_value() -> None:
    with pytest.raises(ValueError) as caught:
        ItemKey(SECRET * 200)
    assert "s3cr3t" not in str(caught.value)
    with pytest.raises(TypeError) as typed:
        ItemKey(SECRET.decode())  # type: ignore[arg-type]
    assert "s3cr3t" not in str(typed.value)


def test_toxic_bytes_are_immutable_and_typed_for_equality() -> None:
    key = ItemKey(b"a")
    with pytest.raises(AttributeError):
        key._raw = b"b"  # type: ignore[misc]
    assert key == ItemKey(b"a") and hash(key) == hash(ItemKey(b"a"))
    assert key != ItemRef(b"a")
    assert len({key, ItemKey(b"a"), ItemRef(b"a")}) == 2
    with pytest.raises(TypeError):
        _ = ItemRef(b"a") < ItemRef(b"b")  # refs are looked up, not ranged
    with pytest.raises(TypeError):
        _ = key < b"b"  # type: ignore[operator]


@given(st.binary(min_size=1, max_size=64), st.binary(min_size=1, max_size=64))
def test_item_keys_order_by_bytes(a: bytes, b: bytes) -> None:
    ka, kb = ItemKey(a), ItemKey(b)
    assert (ka < kb) == (a < b) and (ka <= kb) == (a <= b) and (ka > kb) == (a > b) and (ka >= kb) == (a >= b)
    assert (ka == kb) == (a == b)
    assert sorted([kb, ka]) == [ItemKey(x) for x in sorted([b, a])]


def test_cursor_token_needs_a_last_key() -> None:
    with pytest.raises(ValueError, match="token needs a last_key"):
        Cursor(None, ResumeToken(b"t"))
    assert Cursor.initial() == Cursor()
    assert Cursor.after(ItemKey(b"k"), ResumeToken(b"t")).without_token() == Cursor(ItemKey(b"k"))
    with pytest.raises(TypeError, match=r"Cursor\.last_key must be ItemKey"):
        Cursor(b"k")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"Cursor\.token must be ResumeToken"):
        Cursor(ItemKey(b"k"), ItemRef(b"t"))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"max_items": 0, "max_bytes": 1}, ValueError, "max_items must be at least 1, got 0"),
        ({"max_items": 1, "max_bytes": 0}, ValueError, "max_bytes must be at least 1, got 0"),
        ({"max_items": -3, "max_bytes": 1}, ValueError, "max_items must be at least 1, got -3"),
        ({"max_items": True, "max_bytes": 1}, TypeError, "max_items must be an int, not bool"),
        ({"max_items": "10", "max_bytes": 1}, TypeError, "max_items must be an int, not str"),
        ({"max_items": 1, "max_bytes": 1.5}, TypeError, "max_bytes must be an int, not float"),
        ({"max_items": 1, "max_bytes": 1, "deadline": True}, TypeError, "deadline must be a number"),
        ({"max_items": 1, "max_bytes": 1, "deadline": "5"}, TypeError, "deadline must be a number"),
        ({"max_items": 1, "max_bytes": 1, "deadline": float("nan")}, ValueError, "NaN"),
    ],
)
def test_budgets_are_strict(kwargs: dict[str, object], error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message):
        Budgets(**kwargs)  # type: ignore[arg-type]


def test_budget_deadline() -> None:
    assert not Budgets(1, 1).expired(1e12)
    assert not Budgets(1, 1, deadline=10).expired(9.9)
    assert Budgets(1, 1, deadline=10).expired(10)


def test_key_range_bounds() -> None:
    a, b = ItemKey(b"a"), ItemKey(b"b")
    assert a in KeyRange(a, b) and b not in KeyRange(a, b) and b in KeyRange(a) and a in KeyRange(None, b)
    assert ItemRef(b"a") not in KeyRange()
    with pytest.raises(ValueError, match="start < end"):
        KeyRange(a, a)
    with pytest.raises(ValueError, match="start < end"):
        KeyRange(b, a)
    with pytest.raises(TypeError, match=r"KeyRange\.start"):
        KeyRange(b"a")  # type: ignore[arg-type]


def test_stable_item_ids_are_separated_by_connector_tag() -> None:
    key = ItemKey(b"events/day=1/part-0")
    fs, mem = ConnectorTag("fslocal"), ConnectorTag("inmem")
    assert StableItemId.derive(fs, key) == StableItemId.derive(ConnectorTag("fslocal"), ItemKey(key.raw_bytes()))
    assert StableItemId.derive(fs, key) != StableItemId.derive(mem, key)
    assert StableItemId.derive(fs, key) != StableItemId.derive(fs, ItemKey(b"events/day=1/part-1"))
    assert len(StableItemId.derive(fs, key).hex()) == 64
    for bad in ("", "Upper", "1abc", "x" * 33, "has space"):
        with pytest.raises(ValueError, match="ConnectorTag"):
            ConnectorTag(bad)


def test_versions() -> None:
    assert Version.from_content(b"abc") == Version.from_content(b"abc")
    assert Version.from_content(b"abc") != Version.from_content(b"abd")
    assert Version.from_content(b"abc").is_strong
    weak = Version.from_metadata(10, 1_700_000_000_000_000_000)
    assert weak.strength is VersionStrength.WEAK and not weak.is_strong
    assert weak != Version.from_metadata(11, 1_700_000_000_000_000_000)
    assert Version.strong(b'"etag-1"') != Version(VersionStrength.WEAK, b'"etag-1"')
    with pytest.raises(TypeError, match="size must be an int"):
        Version.from_metadata("10", 1)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        Version.strong(b"")


def test_scan_items_and_pages() -> None:
    with pytest.raises(ValueError, match="never empty"):
        Page([])
    with pytest.raises(ValueError, match="strictly increase"):
        Page([item(b"b"), item(b"a")])
    with pytest.raises(ValueError, match="strictly increase"):
        Page([item(b"a"), item(b"a")])
    page = Page([item(b"a", 3), item(b"b", None)], ResumeToken(b"t"))
    assert page.cursor == Cursor(ItemKey(b"b"), ResumeToken(b"t"))
    assert page.total_size == 3 and len(page) == 2
    with pytest.raises(TypeError, match="size_hint must be an int"):
        item(b"a", "3")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="size_hint must be at least 0"):
        item(b"a", -1)
    with pytest.raises(TypeError, match=r"ScanItem\.ref must be ItemRef"):
        ScanItem(ItemKey(b"a"), ItemKey(b"a"), StableItemId(b"\0" * 32), Version.strong(b"v"))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"Location\.display"):
        Location("")


def test_capabilities_default_to_none() -> None:
    caps = Capabilities()
    assert not (caps.seek_by_key or caps.token_resume or caps.range_read or caps.split_hints)
    with pytest.raises(TypeError):
        Capabilities(range_read=1)  # type: ignore[arg-type]


def test_errors_are_classed_and_sanitized() -> None:
    assert EnumerateError.retryable("timeout").is_retryable
    assert not EnumerateError.permanent("403").is_retryable
    limited = EnumerateError.rate_limited("slow down", 2.5)
    assert limited.error_class is ErrorClass.RETRYABLE and limited.retry_after == 2.5
    assert str(limited) == "retryable, retry after 2.5s: slow down"
    assert ReadError.unsupported("range reads").message == "unsupported: range reads"
    forged = EnumerateError.permanent("denied\nINFO admin logged in\r\x1b[2J\u202etxt.exe\x00")
    assert forged.message == "deniedINFO admin logged in[2Jtxt.exe"
    assert "\n" not in str(forged)
    assert len(sanitize_message("x" * 5000)) == 1024
    with pytest.raises(ValueError, match="retry_after must be finite"):
        EnumerateError.rate_limited("x", -1)
    with pytest.raises(TypeError, match="retry_after must be a number"):
        EnumerateError.rate_limited("x", "5")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="permanent error has no retry_after"):
        EnumerateError(ErrorClass.PERMANENT, "x", 1.0)


@given(st.text())
def test_sanitized_messages_hold_no_control_characters(text: str) -> None:
    import unicodedata

    assert not any(unicodedata.category(ch).startswith("C") for ch in sanitize_message(text))


def test_errors_in_logs_are_one_line(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        logging.getLogger("partbuild.test").warning("scan failed: %s", EnumerateError.retryable("a\nFAKE line"))
    assert len(caplog.records) == 1 and "\n" not in caplog.records[0].getMessage()
