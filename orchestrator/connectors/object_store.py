"""`ObjectStoreConnector`: the objects under a bucket and key prefix, over the S3 API (boto3).

Library: boto3's S3 client (its botocore layer, the AWS SDK's own). ListObjectsV2
*is* the contract's cursor: an ordered listing that starts after a key
(`StartAfter`) or resumes from the server's own marker (`ContinuationToken`),
`MaxKeys` at a time, and the client passes both straight through. s3fs
(fsspec) and pyarrow.fs list a whole prefix or directory per call and expose
neither parameter in their public listing calls, so a resumable scan of a
million objects would re-list from the top on every page, or reach through
them into the private client they wrap (s3fs wraps aiobotocore, the same
model, async).

- Keys and refs are the object key's UTF-8 bytes after `config.prefix`. S3
  lists keys in UTF-8 binary order, the byte order of `ItemKey`, so pages come
  out sorted with no sorting here. Objects whose relative key is empty (the
  prefix itself) or has a '.' or '..' segment are skipped and counted in
  `stats`: such a ref would read as a path escape to everything downstream.
- Resume: StartAfter = prefix + the cursor's last key (key-authoritative). A
  page that ends where an S3 response ended carries S3's continuation token,
  bound to its last key, bucket and prefix (`s3_keys`); it is used only when it
  checks out and the key range does not start above the cursor; a corrupt, stale or
  server-rejected token falls back to the key.
- Key ranges [start, end): StartAfter just below the start (`s3_keys.start_after`),
  stop at the first key at or past the end. Every listed key is also filtered
  against both bounds and the cursor.
- Versions are strong, from the ETag without its quotes. A multipart upload's
  ETag ("<md5 of part md5s>-<parts>") and an SSE-KMS object's ETag are not the
  MD5 of the content, but each identifies one upload: a rewrite changes it.
  Rewriting the same bytes in a simple upload keeps it (same MD5), which is
  what a content version should do.
- Size hint from Size; `Location` is "s3://bucket/key" (display and URL),
  never part of a ref. `locations=False` leaves it out.
- Reads: GET with a Range header; `open` refuses an object larger than
  `max_bytes` (from its Content-Length) and reads at most that.
- Split points: a `SplitEstimator` over the sizes of the next `max_items` keys.
- Errors: see `s3_errors` (throttling rate-limited, 5xx and transport
  retryable, the rest permanent; messages give code and status only).
  Credentials live in `ObjectStoreConfig` as `Secret`s; the client library's
  wire logs are withheld (`s3_logging`).
"""

from __future__ import annotations

import datetime
import io
import time
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from typing import Any, BinaryIO

from partbuild.orchestrator.connectors.contract import Capabilities
from partbuild.orchestrator.connectors.errors import EnumerateError, ReadError
from partbuild.orchestrator.connectors.items import (
    MAX_LOCATION_CHARS,
    MAX_VERSION_BYTES,
    ConnectorTag,
    Location,
    Page,
    ScanItem,
    StableItemId,
    Version,
)
from partbuild.orchestrator.connectors.paging import Budgets, Cursor, KeyRange, check_byte_range
from partbuild.orchestrator.connectors.s3_config import ObjectStoreConfig
from partbuild.orchestrator.connectors.s3_errors import is_invalid_range, is_missing, is_server_answer, s3_error
from partbuild.orchestrator.connectors.s3_keys import make_token, read_token, start_after, valid_utf8_prefix
from partbuild.orchestrator.connectors.s3_logging import withhold_wire_logs
from partbuild.orchestrator.connectors.split_estimator import DEFAULT_CAPACITY, SplitEstimator
from partbuild.orchestrator.connectors.toxic import MAX_ITEM_KEY_BYTES, ItemKey, ItemRef

OBJECT_STORE_TAG = ConnectorTag("s3")
MAX_KEYS_PER_REQUEST = 1000  # S3's ceiling for one ListObjectsV2 response


