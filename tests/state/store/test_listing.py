"""A read replica's listings from the state store's index (state/store/listing.py), against a live state's.

A pattern's refs are kept and brought up to date with the refs created since: each new ref once, in order,
and `added_to` says which were spliced in; the lists of wants and runs page as the live index does.
"""

from __future__ import annotations

from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.database import Database
from partbuild.state.fold.past import HistoryDropped
from partbuild.state.fold.view import StateView
from partbuild.state.log.events import envelope
from partbuild.state.log.live import LiveState
from partbuild.state.queries.listing import ListingIndex
from partbuild.state.store.listing import StoredListing
from partbuild.state.store.projector import Projector

from golden_log import read_events


def _observed(refs: list[str]) -> list[pb.Event]:
    return [envelope(pb.PartitionObserved(partition_ref=ref, location=f"/data/{ref}")) for ref in refs]


def test_a_patterns_refs_take_in_the_refs_created_since_once_each(database: Database) -> None:
    database.log.append(_observed([f"raw/a/day={day:02d}" for day in (3, 1, 7)] + ["raw/b/day=01"]))
    live = LiveState(database.log)
    projector = Projector(live, database.changes)
    projector.project()
    listing = StoredListing(database.changes.records.engine, database.changes.watermark)
    first = listing.refs_matching("a", "raw/a/", lambda ref: ref.endswith(("1", "3", "5", "7", "9")))
    assert first == ["raw/a/day=01", "raw/a/day=03", "raw/a/day=07"]
    assert listing.refs_matching("a", "raw/a/", bool) is first  # nothing created since: the same list

    database.log.append(_observed(["raw/a/day=05", "raw/a/day=02", "raw/b/day=05", "raw/a/day=09"]))
    live.catch_up()
    projector.project()
    now = listing.refs_matching("a", "raw/a/", lambda ref: ref.endswith(("1", "3", "5", "7", "9")))
    assert now == ["raw/a/day=01", "raw/a/day=03", "raw/a/day=05", "raw/a/day=07", "raw/a/day=09"]
    assert listing.added_to("a", first) == ["raw/a/day=05", "raw/a/day=09"]
    assert first == ["raw/a/day=01", "raw/a/day=03", "raw/a/day=07"]  # a list handed out never changes
    assert listing.added_to("a", now) is None


def test_lists_page_as_the_live_index_does(database: Database) -> None:
    database.log.append(read_events("outcomes"))
    live = LiveState(database.log)
    Projector(live, database.changes).project()
    index = ListingIndex()
    with live.read() as state:
        index.update(state)
    stored = StoredListing(database.changes.records.engine, database.changes.watermark)
    head = live.head_seq
    for order, kept in ((stored.wants, index.wants), (stored.runs, index.runs)):
        for after, upto in ((0, head), (head // 3, head), (0, head // 2)):
            assert list(order.between(after, upto)) == list(kept.between(after, upto))
        assert list(order.newest(head, None)) == list(kept.newest(head, None))
        assert list(order.newest(head, head // 2)) == list(kept.newest(head, head // 2))
        assert all(order.has_seq(seq) == kept.has_seq(seq) for seq in range(head + 2))
    assert list(stored.refs_from("", None)) == list(index.refs_from("", None))
    refs = index.refs()
    assert refs and list(stored.refs_from("", refs[len(refs) // 2])) == list(index.refs_from("", refs[len(refs) // 2]))
    for seq in (0, head // 3, head // 2, head):  # exactly the refs whose first instance was created by then
        with live.read_as_of(seq) as past:
            had = [ref for ref in refs if _had_one(past, ref)]
        assert list(stored.refs_as_of(seq, "", None)) == had


def _had_one(past: StateView, ref: str) -> bool:
    """Whether `ref` had an instance as of the past's seq (one retention dropped since: it had)."""
    try:
        return past.canonical.get(ref) is not None
    except HistoryDropped:
        return True
