"""What every resource's models share: the strict request base, pages, written seqs, problems, strict scalars."""

from __future__ import annotations

import re
from typing import Annotated, Any, Generic, Literal, TypeVar

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field

from partbuild.state.rules.refs import CONTROL_CHARACTERS, MAX_REF_BYTES, ref_problem

MAX_PAGE = 1_000
MAX_COMMENT = 2_000
ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:@+-]{0,255}$"  # no slash: ids are path segments
# What `ref_problem` refuses, as the document states it (its byte limit aside: JSON Schema counts characters).
REF_PATTERN = f"^[^{CONTROL_CHARACTERS}]*$"
# JSON numbers are doubles: above 2^53 - 1 a bound in the document is not the number the server
# compares with (4611686018427387999 reads as 2^62), so every integer bound stays within it.
MAX_SAFE_INT = 2**53 - 1
# SQL's integers are 64-bit signed: every integer a request may carry (a query, path or body integer, a web
# page's seq) is bounded by MAX_SAFE_INT, well within it, so none can overflow a parameter or a column.
MAX_SQL_INT = 2**63 - 1
MAX_DIGITS = len(str(MAX_SAFE_INT))  # longer digit strings are refused before int() reads them
_DECIMAL = re.compile(r"-?[0-9]+")
# A JSON number as text (what a client's str() of a float gives too: "2.5", "1e-05"); no "inf", "nan", "0x1".
_NUMBER = re.compile(r"-?[0-9]+(\.[0-9]+)?([eE][+-]?[0-9]+)?")

# Every resource shows instances' states (a want's refs, changes): here, not with the partition models.
# "gone": was Live source data that a completed scan no longer found (its directory was removed).
InstanceStateName = Literal[
    "missing",
    "building",
    "upstream_building",
    "up_for_retry",
    "live",
    "failed",
    "upstream_failed",
    "tainted",
    "canceled",
    "gone",
]


def _valid_ref(ref: str) -> str:
    problem = ref_problem(ref)
    if problem:
        raise ValueError(problem)
    return ref


def _json_int(value: Any) -> Any:
    """An integral JSON number is an integer (JSON Schema: 10.0 is one); strings and booleans stay refused."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


# After the bounds, so they stay on the integer and the document states them as minimum/maximum.
JsonInt = BeforeValidator(_json_int)
Ref = Annotated[
    str,
    # The pattern is documented only: `_valid_ref` enforces the same rule with a message that says where.
    Field(
        min_length=1,
        max_length=MAX_REF_BYTES,
        examples=["agg/daily_clicks/date=2026-01-01"],
        json_schema_extra={"pattern": REF_PATTERN},
    ),
    AfterValidator(_valid_ref),
]
NonNegative = Annotated[int, Field(ge=0, le=MAX_SAFE_INT), JsonInt]


def _query_int(value: Any) -> Any:
    """A query string holding an integer is its digits: "5.0", "1e3" and "true" are not integers."""
    if isinstance(value, bool):
        raise ValueError("expected an integer, not a boolean")
    if isinstance(value, str):
        if not _DECIMAL.fullmatch(value):
            raise ValueError(f"{value[:40]!r} is not an integer")
        return int(value)
    return value


def _query_float(value: Any) -> Any:
    """A query string holding a number is a JSON number: "inf", "nan", " 5", "1_0" and "true" are not."""
    if isinstance(value, bool):
        raise ValueError("expected a number, not a boolean")
    if isinstance(value, str):
        if not _NUMBER.fullmatch(value):
            raise ValueError(f"{value[:40]!r} is not a number")
        return float(value)
    return value


def _query_bool(value: Any) -> Any:
    """A query flag is `true` or `false`: "1", "yes" and "on" are not booleans in the document's terms."""
    if isinstance(value, str):
        if value not in ("true", "false"):
            raise ValueError(f"{value[:40]!r} is not true or false")
        return value == "true"
    return value


def parse_digits(text: str, name: str, maximum: int = MAX_SAFE_INT, noun: str = "an integer") -> int:
    """A non-negative integer written in ASCII digits, at most `maximum`; ValueError naming `name` otherwise."""
    if not (text.isascii() and text.isdigit() and len(text) <= MAX_DIGITS and int(text) <= maximum):
        raise ValueError(f"{name} must be {noun} from 0 to {maximum}, got {text[:40]!r}")
    return int(text)


# Query parameters arrive as text: parsed strictly, so what the document calls an integer is one.
QueryInt = Annotated[int, BeforeValidator(_query_int)]
QueryBool = Annotated[bool, BeforeValidator(_query_bool)]
QueryFloat = Annotated[float, BeforeValidator(_query_float)]

T = TypeVar("T")


class StrictRequest(BaseModel):
    """The base of every request model (and of the request-side models they nest)."""

    # Strict: "10" is not an integer and true is not a number (10.0 is: see JsonInt); unknown fields are refused.
    model_config = ConfigDict(extra="forbid", strict=True)


class CancelRequest(StrictRequest):
    reason: str = Field(default="", max_length=MAX_COMMENT)


class WrittenOut(BaseModel):
    """Where a write landed in the log: read with `min_seq` >= this to see it (read-your-writes)."""

    seq: int


class PageOut(BaseModel, Generic[T]):
    items: list[T]
    next_cursor: str | None = Field(description="Pass as `cursor` for the next page; null on the last page.")
    as_of_seq: int = Field(
        description="The seq the page answers as of: `as_of_seq` when given, else the head it was read at. "
        "Pass the same `as_of_seq` with `cursor` to page through the same list."
    )


class ProblemOut(BaseModel):
    """RFC 9457 problem details: what was wrong, in one sentence."""

    type: str = "about:blank"
    title: str
    status: int
    detail: str
