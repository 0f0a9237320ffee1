"""The grid's shapes (state/rules/grid.py): runs of equal state, bounded cells, the day layout, key ranges."""

from __future__ import annotations

import datetime as dt

from hypothesis import given
from hypothesis import strategies as st

from partbuild.state.rules.grid import (
    NO_INSTANCE,
    Splice,
    bounded,
    day_layout,
    in_range,
    run_starts,
    run_starts_after,
    run_starts_spliced,
    runs,
)


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


STATES = st.sampled_from(["live", "failed", "tainted"])


@given(
    before=st.lists(STATES, min_size=1, max_size=400),
    changes=st.lists(st.tuples(st.integers(min_value=0, max_value=399), STATES), max_size=12),
)
def test_run_starts_after_a_few_changes_are_those_of_the_changed_cells(
    before: list[str], changes: list[tuple[int, str]]
) -> None:
    cells = [(f"r{n:04d}", state) for n, state in enumerate(before)]
    starts = run_starts(cells)
    changed = [index % len(cells) for index, _ in changes]
    for index, (_, state) in zip(changed, changes, strict=True):
        cells[index] = (cells[index][0], state)
    assert run_starts_after(cells, starts, changed) == run_starts(cells)
    assert run_starts_after(cells, starts, []) == starts


def test_run_starts_after_one_change_in_a_long_list_moves_only_its_neighbours() -> None:
    cells = [(f"r{n:06d}", "live") for n in range(10_000)]
    starts = run_starts(cells)
    cells[5000] = (cells[5000][0], "failed")
    assert run_starts_after(cells, starts, [5000]) == [0, 5000, 5001]
    assert starts == [0]  # the old starts are another list: readers of the old cells keep theirs
    cells[0] = (cells[0][0], "failed")
    assert run_starts_after(cells, [0, 5000, 5001], [0]) == [0, 1, 5000, 5001]


@given(
    runs_before=st.lists(st.tuples(STATES, st.integers(min_value=1, max_value=60)), min_size=1, max_size=8),
    fresh=st.lists(st.tuples(st.integers(min_value=0, max_value=960), STATES), max_size=10, unique_by=lambda f: f[0]),
    changes=st.lists(st.tuples(st.integers(min_value=0, max_value=479), STATES), max_size=6),
)
def test_a_splice_brings_aligned_lists_and_run_starts_along_as_a_fresh_pass_finds_them(
    runs_before: list[tuple[str, int]], fresh: list[tuple[int, str]], changes: list[tuple[int, str]]
) -> None:
    before = [state for state, length in runs_before for _ in range(length)]  # long runs: few starts to move
    # Old refs at even numbers, fresh ones at odd numbers: every fresh ref falls between (or around) old ones.
    old_refs = [f"r{2 * n:05d}" for n in range(len(before))]
    old_cells = list(zip(old_refs, before, strict=True))
    added = {f"r{2 * n + 1:05d}": state for n, state in fresh}
    splice = Splice.of(old_refs, sorted(added))
    refs = sorted([*old_refs, *added])
    cells = splice.applied(old_cells, None)
    assert [cell[0] if cell else None for cell in cells] == [None if ref in added else ref for ref in refs]
    assert [refs[index] for index in splice.fresh_indices()] == sorted(added)
    assert all(refs[splice.moved(index)] == ref for index, ref in enumerate(old_refs))
    for index in splice.fresh_indices():
        cells[index] = (refs[index], added[refs[index]])
    moved = [splice.moved(index % len(old_refs)) for index, _ in changes]
    for index, (_, state) in zip(moved, changes, strict=True):
        cells[index] = (refs[index], state)
    assert run_starts_spliced(cells, run_starts(old_cells), splice, moved) == run_starts(cells)


def test_a_splice_into_a_long_list_moves_the_starts_after_it_by_one() -> None:
    old = [(f"r{2 * n:06d}", "live" if n < 5000 else "failed") for n in range(10_000)]
    splice = Splice.of([ref for ref, _ in old], ["r000001"])  # between the first two
    assert splice.positions == [1] and splice.moved(0) == 0 and splice.moved(1) == 2
    cells = splice.applied(old, None)
    cells[1] = ("r000001", "missing")
    assert run_starts_spliced(cells, [0, 5000], splice, []) == [0, 1, 2, 5001]
