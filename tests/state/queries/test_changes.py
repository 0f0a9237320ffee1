"""What changed between two seqs, from the live state's histories: a taint and its rebuild, and every change
against the differences between states replayed to the two seqs."""

from __future__ import annotations

from typing import Any

import pytest

from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.fold.build_state import BuildState
from partbuild.state.fold.records import InstanceState, JobRunState, WantState
from partbuild.state.queries.changes import (
    CANONICAL_MOVED,
    INSTANCE_CREATED,
    INSTANCE_STATE,
    JOB_RUN_STATE,
    WANT_STATE,
    Change,
    ChangeScan,
    changes_between,
    changes_by_span,
    changes_page,
)

from foldkit import Story
from golden_log import GOLDEN_LOGS, read

I, W, R = InstanceState, WantState, JobRunState


def _story() -> tuple[Story, dict[str, int]]:
    """Builds, a retry, a missing input, an observation, a taint and its rebuild; the seqs of the milestones."""
    story = Story()
    marks: dict[str, int] = {}
    story.want("w1", "a", "b")
    story.buffer("r1", "a")
    story.ok(pb.JobRunHeartbeat(job_run_id="r1"))
    story.ok(pb.JobRunHeartbeat(job_run_id="r1"))  # a heartbeat is no change
    story.fail("r1", permanent=False)
    story.build("r2", "a")
    story.observe("src/x")
    story.buffer("r3", "b")
    story.missing("r3", "src/y")
    story.observe("src/y")
    story.build("r4", "b")
    marks["built"] = story.state.head_seq
    story.ok(pb.PartitionTaint(partition_ref="a", reason="bad"))
    marks["tainted"] = story.state.head_seq
    story.want("w2", "a")
    story.buffer("r5", "a")
    marks["buffered"] = story.state.head_seq
    story.succeed("r5")
    story.want("w3", "c")
    story.ok(pb.WantCancel(want_id="w3", reason="no"))
    return story, marks


def _replayed(story: Story, seq: int) -> BuildState:
    state = BuildState()
    for at, event in enumerate(story.events[:seq], 1):
        state.apply(at, event)
    return state


def _differences(before: BuildState, after: BuildState, seq: int) -> set[tuple[Any, ...]]:
    """What changed from one replayed state to the next, as (kind, id, from, to)."""
    found: set[tuple[Any, ...]] = set()
    for uuid, instance in after.instances.items():
        old = before.instances.get(uuid)
        if old is None:
            found.add((INSTANCE_CREATED, uuid, None, instance.state))
        elif old.state != instance.state:
            found.add((INSTANCE_STATE, uuid, old.state, instance.state))
    for table, kind in ((after.wants, WANT_STATE), (after.job_runs, JOB_RUN_STATE)):
        old_table: Any = before.wants if kind == WANT_STATE else before.job_runs
        for key, record in table.items():
            old = old_table.get(key)
            if old is None or old.state != record.state:
                found.add((kind, key, None if old is None else old.state, record.state))
    for ref, uuid in after.canonical.items():
        if before.canonical.get(ref) != uuid:
            found.add((CANONICAL_MOVED, ref, before.canonical.get(ref), uuid))
    return found


def _as_tuples(changes: list[Change]) -> set[tuple[Any, ...]]:
    moved = {(c.kind, c.id, c.from_uuid, c.to_uuid) for c in changes if c.kind == CANONICAL_MOVED}
    return moved | {(c.kind, c.id, c.from_state, c.to_state) for c in changes if c.kind != CANONICAL_MOVED}


def test_a_taint_and_its_rebuild() -> None:
    story, marks = _story()
    state = story.state
    old = state.instances[state.instances[story.uuid("a")].previous_uuid or ""]
    new = story.uuid("a")
    changes = changes_between(state, marks["built"], marks["buffered"] + 1)
    tainted = marks["tainted"]
    rebuilt = marks["buffered"] + 1
    assert [(c.seq, c.kind, c.id, c.from_state, c.to_state) for c in changes if c.kind != CANONICAL_MOVED] == [
        (tainted, INSTANCE_CREATED, new, None, I.MISSING),
        (tainted, INSTANCE_STATE, old.uuid, I.LIVE, I.TAINTED),
        (tainted + 1, WANT_STATE, "w2", None, W.IDLE),
        (tainted + 2, INSTANCE_STATE, new, I.MISSING, I.BUILDING),
        (tainted + 2, WANT_STATE, "w2", W.IDLE, W.BUILDING),
        (tainted + 2, JOB_RUN_STATE, "r5", None, R.QUEUED),
        (rebuilt, INSTANCE_STATE, new, I.BUILDING, I.LIVE),
        (rebuilt, WANT_STATE, "w2", W.BUILDING, W.SUCCESSFUL),
        (rebuilt, JOB_RUN_STATE, "r5", R.QUEUED, R.SUCCEEDED),
    ]
    (moved,) = [c for c in changes if c.kind == CANONICAL_MOVED]
    assert (moved.seq, moved.id, moved.ref, moved.from_uuid, moved.to_uuid) == (tainted, "a", "a", old.uuid, new)
    assert all(c.ref == "a" for c in changes if c.kind in (INSTANCE_CREATED, INSTANCE_STATE))
    # Ordered by seq, then kind, then id.
    assert [c.key for c in changes] == sorted(c.key for c in changes)


