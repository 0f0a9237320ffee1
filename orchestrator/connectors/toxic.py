"""Value types for bytes that come from a source: keys, refs and resume tokens.

A source's bytes may hold anything: a customer's path, a signed URL, a secret
embedded in an object name. So these types never show their bytes: `repr`,
`str` and f-strings print `TypeName(len=N, hash=XXXXXXXX..)` (the first four
bytes of a BLAKE3 digest), which is enough to tell two values apart in a log
and nothing more. The bytes come out only through `raw_bytes()`, a call a
reviewer can grep for. Pickling is refused (a pickle would carry the bytes
silently); `json.dumps` already refuses unknown objects, and pydantic
serializes these types as their redacted form.

`ItemKey` (ordered, up to 4,096 bytes), `ItemRef`, `ResumeToken` (up to 16,384
bytes): non-empty and immutable.
"""

from __future__ import annotations

from typing import Any, ClassVar, Self

from partbuild.state.fold.records import MAX_SCAN_KEY_BYTES as MAX_ITEM_KEY_BYTES
from partbuild.state.fold.records import MAX_SCAN_TOKEN_BYTES as MAX_RESUME_TOKEN_BYTES
from partbuild.state.rules.redact import digest_prefix as _digest_prefix

MAX_ITEM_REF_BYTES = 16384


class ToxicBytes:
    """Non-empty, size-bounded, immutable bytes that print redacted."""

    __slots__ = ("_digest", "_raw")
    max_len: ClassVar[int]

    _raw: bytes
    _digest: str | None

    def __init__(self, raw: bytes | bytearray | memoryview) -> None:
        if type(raw) is bytes:  # the common case, kept fast: connectors build millions of keys
            data = raw
        elif isinstance(raw, _BYTES_LIKE):
            data = bytes(raw)
        else:
            # Only the type's name: the value itself might be the secret.
            raise TypeError(f"{type(self).__name__} takes bytes, not {type(raw).__name__}")
        if not 0 < len(data) <= self.max_len:
            raise ValueError(f"{type(self).__name__} must be 1..{self.max_len} bytes, got {len(data)}")
        # Through the slot descriptors: __setattr__ refuses every assignment.
        _set_raw(self, data)
        _set_digest(self, None)

    def raw_bytes(self) -> bytes:
        """The bytes themselves. Every call is a place where they may leak: keep them out of logs."""
        return self._raw

    def digest_prefix(self) -> str:
        """The hex prefix of the BLAKE3 digest shown in `repr` (computed once, on demand)."""
        digest = self._digest
        if digest is None:
            digest = _digest_prefix(self._raw)
            _set_digest(self, digest)
        return digest

    def __len__(self) -> int:
        return len(self._raw)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(len={len(self._raw)}, hash={self.digest_prefix()}..)"

    __str__ = __repr__

    def __format__(self, spec: str) -> str:
        return format(repr(self), spec)

    def __eq__(self, other: object) -> bool:
        # A key and a ref holding the same bytes are different things.
        if type(other) is not type(self):
            return NotImplemented
        return self._raw == other._raw

    def __hash__(self) -> int:
        return hash((type(self).__name__, self._raw))

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"{type(self).__name__} is immutable")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"{type(self).__name__} is immutable")

    def __reduce__(self) -> Any:
        raise TypeError(f"{type(self).__name__} refuses to be pickled: use raw_bytes() explicitly")

    def __reduce_ex__(self, protocol: Any) -> Any:
        return self.__reduce__()

    def __copy__(self) -> Self:
        return self  # immutable: a copy is the same value

    def __deepcopy__(self, memo: dict[int, object]) -> Self:
        return self

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: Any) -> Any:
        """In a pydantic model: accept only instances, serialize to the redacted form."""
        from pydantic_core import core_schema

        return core_schema.is_instance_schema(
            cls, serialization=core_schema.plain_serializer_function_ser_schema(repr, when_used="always")
        )


_BYTES_LIKE = (bytes, bytearray, memoryview)
_set_raw = ToxicBytes.__dict__["_raw"].__set__
_set_digest = ToxicBytes.__dict__["_digest"].__set__


class ItemKey(ToxicBytes):
    """An item's position in a source's enumeration order; ordered by its bytes."""

    __slots__ = ()
    max_len = MAX_ITEM_KEY_BYTES

    def __lt__(self, other: ItemKey) -> bool:
        if type(other) is not ItemKey:
            return NotImplemented
        return self._raw < other._raw

    def __le__(self, other: ItemKey) -> bool:
        if type(other) is not ItemKey:
            return NotImplemented
        return self._raw <= other._raw

    def __gt__(self, other: ItemKey) -> bool:
        if type(other) is not ItemKey:
            return NotImplemented
        return self._raw > other._raw

    def __ge__(self, other: ItemKey) -> bool:
        if type(other) is not ItemKey:
            return NotImplemented
        return self._raw >= other._raw

    __hash__ = ToxicBytes.__hash__


class ItemRef(ToxicBytes):
    """The connector's opaque handle to open or read one item: looked up, never ranged."""

    __slots__ = ()
    max_len = MAX_ITEM_REF_BYTES


class ResumeToken(ToxicBytes):
    """An opaque pagination token a connector hands out and gets back in a cursor."""

    __slots__ = ()
    max_len = MAX_RESUME_TOKEN_BYTES
