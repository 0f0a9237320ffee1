"""The object-store connector against a real S3-compatible server (moto in server mode, a child process).

Conformance (budget shapes, tokens, a prefix, key ranges), versions from ETags,
error classes with clean messages, secrets kept out of every message and log
line, and resume from a persisted cursor on a fresh connector.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import logging
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip("boto3", reason="needs pip install 'partbuild[s3]'")
pytest.importorskip("moto.server", reason="needs pip install 'moto[server]'")

from partbuild.orchestrator.connectors.conformance import ConformanceCase, run_conformance, standard_cases
from partbuild.orchestrator.connectors.conformance_pytest import conformance_suite
from partbuild.orchestrator.connectors.contract import Connector
from partbuild.orchestrator.connectors.errors import ConnectorError, EnumerateError, ReadError
from partbuild.orchestrator.connectors.object_store import OBJECT_STORE_TAG, ObjectStoreConnector
from partbuild.orchestrator.connectors.paging import Budgets, Cursor, KeyRange
from partbuild.orchestrator.connectors.s3_config import ObjectStoreConfig, Secret
from partbuild.orchestrator.connectors.toxic import ItemKey, ItemRef, ResumeToken

from s3kit import SECRETS, MotoServer, config_for, drain_keys, fill_bucket, free_port

pytestmark = pytest.mark.process  # moto's S3 server, one per module

BIG = 1 << 40
_SERVER: MotoServer | None = None


def server() -> MotoServer:
    assert _SERVER is not None, "the moto server fixture is not running"
    return _SERVER


@pytest.fixture(scope="module", autouse=True)
def moto_server() -> Iterator[MotoServer]:
    """One moto server for the module, with the conformance bucket filled; killed at teardown."""
    global _SERVER
    running = MotoServer()
    _SERVER = running
    try:
        fill_bucket(running.client(), "conformance", CONFORMANCE_OBJECTS)
        yield running
    finally:
        _SERVER = None
        running.stop()


def _clicks() -> dict[str, bytes]:
    objects: dict[str, bytes] = {}
    for day in range(1, 7):
        folder = f"raw/clicks/date=2026-01-{day:02d}"
        for part in range(2):
            objects[f"{folder}/part-{part:05d}.csv"] = b"user,url\n" + b"u,x\n" * (day * 40 + part * 300)
        objects[f"{folder}/_SUCCESS"] = b""
    return objects


CONFORMANCE_OBJECTS = {
    **_clicks(),
    "raw/": b"",  # the prefix itself: skipped (an empty relative key)
    "raw/a/../b": b"escape",  # a '..' segment: skipped
    "raw/big.bin": b"\x00" * 5000,  # alone over the byte budgets
    "raw/unicode/\u00fcber/x": b"u",
    "raw/unicode/\u65e5\u672c/y": b"ja",
    "raw/unicode/\U0001f600": b"emoji",
    "raw!sibling": b"outside the prefix",
    "rawer/z": b"outside the prefix",
    "other/x": b"outside the prefix",
}


def key(text: str | bytes) -> ItemKey:
    return ItemKey(text.encode() if isinstance(text, str) else text)


def _prefixed() -> ObjectStoreConnector:
    return server().connector("conformance", "raw/")


def _unprefixed() -> ObjectStoreConnector:
    return server().connector("conformance")


CASES = [
    *standard_cases(secrets=SECRETS),
    ConformanceCase("one-day", Budgets(2, 900), KeyRange(key("clicks/date=2026-01-03"), key("clicks/date=2026-01-04"))),
    ConformanceCase("from-day-5", Budgets(2, BIG), KeyRange(key("clicks/date=2026-01-05")), SECRETS),
    ConformanceCase("inside-a-name", Budgets(3, BIG), KeyRange(key("b"), key("clicks/date=2026-01-02/part"))),
    ConformanceCase("not-utf8-bounds", Budgets(2, BIG), KeyRange(key(b"clicks/date=2026-01-05\xff"), key(b"u\xc3"))),
    ConformanceCase("empty-range", Budgets(4, 1500), KeyRange(key("zzz"))),
    ConformanceCase("deadline-far", Budgets(5, 2000, deadline=time.monotonic() + 3600)),
]

TestObjectStoreConformance = conformance_suite(_prefixed, CASES)

UNPREFIXED_CASES = [
    ConformanceCase("whole-bucket", Budgets(4, BIG), secrets=SECRETS),
    ConformanceCase("raw-range", Budgets(3, 4096), KeyRange(key("raw/clicks/date=2026-01-02"), key("raw/u"))),
]

TestUnprefixedConformance = conformance_suite(_unprefixed, UNPREFIXED_CASES)


def _expected_keys(prefix: str, objects: dict[str, bytes]) -> list[bytes]:
    held = (name.encode()[len(prefix.encode()) :] for name in objects if name.startswith(prefix))
    return sorted(rel for rel in held if rel and b".." not in rel.split(b"/"))


def test_meets_the_protocol_and_lists_in_utf8_byte_order() -> None:
    connector = _prefixed()
    assert isinstance(connector, Connector)
    caps = connector.capabilities()
    assert (caps.seek_by_key, caps.token_resume, caps.range_read, caps.split_hints) == (True, True, True, True)
    assert drain_keys(connector, Budgets(7, BIG)) == _expected_keys("raw/", CONFORMANCE_OBJECTS)
    assert connector.stats.skipped == {"the prefix itself": 1, "a '.' or '..' segment": 1}


def test_items_have_relative_refs_strong_etag_versions_sizes_and_s3_locations() -> None:
    page = _prefixed().fill_page(KeyRange(key("big.bin")), Cursor(), Budgets(1, BIG))
    assert page is not None
    (item,) = page.items
    assert item.ref == ItemRef(b"big.bin")
    assert item.version.is_strong
    # A simple upload's ETag is the MD5 of the content, quotes stripped.
    assert item.version.value == hashlib.md5(b"\x00" * 5000).hexdigest().encode()
    assert item.size_hint == 5000
    assert item.location is not None and item.location.url == "s3://conformance/raw/big.bin"
    assert item.item_id.digest == item.item_id.derive(OBJECT_STORE_TAG, item.key).digest
    assert (
        ObjectStoreConnector(server().config("conformance", "raw/"), locations=False)
        .fill_page(KeyRange(key("big.bin")), Cursor(), Budgets(1, BIG))
        .items[0]
        .location
        is None
    )  # type: ignore[union-attr]


def test_full_pages_carry_s3_continuation_tokens_that_resume_like_the_key() -> None:
    connector = _prefixed()
    budgets = Budgets(3, BIG)
    first = connector.fill_page(KeyRange(), Cursor(), budgets)
    assert first is not None and first.token is not None
    with_token = drain_keys_from(connector, first.cursor, budgets)
    without = drain_keys_from(connector, first.cursor.without_token(), budgets)
    assert with_token == without == _expected_keys("raw/", CONFORMANCE_OBJECTS)[3:]
    # A byte budget cutting a page mid-response hands out no token: the key resumes as cheaply.
    cut = connector.fill_page(KeyRange(), Cursor(), Budgets(50, 1))
    assert cut is not None and len(cut) == 1 and cut.token is None


def test_a_page_larger_than_one_s3_response_spans_several_and_still_ends_with_a_token() -> None:
    client = server().client()
    client.create_bucket(Bucket="many-objects")
    names = [f"n/{index:05d}" for index in range(1050)]
    with ThreadPoolExecutor(8) as pool:  # PUTs are round trips: overlap them
        list(pool.map(lambda name: client.put_object(Bucket="many-objects", Key=name, Body=b"x"), names))
    connector = server().connector("many-objects", "n/")
    budgets = Budgets(1020, BIG)  # S3 answers at most 1,000 keys: 1,000 + 20, then 30
    first = connector.fill_page(KeyRange(), Cursor(), budgets)
    assert first is not None and len(first) == 1020 and first.token is not None
    assert connector.stats.requests == 2
    second = connector.fill_page(KeyRange(), first.cursor, budgets)
    assert second is not None and len(second) == 30
    keys = [item.key.raw_bytes() for page in (first, second) for item in page.items]
    assert keys == [name[2:].encode() for name in names]
    assert connector.fill_page(KeyRange(), second.cursor, budgets) is None


def test_a_token_from_another_prefix_is_ignored() -> None:
    budgets = Budgets(2, BIG)
    other = _unprefixed().fill_page(KeyRange(), Cursor(), budgets)
    assert other is not None and other.token is not None
    mine = _prefixed()
    forged = Cursor(key("clicks/date=2026-01-01/_SUCCESS"), other.token)
    assert drain_keys_from(mine, forged, budgets) == drain_keys_from(mine, forged.without_token(), budgets)


def test_a_token_the_server_rejects_falls_back_to_the_key() -> None:
    from partbuild.orchestrator.connectors.s3_keys import make_token

    budgets = Budgets(3, BIG)
    mine = _prefixed()
    last = key("clicks/date=2026-01-02/part-00000.csv")
    bogus = make_token("conformance", "raw/", last, "not-a-token-this-server-ever-issued")
    assert bogus is not None
    cursor = Cursor(last, bogus)
    assert drain_keys_from(mine, cursor, budgets) == drain_keys_from(mine, cursor.without_token(), budgets)


def drain_keys_from(connector: ObjectStoreConnector, cursor: Cursor, budgets: Budgets) -> list[bytes]:
    keys = []
    while (page := connector.fill_page(KeyRange(), cursor, budgets)) is not None:
        keys.extend(item.key.raw_bytes() for item in page.items)
        cursor = page.cursor
    return keys


def test_split_point_halves_the_remaining_bytes() -> None:
    connector = _prefixed()
    split = connector.choose_split_point(KeyRange(), Cursor(), Budgets(1000, BIG))
    assert split is not None
    sizes = {
        rel: len(CONFORMANCE_OBJECTS["raw/" + rel.decode()]) for rel in _expected_keys("raw/", CONFORMANCE_OBJECTS)
    }
    below = sum(size for rel, size in sizes.items() if rel < split.raw_bytes())
    assert 0.3 < below / sum(sizes.values()) < 0.7


_TEXT = st.text(st.characters(blacklist_categories=("Cs",), min_codepoint=0), min_size=1, max_size=6)
_CHARS_NEAR_EDGES = st.sampled_from(["\x00", "\x01", "a", "\x7f", "\u0080", "\ud7ff", "\ue000", "\U0010ffff", "/"])
_EDGY_TEXT = st.lists(_CHARS_NEAR_EDGES, min_size=1, max_size=5).map("".join)


@settings(max_examples=300, deadline=None)
@given(
    bound=st.one_of(_TEXT.map(str.encode), _EDGY_TEXT.map(str.encode), st.binary(min_size=1, max_size=6)),
    keys=st.lists(st.one_of(_TEXT, _EDGY_TEXT), min_size=1, max_size=10),
    inclusive=st.booleans(),
)
def test_start_after_never_skips_a_key_in_the_range(bound: bytes, keys: list[str], inclusive: bool) -> None:
    from partbuild.orchestrator.connectors.s3_keys import start_after

    after = start_after("p/", bound, inclusive)
    assert after is None or after.startswith("p/")
    for text in keys:
        raw = text.encode()
        if raw > bound or (inclusive and raw == bound):
            # S3 compares whole keys by UTF-8 bytes; StartAfter is exclusive.
            assert after is None or ("p/" + text).encode() > after.encode()


# -- versions


def test_overwriting_an_object_changes_its_version_and_the_same_bytes_keep_it() -> None:
    client = server().client()
    fill_bucket(client, "versions", {"day/part-0": b"first rows\n", "day/part-1": b"stable\n"})
    connector = server().connector("versions")

    def versions() -> dict[bytes, bytes]:
        page = connector.fill_page(KeyRange(), Cursor(), Budgets(10, BIG))
        assert page is not None
        return {item.key.raw_bytes(): item.version.value for item in page.items}

    before = versions()
    fill_bucket(client, "versions", {"day/part-0": b"corrected rows\n", "day/part-1": b"stable\n"})
    after = versions()
    assert after[b"day/part-0"] != before[b"day/part-0"]
    assert after[b"day/part-1"] == before[b"day/part-1"]


# -- reads


def test_reads_whole_objects_and_ranges_within_budgets() -> None:
    connector = _prefixed()
    ref = ItemRef(b"clicks/date=2026-01-01/part-00000.csv")
    data = CONFORMANCE_OBJECTS["raw/clicks/date=2026-01-01/part-00000.csv"]
    with connector.open(ref, Budgets(1, len(data))) as reader:
        assert reader.read() == data
    assert connector.read_range(ref, 5, 10, Budgets(1, BIG)) == data[5:15]
    assert connector.read_range(ref, 5, 10, Budgets(1, 3)) == data[5:8]
    assert connector.read_range(ref, len(data), 10, Budgets(1, BIG)) == b""
    assert connector.read_range(ItemRef(b"clicks/date=2026-01-01/_SUCCESS"), 0, 10, Budgets(1, BIG)) == b""
    with pytest.raises(ReadError) as too_big:
        connector.open(ref, Budgets(1, len(data) - 1))
    assert not too_big.value.is_retryable


def test_reads_refuse_missing_objects_and_escaping_refs_permanently() -> None:
    connector = _prefixed()
    for ref in (b"no/such/object", b"a/../b", b"\xff\xfe"):
        with pytest.raises(ReadError) as caught:
            connector.read_range(ItemRef(ref), 0, 1, Budgets(1, BIG))
        assert not caught.value.is_retryable
        assert ref.decode("utf-8", "replace") not in caught.value.message


# -- errors and secrets


def test_a_missing_bucket_is_permanent_with_a_clean_message() -> None:
    connector = server().connector("no-such-bucket-here", "secret/prefix/")
    with pytest.raises(EnumerateError) as caught:
        connector.fill_page(KeyRange(), Cursor(), Budgets(5, BIG))
    error = caught.value
    assert not error.is_retryable
    assert "NoSuchBucket" in error.message and "404" in error.message
    _assert_clean(str(error), "no-such-bucket-here", "secret/prefix")


def test_a_server_that_is_down_is_retryable_with_a_clean_message(caplog: pytest.LogCaptureFixture) -> None:
    config = config_for(f"http://127.0.0.1:{free_port()}", "closed-bucket", "hidden/prefix/", connect_timeout=1.0)
    connector = ObjectStoreConnector(config)
    caplog.set_level(logging.DEBUG)
    cursor = Cursor(key("some/secret/key"))
    with pytest.raises(EnumerateError) as listing:
        connector.fill_page(KeyRange(), cursor, Budgets(5, BIG))
    with pytest.raises(ReadError) as reading:
        connector.read_range(ItemRef(b"some/secret/key"), 0, 1, Budgets(1, BIG))
    for error in (listing.value, reading.value):
        assert error.is_retryable
        assert "EndpointConnectionError" in error.message
        _assert_clean(str(error), "closed-bucket", "hidden/prefix", "some/secret/key", "127.0.0.1")
        _assert_clean(repr(error), "closed-bucket", "hidden/prefix", "some/secret/key")
    _assert_clean(caplog.text, "some/secret/key", "closed-bucket")


def test_a_server_killed_mid_scan_fails_the_next_page_retryable_from_the_same_cursor() -> None:
    doomed = MotoServer()
    try:
        fill_bucket(doomed.client(), "doomed", {f"k{index:02d}": b"x" for index in range(6)})
        connector = doomed.connector("doomed")
        first = connector.fill_page(KeyRange(), Cursor(), Budgets(2, BIG))
        assert first is not None
        doomed.stop()
        with pytest.raises(EnumerateError) as caught:
            connector.fill_page(KeyRange(), first.cursor, Budgets(2, BIG))
        assert caught.value.is_retryable and caught.value.retry_after is None
        _assert_clean(str(caught.value), "doomed", "k01")
    finally:
        doomed.stop()


def test_secrets_never_show_in_repr_errors_or_logs(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)  # botocore's wire traces would quote the Authorization header
    config = server().config("conformance", "raw/")
    connector = ObjectStoreConnector(config)
    assert drain_keys(connector, Budgets(10, BIG))
    connector.read_range(ItemRef(b"big.bin"), 0, 10, Budgets(1, BIG))
    with pytest.raises(EnumerateError) as missing:
        server().connector("missing-for-secrets").fill_page(KeyRange(), Cursor(), Budgets(1, BIG))
    logging.getLogger("botocore.endpoint").warning("wire warning quoting %s", config.secrets()[0])
    shown = [repr(config), str(config), f"{config}", repr(connector), str(missing.value), repr(missing.value)]
    shown.append(caplog.text)
    shown.extend(record.getMessage() for record in caplog.records)
    for text in shown:
        for secret in config.secrets():
            assert secret not in text
    assert repr(config.secret_access_key) == "Secret(***)"
    with pytest.raises(TypeError):
        json.dumps(Secret("x"))
    import pickle

    with pytest.raises(TypeError):
        pickle.dumps(config.access_key_id)


def test_throttling_and_server_faults_are_retryable_others_permanent() -> None:
    from botocore.exceptions import ClientError

    from partbuild.orchestrator.connectors.s3_errors import s3_error

    def client_error(code: str, status: int, headers: dict[str, str] | None = None) -> ClientError:
        response: dict[str, Any] = {
            "Error": {"Code": code, "Message": "quoting raw/secret/key"},
            "ResponseMetadata": {"HTTPStatusCode": status, "HTTPHeaders": headers or {}},
        }
        return ClientError(response, "ListObjectsV2")  # type: ignore[arg-type]

    slow = s3_error(EnumerateError, "listing", client_error("SlowDown", 503, {"retry-after": "7"}))
    assert slow.is_retryable and slow.retry_after == 7.0
    limited = s3_error(EnumerateError, "listing", client_error("RequestLimitExceeded", 400))
    assert limited.is_retryable and limited.retry_after == 1.0
    plain_503 = s3_error(EnumerateError, "listing", client_error("ServiceUnavailable", 503))
    assert plain_503.is_retryable and plain_503.retry_after is not None
    fault = s3_error(ReadError, "reading", client_error("InternalError", 500))
    assert fault.is_retryable and fault.retry_after is None
    for code, status in (("AccessDenied", 403), ("NoSuchBucket", 404), ("InvalidAccessKeyId", 403)):
        error = s3_error(EnumerateError, "listing", client_error(code, status))
        assert not error.is_retryable, code
        assert "secret/key" not in error.message
    forged = s3_error(EnumerateError, "listing", client_error("Evil\ncode <b>\u202e" + "x" * 200, 418))
    assert "\n" not in forged.message and "<b>" not in forged.message and len(forged.message) < 120


def test_a_deadline_already_passed_is_retryable() -> None:
    with pytest.raises(ConnectorError) as caught:
        _prefixed().fill_page(KeyRange(), Cursor(), Budgets(1, BIG, deadline=0.0))
    assert caught.value.is_retryable


def test_a_deadline_ends_a_page_early_but_never_before_its_first_item() -> None:
    ticks = itertools.count()
    connector = ObjectStoreConnector(server().config("conformance", "raw/"), clock=lambda: float(next(ticks)))
    page = connector.fill_page(KeyRange(), Cursor(), Budgets(100, BIG, deadline=3.0))
    assert page is not None and len(page) == 3  # the clock is read once at the start, then per later item
    assert page.token is None  # cut mid-response: the key resumes it


def test_objects_without_an_etag_get_a_weak_version() -> None:
    from datetime import UTC, datetime

    from partbuild.orchestrator.connectors.object_store import _Listed

    stamp = datetime(2026, 1, 2, tzinfo=UTC)
    assert _Listed.of(b"k", {"Size": 3, "ETag": '"abc"', "LastModified": stamp}).version().value == b"abc"
    weak = _Listed.of(b"k", {"Size": 3, "LastModified": stamp}).version()
    assert not weak.is_strong and weak.value == f"size=3;mtime_ns={int(stamp.timestamp() * 1e9)}".encode()
    as_text = _Listed.of(b"k", {"Size": 3, "LastModified": "2026-01-02T00:00:00.000Z"}).version()
    assert as_text == weak


# -- resume


def test_a_fresh_connector_resumes_from_a_persisted_cursor_without_repeats_or_gaps(tmp_path: Any) -> None:
    budgets = Budgets(4, BIG)
    expected = _expected_keys("raw/", CONFORMANCE_OBJECTS)
    emitted: list[bytes] = []
    state = tmp_path / "cursor.json"
    for stop_after in (1, 2, 100):  # a few pages, then "crash": only the persisted cursor survives
        cursor = Cursor()
        if state.exists():
            saved = json.loads(state.read_text())
            token = None if saved["token"] is None else ResumeToken(bytes.fromhex(saved["token"]))
            cursor = Cursor(key(bytes.fromhex(saved["last_key"])), token)
        connector = _prefixed()  # a fresh instance each time
        for _ in range(stop_after):
            page = connector.fill_page(KeyRange(), cursor, budgets)
            if page is None:
                break
            assert all(cursor.last_key is None or item.key > cursor.last_key for item in page.items)
            emitted.extend(item.key.raw_bytes() for item in page.items)
            cursor = page.cursor
            token_hex = None if cursor.token is None else cursor.token.raw_bytes().hex()
            state.write_text(json.dumps({"last_key": cursor.last_key.raw_bytes().hex(), "token": token_hex}))  # type: ignore[union-attr]
    assert emitted == expected


def test_conformance_of_an_empty_bucket_and_a_single_object() -> None:
    client = server().client()
    fill_bucket(client, "empty-bucket", {})
    run_conformance(lambda: server().connector("empty-bucket"), standard_cases(secrets=SECRETS))
    fill_bucket(client, "one-object", {"only": b"x" * 99})
    run_conformance(lambda: server().connector("one-object"), standard_cases(secrets=SECRETS))


def test_config_validates_and_hides_credentials() -> None:
    config = ObjectStoreConfig("bucket-name", access_key_id="AKIAXXX", secret_access_key="very-secret")
    assert isinstance(config.secret_access_key, Secret)
    assert "very-secret" not in repr(config) and "AKIAXXX" not in repr(config)
    for bad in ({"bucket": "x"}, {"bucket": "okay", "max_attempts": 0}, {"bucket": "okay", "read_timeout": -1}):
        with pytest.raises(ValueError):
            ObjectStoreConfig(**bad)  # type: ignore[arg-type]


def _assert_clean(text: str, *fragments: str) -> None:
    for fragment in fragments:
        assert fragment not in text, f"{fragment!r} leaked"
    for secret in SECRETS:
        assert secret.decode() not in text