def test_each_seq_changes_exactly_what_states_replayed_before_and_after_it_differ_in() -> None:
    story, _ = _story()
    head = story.state.head_seq
    replayed = [_replayed(story, seq) for seq in range(head + 1)]
    for seq in range(1, head + 1):
        changes = changes_between(story.state, seq - 1, seq)
        assert all(c.seq == seq for c in changes)
        assert _as_tuples(changes) == _differences(replayed[seq - 1], replayed[seq], seq), seq


def test_a_span_is_the_changes_of_its_seqs_and_covers_every_difference_of_its_ends() -> None:
    story, _ = _story()
    head = story.state.head_seq
    for first in range(head):
        for last in range(first + 1, head + 1):
            span = changes_between(story.state, first, last)
            assert span == [c for seq in range(first + 1, last + 1) for c in changes_between(story.state, seq - 1, seq)]
    before, after = _replayed(story, 3), _replayed(story, head)
    listed = {c.id for c in changes_between(story.state, 3, head)}
    differing = {uuid for uuid, i in after.instances.items() if uuid not in before.instances}
    differing |= {uuid for uuid, i in before.instances.items() if after.instances[uuid].state != i.state}
    assert differing and differing <= listed


def test_the_first_seq_must_not_come_after_the_last_and_the_last_be_folded() -> None:
    story, _ = _story()
    head = story.state.head_seq
    assert changes_between(story.state, 3, 3) == []  # nothing changed after a seq up to itself
    for first, last in ((4, 3), (-1, 3), (0, head + 1)):
        with pytest.raises(ValueError, match="first <= last"):
            changes_between(story.state, first, last)


def _paged(state: BuildState, first: int, last: int, limit: int) -> list[Any]:
    """Every change in (first, last], a page of `limit` at a time, each after the last one's key."""
    found: list[Any] = []
    while True:
        page = changes_page(state, first, last, limit, found[-1].key if found else None)
        assert len(page) <= limit and all(c.key > found[-1].key for c in page[:1] if found)
        found += page
        if len(page) < limit:
            return found


def _folded(name: str) -> BuildState:
    """A golden log folded to its head."""
    state = BuildState(strict=True)
    for seq, payload in enumerate(read(name), 1):
        state.apply_payload(seq, payload)
    return state


@pytest.mark.parametrize("name", [log.name for log in GOLDEN_LOGS])
def test_pages_of_changes_are_the_span_in_order_whatever_their_size(name: str) -> None:
    """`changes_page` stops looking once its page is full: its pages, one after another, are the span."""
    state = _folded(name)
    head = state.head_seq
    spans = {(0, head), (head // 3, 2 * head // 3), (head - 1, head), (0, 1), (5, 5)}
    for first, last in spans:
        whole = changes_between(state, first, last)
        for limit in (1, 3, 10, 1_000):
            assert _paged(state, first, last, limit) == whole, (first, last, limit)
    story, _ = _story()
    for first in range(story.state.head_seq):
        for last in range(first, story.state.head_seq + 1):
            assert _paged(story.state, first, last, 2) == changes_between(story.state, first, last)


@pytest.mark.parametrize("name", [log.name for log in GOLDEN_LOGS])
def test_changes_by_span_are_each_spans_changes_whatever_its_width_and_end(name: str) -> None:
    """Reading each record once for all the spans lists, span by span, what a scan of each span lists."""
    state = _folded(name)
    head = state.head_seq
    for last in (head, head - 1, head // 2, 1, 0):
        for span in (1, 2, 7, head // 3 or 1, head, head + 5):
            got = [(first, end, changes) for first, end, changes in changes_by_span(state, last, span)]
            ends = [(first, min(last, first + span)) for first in range(0, last, span)]
            assert [(first, end) for first, end, _ in got] == ends, (last, span)
            assert [changes for _, _, changes in got] == [changes_between(state, *at) for at in ends], (last, span)
    for last, span in ((head + 1, 5), (-1, 5), (head, 0)):
        with pytest.raises(ValueError, match="width >= 1"):
            list(changes_by_span(state, last, span))


@pytest.mark.parametrize("name", [log.name for log in GOLDEN_LOGS])
def test_a_scan_lists_each_span_while_the_state_folds_on_retried_or_jumped_over(name: str) -> None:
    """As a projector uses it: the state folds between calls, a span whose write failed is asked again,
    and spans another projector wrote are jumped over."""
    payloads = list(read(name))
    state = BuildState(strict=True)
    until = len(payloads) * 2 // 3
    for seq, payload in enumerate(payloads[:until], 1):
        state.apply_payload(seq, payload)
    scan = ChangeScan(state, until, 3)
    later = iter(enumerate(payloads[until:], until + 1))
    spans = [(0, 3), (0, 3), (3, 5), (5, 6), (9, 9), (9, 11), (17, until - 1), (until - 1, until), (until, until)]
    for first, last in sorted((first, last) for first, last in spans if 0 <= first <= last <= until):
        if (event := next(later, None)) is not None:
            state.apply_payload(*event)
        assert scan.changes(state, first, last) == changes_between(state, first, last), (first, last)
    with pytest.raises(ValueError, match="first <= last"):
        scan.changes(state, until - 2, until)  # before the last call's first