@dataclass
class ListStats:
    """What listings skipped, by reason; and how many list requests were made."""

    requests: int = 0
    skipped: dict[str, int] = field(default_factory=dict)

    def skip(self, reason: str) -> None:
        self.skipped[reason] = self.skipped.get(reason, 0) + 1


@dataclass(frozen=True, slots=True)
class _Listed:
    """One listed object inside the bounds: its relative key, size, ETag and modification time."""

    key: bytes
    size: int
    etag: str
    modified_ns: int

    @classmethod
    def of(cls, rel: bytes, entry: dict[str, Any]) -> _Listed:
        etag = str(entry.get("ETag") or "").strip('"')
        # The time is parsed only when it is needed (no ETag): the shared session leaves timestamps as text.
        modified_ns = 0 if etag else _time_ns(entry.get("LastModified"))
        return cls(rel, int(entry.get("Size") or 0), etag, modified_ns)

    def version(self) -> Version:
        """Strong from the ETag; weak from size and time for a server that lists none (S3 always does)."""
        if self.etag:
            return Version.strong(self.etag.encode("utf-8")[:MAX_VERSION_BYTES])
        return Version.from_metadata(self.size, self.modified_ns)


def _time_ns(modified: object) -> int:
    """LastModified (ISO 8601 text, or a datetime from a client that parses it) in ns since the epoch; 0 if none."""
    if isinstance(modified, str):
        try:
            modified = datetime.datetime.fromisoformat(modified.replace("Z", "+00:00"))
        except ValueError:
            return 0
    if isinstance(modified, datetime.datetime):
        return int(modified.timestamp() * 1e9)
    return 0


@dataclass(slots=True)
class _Listing:
    """A walk over ListObjectsV2 responses from a start point; `token` is set at response boundaries."""

    want: int = MAX_KEYS_PER_REQUEST  # keys the caller still wants: the next request's MaxKeys
    token: str | None = None  # S3's continuation token after the last response, when it was truncated


def _check(name: str, value: object, kind: type) -> None:
    if not isinstance(value, kind):
        raise TypeError(f"{name} must be {kind.__name__}, not {type(value).__name__}")


def _skip_reason(rel: bytes) -> str | None:
    if not rel:
        return "the prefix itself"
    if len(rel) > MAX_ITEM_KEY_BYTES:
        return "key too long"
    if any(segment in (b".", b"..") for segment in rel.split(b"/")):
        return "a '.' or '..' segment"
    return None


