"""The grid's shapes (state/rules/grid.py): runs of equal state, bounded cells, the day layout, key ranges."""

from __future__ import annotations

import datetime as dt

from partbuild.state.rules.grid import NO_INSTANCE, bounded, day_layout, in_range, runs


def test_big_grids_stay_bounded_as_runs_and_ranges() -> None:
    cells = [(f"r{n:06d}", "live" if n % 1000 else "failed") for n in range(100_000)]
    merged = list(runs(cells))
    assert len(merged) == 200 and sum(c.count for c in merged) == 100_000
    shown = bounded(cells, most=150)  # 200 runs do not fit: 150 ranges of equal size, mixed where states mix
    assert len(shown) <= 150 and sum(c.count for c in shown) == 100_000
    assert {c.state for c in shown} == {"live", "mixed"}
    assert all(dict(c.counts).get("failed", 0) >= 1 for c in shown if c.state == "mixed")
    assert bounded(cells[:10]) == [c for c in bounded(cells[:10]) if c.single]
    day = dt.date(2026, 1, 30)
    layout = day_layout([("a", "live"), ("b", "failed")], [day, day + dt.timedelta(days=3)])
    assert layout is not None and [(m.month, len(m.days)) for m in layout] == [(1, 2), (2, 2)]
    assert [s for m in layout for _, s, _ in m.days] == ["live", NO_INSTANCE, NO_INSTANCE, "failed"]
    assert day_layout([("a", "live"), ("b", "live")], [day, day + dt.timedelta(days=5000)]) is None


def test_a_key_range_is_a_slice_of_the_sorted_refs_both_ends_included() -> None:
    refs = ["a", "b", "c", "d"]
    assert in_range(refs, "b", "c") == (1, 3)
    assert in_range(refs, None, None) == (0, 4)
    assert in_range(refs, "bb", None) == (2, 4)
    assert in_range(refs, "c", "b") == (2, 2)  # an empty range, never a negative one
