"""The partition ref rule: empty, too long, or a control character anywhere makes a ref invalid."""

from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st

from partbuild.state.rules.refs import CONTROL_CHARACTERS, MAX_REF_BYTES, ref_problem

_CONTROL = re.compile(f"[{CONTROL_CHARACTERS}]")


@given(st.text(max_size=40))
def test_a_ref_is_invalid_exactly_when_it_is_empty_or_holds_a_control_character(ref: str) -> None:
    """The printable fast path answers as the control-character rule does, for any text (surrogates,
    separators and other unprintable characters included)."""
    control = _CONTROL.search(ref)
    problem = ref_problem(ref)
    if not ref:
        assert problem == "partition ref is empty"
    elif control is not None:
        assert problem == (
            f"partition ref contains control character {control.group()!r} at position {control.start()}"
        )
    else:
        assert problem is None


def test_unprintable_characters_that_are_not_control_characters_are_allowed() -> None:
    assert ref_problem("a\u2028b/c\u00a0d/e\u200bf") is None


def test_the_first_control_character_is_named_with_its_position() -> None:
    assert ref_problem("daily/date=2026-01-01\x85/x\x00") == (
        "partition ref contains control character '\\x85' at position 21"
    )


def test_a_ref_over_the_byte_limit_is_invalid_even_when_its_characters_are_fewer() -> None:
    assert ref_problem("é" * (MAX_REF_BYTES // 2)) is None
    assert ref_problem("é" * (MAX_REF_BYTES // 2 + 1)) == f"partition ref is longer than {MAX_REF_BYTES} bytes of UTF-8"
