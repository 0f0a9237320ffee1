"""What the fold touched, drained by a projector's passes and kept for a while: what changed after a seq."""

from __future__ import annotations

import pytest

from partbuild.state.fold import touched as touched_module
from partbuild.state.fold.touched import Touched, changed_after


def drained(since: int, *uuids: str, refs: tuple[str, ...] = ()) -> Touched:
    record = Touched(since)
    record.instances.update(uuids)
    record.refs.update(refs)
    return record


def test_what_changed_after_a_seq_reads_the_drained_records_back_to_it() -> None:
    first = drained(10, "a", refs=("r/1",))
    second = first.after(20, 0)
    second.instances.add("b")
    third = second.after(30, 0)
    third.instances.add("c")
    third.refs.add("r/2")
    assert changed_after(third, 30) == ({"c"}, {"r/2"})
    assert changed_after(third, 25) == ({"b", "c"}, {"r/2"})  # (20, 30] is the second record's
    assert changed_after(third, 20) == ({"b", "c"}, {"r/2"})
    assert changed_after(third, 10) == ({"a", "b", "c"}, {"r/1", "r/2"})
    assert changed_after(third, 9) is None  # tracking began at 10: nothing says what changed before
    assert changed_after(None, 30) is None  # tracking is off


def test_a_new_record_keeps_a_bounded_chain(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(touched_module, "KEPT_LINKS", 3)
    record = drained(0)
    for seq in range(1, 10):
        record.instances.add(f"u{seq}")
        record = record.after(seq * 10, 0)
    assert changed_after(record, 60) == ({"u7", "u8", "u9"}, set())
    assert changed_after(record, 59) is None  # the record since 50 was let go
    monkeypatch.setattr(touched_module, "KEPT_KEYS", 2)
    record.instances.update(("x", "y"))
    newest = record.after(100, 0)
    assert changed_after(newest, 90) == ({"x", "y"}, set())
    assert changed_after(newest, 89) is None  # two keys already: no older record is kept
