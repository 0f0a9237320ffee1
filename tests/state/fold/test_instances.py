"""Partition instances in the fold (state/fold/instances.py): InstanceRetention counts from when an instance
stopped being canonical (`drop_superseded_before_seq`), and events of the older rule (by creation) fold as before.

The story: a source partition observed once and canonical for a long time (many events), then replaced by a
new version; a short-lived one replaced early. Retention with a cutoff after the long-lived one was
replaced drops it; one before keeps it, and reads of the past as of any seq in the window find it.
"""

from __future__ import annotations

import pytest

from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.fold.build_state import BuildState
from partbuild.state.fold.past import HistoryDropped, PastState, canonical_at
from partbuild.state.log.digest import state_digest
from partbuild.state.log.events import envelope
from partbuild.state.log.snapshot import decode_state, encode_state

from foldkit import Story

LONG = "raw/long"
SHORT = "raw/short"


def _story() -> tuple[Story, dict[str, str], int]:
    """(the story, named UUIDs, the seq the long-lived instance was superseded at)."""
    s = Story()
    s.observe(LONG, "/data/long/v1")
    s.observe(SHORT, "/data/short/v1")
    u = {"long1": s.uuid(LONG), "short1": s.uuid(SHORT)}
    s.observe(SHORT, "/data/short/v2")  # superseded early
    u["short2"] = s.uuid(SHORT)
    for _ in range(20):  # a long time in which the first instance of LONG stays canonical
        s.ok(pb.ClockTick())
    s.observe(LONG, "/data/long/v2")
    u["long2"] = s.uuid(LONG)
    superseded = s.state.head_seq
    for _ in range(5):
        s.ok(pb.ClockTick())
    return s, u, superseded


def _retained(s: Story, **cutoff: int) -> BuildState:
    """A copy of the story's state with one InstanceRetention applied (the story itself unchanged)."""
    state = decode_state(encode_state(s.state))
    reason = state.apply(s.state.head_seq + 1, envelope(pb.InstanceRetention(**cutoff)))
    assert reason is None, reason
    return state


def test_a_long_canonical_instance_stays_until_its_supersession_is_older_than_the_cutoff() -> None:
    s, u, superseded = _story()
    kept = _retained(s, drop_superseded_before_seq=superseded)  # superseded at the cutoff: kept
    assert set(u.values()) - set(kept.instances) == {u["short1"]}
    dropped = _retained(s, drop_superseded_before_seq=superseded + 1)
    assert set(u.values()) - set(dropped.instances) == {u["short1"], u["long1"]}
    assert dropped.superseded == [] and kept.superseded == [u["long1"]]


def test_an_event_of_the_older_rule_drops_by_creation_as_before() -> None:
    """The bug the new rule fixes, kept for old logs: created before the cutoff, so dropped, though it was
    canonical until a moment ago."""
    s, u, superseded = _story()
    old_rule = _retained(s, drop_superseded_created_before_seq=superseded)
    assert set(u.values()) - set(old_rule.instances) == {u["short1"], u["long1"]}
    assert state_digest(old_rule) != state_digest(_retained(s, drop_superseded_before_seq=superseded))


@pytest.mark.parametrize(
    ("cutoff", "reason"),
    [
        ({}, "drop_superseded_created_before_seq must be positive"),  # as before: the old field's message
        ({"drop_superseded_before_seq": -3}, "drop_superseded_before_seq must be positive"),
        (
            {"drop_superseded_before_seq": 4, "drop_superseded_created_before_seq": 4},
            "sets drop_superseded_before_seq or drop_superseded_created_before_seq, not both",
        ),
    ],
)
def test_a_retention_without_one_positive_cutoff_is_rejected(cutoff: dict[str, int], reason: str) -> None:
    s, _, _ = _story()
    s.rejected(pb.InstanceRetention(**cutoff), reason)


def test_as_of_any_seq_in_the_window_the_canonical_instance_is_still_there() -> None:
    """After a retention with cutoff C, every read as of a seq from C - 1 on finds the ref's canonical instance
    then, equal to a replay to that seq; only before the window may it have been dropped."""
    s, u, superseded = _story()
    cutoff = superseded  # the long-lived instance was canonical until just now: its whole life is in the window
    s.ok(pb.InstanceRetention(drop_superseded_before_seq=cutoff))
    assert u["long1"] in s.state.instances and u["short1"] not in s.state.instances
    live = s.state
    replayed = BuildState(strict=True)
    for seq, event in enumerate(s.events, 1):
        replayed.apply(seq, event)
        if seq < cutoff - 1:
            continue
        past = PastState(live, seq, lambda: 0)
        for ref in (LONG, SHORT):
            uuid = canonical_at(live, ref, seq)  # raises HistoryDropped where retention dropped it
            assert uuid == replayed.canonical.get(ref), (seq, ref)
            if uuid is not None:
                assert past.instances[uuid].state == replayed.instances[uuid].state
    assert canonical_at(live, LONG, 1) == u["long1"]  # created at seq 1, canonical until `superseded`
    with pytest.raises(HistoryDropped):
        canonical_at(live, SHORT, 2)  # superseded long before the cutoff: dropped with its history