class ObjectStoreConnector:
    """Serves the objects under `config.bucket` / `config.prefix` through the connector contract."""

    def __init__(
        self,
        config: ObjectStoreConfig,
        *,
        tag: ConnectorTag = OBJECT_STORE_TAG,
        locations: bool = True,
        withhold_client_logs: bool = True,
        client: Any = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        _check("config", config, ObjectStoreConfig)
        self.tag = tag
        self._config = config
        self._prefix = config.prefix
        self._prefix_len = len(config.prefix_bytes)
        self._locations = locations
        self._clock = clock
        self._client = client if client is not None else config.make_client()
        if withhold_client_logs:
            withhold_wire_logs()
        self.stats = ListStats()

    def __repr__(self) -> str:
        # The bucket and prefix name a customer's data: shown only as lengths.
        sizes = f"bucket_len={len(self._config.bucket)}, prefix_len={self._prefix_len}"
        return f"ObjectStoreConnector(tag={self.tag.name}, {sizes})"

    def capabilities(self) -> Capabilities:
        return Capabilities(seek_by_key=True, token_resume=True, range_read=True, split_hints=True)

    # -- listing

    def _bounds(self, key_range: KeyRange, cursor: Cursor, budgets: Budgets) -> tuple[bytes | None, bool, bytes | None]:
        """(lower bound, whether it is inclusive, upper bound exclusive) of what remains."""
        _check("key_range", key_range, KeyRange)
        _check("cursor", cursor, Cursor)
        _check("budgets", budgets, Budgets)
        if budgets.expired(self._clock()):
            raise EnumerateError.retryable("deadline passed before the call started")
        start = None if key_range.start is None else key_range.start.raw_bytes()
        end = None if key_range.end is None else key_range.end.raw_bytes()
        last = None if cursor.last_key is None else cursor.last_key.raw_bytes()
        if last is not None and (start is None or last >= start):
            return last, False, end
        return start, True, end

    def _continuation(self, key_range: KeyRange, cursor: Cursor) -> str | None:
        """S3's continuation token from the cursor, when it is valid here; else None (resume by key)."""
        if cursor.token is None or cursor.last_key is None:
            return None
        if key_range.start is not None and key_range.start > cursor.last_key:
            return None  # the token resumes at the cursor, below the key range
        return read_token(self._config.bucket, self._prefix, cursor.last_key, cursor.token)

    def _list(self, start: str | None, token: str | None, max_keys: int) -> dict[str, Any]:
        request: dict[str, Any] = {"Bucket": self._config.bucket, "Prefix": self._prefix, "MaxKeys": max_keys}
        if token is not None:
            request["ContinuationToken"] = token
        elif start is not None:
            request["StartAfter"] = start
        self.stats.requests += 1
        try:
            return self._client.list_objects_v2(**request)
        except Exception as error:
            if token is not None and is_server_answer(error):
                # The server refused the request that carried a token: an expired or foreign token gets a 400
                # from S3 (a 500 from moto). Retried once by key, which is authoritative: retrying the token
                # could fail forever, and if the keyed request fails too its error is the real one.
                return self._list(start, None, max_keys)
            raise s3_error(EnumerateError, "listing the bucket", error) from None

    def _walk(
        self, lower: bytes | None, inclusive: bool, end: bytes | None, token: str | None, state: _Listing
    ) -> Generator[tuple[_Listed, bool], None, None]:
        """Listed objects within bounds in key order, each with whether it ends its S3 response.

        The caller keeps `state.want` up to date: asking S3 for exactly the keys a page still needs
        makes a full page end where a response ends, so it can carry S3's continuation token.
        """
        after = start_after(self._prefix, lower, inclusive)
        while True:
            response = self._list(after, token, min(max(state.want, 1), MAX_KEYS_PER_REQUEST))
            contents = response.get("Contents") or []
            token = response.get("NextContinuationToken") if response.get("IsTruncated") else None
            state.token = token
            if contents:
                # Where a keyed retry resumes if the server refuses the next token (see `_list`).
                after = contents[-1]["Key"]
            for index, entry in enumerate(contents):
                rel = entry["Key"].encode("utf-8")[self._prefix_len :]
                if end is not None and rel >= end:
                    state.token = None
                    return
                if lower is not None and (rel < lower or (rel == lower and not inclusive)):
                    continue  # below the bound: a start point that S3 could not name exactly
                reason = _skip_reason(rel)
                if reason is not None:
                    self.stats.skip(reason)
                    continue
                yield _Listed.of(rel, entry), index == len(contents) - 1
            if token is None:
                return

    def fill_page(self, key_range: KeyRange, cursor: Cursor, budgets: Budgets) -> Page | None:
        """The next objects of `key_range` after `cursor`, within budgets; None when none are left.

        The page carries a resume token only when it ends exactly where an S3
        response ended (a budget cut mid-response resumes by key, which is as cheap).
        """
        lower, inclusive, end = self._bounds(key_range, cursor, budgets)
        state = _Listing(want=budgets.max_items)
        listing = self._walk(lower, inclusive, end, self._continuation(key_range, cursor), state)
        taken: list[ScanItem] = []
        used = 0
        ends_response = False
        try:
            for listed, last_of_response in listing:
                item = self._scan_item(listed)
                # Progress rule: the first item goes out even if it alone exceeds max_bytes.
                if taken and (used + item.size > budgets.max_bytes or budgets.expired(self._clock())):
                    ends_response = False
                    break
                taken.append(item)
                used += item.size
                state.want = budgets.max_items - len(taken)
                ends_response = last_of_response
                if len(taken) >= budgets.max_items:
                    break
        finally:
            listing.close()
        if not taken:
            return None
        token = None
        if ends_response and state.token is not None:
            token = make_token(self._config.bucket, self._prefix, taken[-1].key, state.token)
        return Page(taken, token)

    def _scan_item(self, listed: _Listed) -> ScanItem:
        key = ItemKey(listed.key)
        return ScanItem(
            key,
            ItemRef(listed.key),
            StableItemId.derive(self.tag, key),
            listed.version(),
            listed.size,
            self._location(listed.key),
        )

    def _location(self, rel: bytes) -> Location | None:
        if not self._locations:
            return None
        url = f"s3://{self._config.bucket}/{self._prefix}{rel.decode('utf-8')}"
        return Location(url, url) if len(url) <= MAX_LOCATION_CHARS else None

    def choose_split_point(self, key_range: KeyRange, cursor: Cursor, budgets: Budgets) -> ItemKey | None:
        """The byte-weighted median key of the next `max_items` objects after the cursor (all if fewer)."""
        lower, inclusive, end = self._bounds(key_range, cursor, budgets)
        estimator = SplitEstimator(min(DEFAULT_CAPACITY, max(2, budgets.max_items)))
        state = _Listing(want=budgets.max_items)
        listing = self._walk(lower, inclusive, end, None, state)
        try:
            for listed, _ in listing:
                estimator.observe(ItemKey(listed.key), listed.size)
                state.want = budgets.max_items - estimator.observations
                if estimator.observations >= budgets.max_items or budgets.expired(self._clock()):
                    break
        finally:
            listing.close()
        return estimator.split_point()

    # -- reads

    def _object_key(self, item_ref: ItemRef, budgets: Budgets) -> str:
        _check("item_ref", item_ref, ItemRef)
        _check("budgets", budgets, Budgets)
        if budgets.expired(self._clock()):
            raise ReadError.retryable("deadline passed before the read started")
        rel, whole = valid_utf8_prefix(item_ref.raw_bytes())
        if not whole or _skip_reason(item_ref.raw_bytes()) is not None:
            raise ReadError.permanent("refused: the ref is not an object key this connector lists")
        return self._prefix + rel

    def _get(self, key: str, byte_range: str | None) -> dict[str, Any]:
        request: dict[str, Any] = {"Bucket": self._config.bucket, "Key": key}
        if byte_range is not None:
            request["Range"] = byte_range
        try:
            return self._client.get_object(**request)
        except Exception as error:
            if is_missing(error):
                raise ReadError.permanent("reading the object failed: not found (deleted or never there)") from None
            raise

    def open(self, item_ref: ItemRef, budgets: Budgets) -> BinaryIO:
        """The whole object; refused when it is larger than `max_bytes`."""
        key = self._object_key(item_ref, budgets)
        try:
            response = self._get(key, None)
            body = response["Body"]
            try:
                size = int(response.get("ContentLength") or 0)
                if size > budgets.max_bytes:
                    raise ReadError.permanent(f"item of {size} bytes exceeds max_bytes={budgets.max_bytes}")
                data = body.read(budgets.max_bytes + 1)
            finally:
                body.close()
        except ReadError:
            raise
        except Exception as error:
            raise s3_error(ReadError, "reading the object", error) from None
        if len(data) > budgets.max_bytes:
            raise ReadError.permanent(f"item exceeds max_bytes={budgets.max_bytes}")
        return io.BytesIO(data)

    def read_range(self, item_ref: ItemRef, offset: int, length: int, budgets: Budgets) -> bytes:
        """Bytes [offset, offset + min(length, max_bytes)) of the object; b"" past its end."""
        check_byte_range(offset, length)
        key = self._object_key(item_ref, budgets)
        wanted = min(length, budgets.max_bytes)
        if wanted == 0:
            return b""
        try:
            response = self._get(key, f"bytes={offset}-{offset + wanted - 1}")
            body = response["Body"]
            try:
                return body.read(wanted)[:wanted]
            finally:
                body.close()
        except ReadError:
            raise
        except Exception as error:
            if is_invalid_range(error):
                return b""  # the range starts at or past the end (an empty object has no valid range)
            raise s3_error(ReadError, "reading a range of the object", error) from None
