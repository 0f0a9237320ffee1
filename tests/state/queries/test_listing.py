"""The listing indexes: wants and runs in creation order bounded by a seq; refs as of a seq, skipping
blocks of later refs, against a state replayed to that seq; refs whose first instance retention dropped."""

from __future__ import annotations

import random
from itertools import takewhile

from hypothesis import given, settings
from hypothesis import strategies as st

from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.fold.build_state import BuildState
from partbuild.state.log.events import envelope
from partbuild.state.queries.listing import CHUNK_BITS, FANOUT, LEVELS, RECENT_ADDS, ChunkedIds, ListingIndex

from foldkit import Story


def _replayed(story: Story, seq: int) -> BuildState:
    state = BuildState()
    for at, event in enumerate(story.events[:seq], 1):
        state.apply(at, event)
    return state


def _as_of(index: ListingIndex, seq: int, prefix: str = "", after: str | None = None) -> list[str]:
    return list(takewhile(lambda ref: ref.startswith(prefix), index.refs_as_of(seq, prefix, after)))


def _existing(state: BuildState, prefix: str = "", after: str | None = None) -> list[str]:
    return sorted(ref for ref in state.canonical if ref.startswith(prefix) and (after is None or ref > after))


def test_refs_as_of_are_exactly_the_refs_a_replayed_state_has() -> None:
    """Refs created over 60 wants, in an order unlike their sorted one, more than the largest skipped block."""
    story = Story()
    names = [f"{kind}/{n:05d}" for n in range(FANOUT**LEVELS // 2 + 3 * FANOUT) for kind in ("a", "b")]
    random.Random(7).shuffle(names)
    chunk = len(names) // 60 + 1
    for w in range(60):
        story.want(f"w{w}", *names[w * chunk : (w + 1) * chunk])
    index = ListingIndex()
    index.update(story.state)
    head = story.state.head_seq
    assert index.refs() == tuple(sorted(names))
    middle = sorted(names)[len(names) // 3]
    past = BuildState()
    for seq, event in enumerate([None, *story.events]):
        if event is not None:
            past.apply(seq, event)
        if seq not in (0, 1, 2, 17, 31, head - 1, head):
            continue
        # No retention here: every first is exact, so nothing is yielded that the state as of seq lacks.
        assert _as_of(index, seq) == _existing(past)
        assert _as_of(index, seq, "b/") == _existing(past, "b/")
        assert _as_of(index, seq, "a/000") == _existing(past, "a/000")
        assert _as_of(index, seq, "", middle) == _existing(past, "", middle)
        assert _as_of(index, seq, "a/", middle) == _existing(past, "a/", middle)
    assert _as_of(index, head, "c/") == []


def test_refs_added_after_the_first_read_merge_in_order() -> None:
    """Refs folded after a read are spliced into the sorted list with their own firsts."""
    story = Story()
    story.want("w1", "m/5", "m/1")
    index = ListingIndex()
    index.update(story.state)
    assert _as_of(index, 1) == ["m/1", "m/5"]
    story.want("w2", "m/3", "m/9", "m/0")
    index.update(story.state)
    assert index.refs() == ("m/0", "m/1", "m/3", "m/5", "m/9")
    assert _as_of(index, 1) == ["m/1", "m/5"]
    assert _as_of(index, 2) == ["m/0", "m/1", "m/3", "m/5", "m/9"]
    assert _as_of(index, 2, "m/", "m/3") == ["m/5", "m/9"]


def test_a_ref_whose_first_instance_retention_dropped_is_still_listed_in_the_past() -> None:
    """A process starting on a state after retention cannot see a ref's first instance: it lists the ref from
    the newest exact first seen before it on, so the state as of an earlier seq still finds it."""
    story = Story()
    story.want("w0", "early/0")  # seq 1
    story.ok(pb.PartitionObserved(partition_ref="src/x", location="/x", version="v1"))  # seq 2: src/x's first
    story.want("w1", "late/0")  # seq 3
    story.ok(pb.PartitionObserved(partition_ref="src/x", location="/x", version="v2"))  # seq 4 supersedes it
    story.ok(pb.InstanceRetention(drop_superseded_created_before_seq=3))  # seq 5 drops the first instance
    assert (len(_replayed(story, 4).instances), len(story.state.instances)) == (4, 3)

    index = ListingIndex()
    index.update(story.state)
    assert [ref for ref in _as_of(index, 2) if ref in _replayed(story, 2).canonical] == ["early/0", "src/x"]
    assert "late/0" not in _as_of(index, 2)  # its first instance is held: exact, so skipped
    assert _as_of(index, 0) == []


def test_wants_between_two_seqs_in_creation_order() -> None:
    story = Story()
    for n in range(5):
        story.want(f"w{n}", f"r/{n}")
    index = ListingIndex()
    index.update(story.state)
    assert list(index.wants.between(0, 5)) == ["w0", "w1", "w2", "w3", "w4"]
    assert list(index.wants.between(2, 4)) == ["w2", "w3"]
    assert list(index.wants.between(4, 2)) == []
    assert (index.wants.has_seq(3), index.wants.has_seq(6)) == (True, False)


def is_int(ref: str) -> bool:
    """A pattern `d/{n:int}`'s match, on refs under `d/`."""
    return ref[2:].isdigit()


def test_refs_matching_keeps_a_patterns_refs_sorted_until_refs_are_added() -> None:
    state = BuildState()
    index = ListingIndex()
    for seq, ref in enumerate(["d/2", "d/10", "e/1", "d/x", "c/1"], start=1):
        state.apply(seq, envelope(pb.PartitionObserved(partition_ref=ref, location="/x")))
    index.update(state)
    found = index.refs_matching("d", "d/", is_int)
    assert found == ("d/10", "d/2")  # sorted as text; `d/x` is no int
    assert index.refs_matching("d", "d/", is_int) is found  # kept
    state.apply(6, envelope(pb.PartitionObserved(partition_ref="d/3", location="/x")))
    index.update(state)
    assert index.refs_matching("d", "d/", is_int) == ("d/10", "d/2", "d/3")


def observe(state: BuildState, index: ListingIndex, refs: list[str]) -> None:
    """Fold one PartitionObserved per ref, then let the index take them in (one add, merged when next read)."""
    for ref in refs:
        state.apply(state.head_seq + 1, envelope(pb.PartitionObserved(partition_ref=ref, location="/x")))
    index.update(state)


def test_refs_matching_splices_in_only_the_refs_added_since_and_never_changes_a_list_it_returned() -> None:
    state, index = BuildState(), ListingIndex()
    observe(state, index, ["d/5", "d/1", "e/1"])
    first = index.refs_matching("d", "d/", is_int)
    matched: list[str] = []

    def counting(ref: str) -> bool:
        matched.append(ref)
        return is_int(ref)

    observe(state, index, ["d/0", "d/3", "d/y", "c/9"])
    observe(state, index, ["d/9"])  # two adds since the list was taken: both are spliced in
    second = index.refs_matching("d", "d/", counting)
    assert second == ("d/0", "d/1", "d/3", "d/5", "d/9")
    assert sorted(matched) == ["d/0", "d/3", "d/9", "d/y"]  # the new refs under the prefix only
    assert first == ("d/1", "d/5")  # a sequence handed out stays as it was
    assert index.added_to("d", first) == ["d/0", "d/3", "d/9"]  # what was spliced into it
    assert index.added_to("d", second) is None  # nothing was spliced into the newest list
    assert list(second) == sorted(ref for ref in index.refs() if ref.startswith("d/") and is_int(ref))


def test_refs_matching_takes_a_full_pass_when_the_added_refs_were_not_kept() -> None:
    state, index = BuildState(), ListingIndex()
    observe(state, index, ["d/1"])
    index.refs_matching("d", "d/", is_int)
    for n in range(RECENT_ADDS + 1):  # more adds than are kept
        observe(state, index, [f"d/{n + 2}"])
        if n % 100 == 0:
            index.refs()  # a read of the whole list merges: the adds are kept all the same
    matched: list[str] = []
    found = index.refs_matching("d", "d/", lambda ref: matched.append(ref) or is_int(ref))
    assert len(found) == RECENT_ADDS + 2
    assert len(matched) == len(found)  # every ref under the prefix, matched again


@given(st.lists(st.integers(min_value=0, max_value=9_000), max_size=6))
@settings(max_examples=40, deadline=None)
def test_ids_in_chunks_read_as_the_list_they_were_appended_to(batches: list[int]) -> None:
    """Appended in batches that fill, straddle and skip chunks of 4,096: every index reads the id put there."""
    ids, expected = ChunkedIds(), []
    for size in batches:
        batch = [f"id-{len(expected) + n}" for n in range(size)]
        ids.extend(batch)
        expected += batch
        assert len(ids) == len(expected)
    assert [ids[index] for index in range(len(ids))] == expected
    full, _ = ids.snapshot
    assert all(len(chunk) == 1 << CHUNK_BITS for chunk in full)
