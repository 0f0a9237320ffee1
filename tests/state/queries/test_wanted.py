"""Waiting instances no active want needs: expiry and cancel leave them, a new want takes them back, as of any seq."""

from __future__ import annotations

from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.fold.build_state import BuildState
from partbuild.state.fold.past import PastState
from partbuild.state.fold.records import InstanceState as I
from partbuild.state.fold.records import WantState as W
from partbuild.state.queries.wanted import WAITING_STATE_NAMES, WaitingCount, is_unwanted, waiting_counts

from foldkit import Story

WEEK = "agg/weekly/week=1"
DAY = "agg/daily/date=1"
OTHER = "agg/daily/date=2"


def _needs(state: BuildState) -> dict[str, tuple[int, int]]:
    """(wanted, unwanted) per waiting state with any instance."""
    counted = waiting_counts(state, state.counts()["instances"])
    return {name: (count.wanted, count.unwanted) for name, count in counted.items() if count.total}


def _scanned(state: BuildState) -> dict[str, tuple[int, int]]:
    """The same, by looking at every instance: what the cheap count must equal."""
    found: dict[str, list[int]] = {}
    for instance in state.instances.values():
        name = instance.state.name.lower()
        if name in WAITING_STATE_NAMES:
            found.setdefault(name, [0, 0])[is_unwanted(state, instance)] += 1
    return {name: (wanted, unwanted) for name, (wanted, unwanted) in found.items()}


def test_an_expired_want_leaves_its_waiting_instances_unwanted() -> None:
    s = Story()
    s.want("w1", DAY, OTHER, ttl_seconds=60)
    s.want("w2", OTHER)  # no TTL: OTHER stays wanted
    assert _needs(s.state) == {"missing": (2, 0)}
    s.ok(pb.ClockTick(), advance_ms=120_000)
    assert s.wstate("w1") == W.EXPIRED and s.istate(DAY) == I.MISSING
    assert is_unwanted(s.state, s.instance(DAY)) and not is_unwanted(s.state, s.instance(OTHER))
    assert _needs(s.state) == {"missing": (1, 1)} == _scanned(s.state)


def test_a_new_want_for_the_ref_makes_the_same_instance_wanted_again() -> None:
    s = Story()
    s.want("w1", DAY, ttl_seconds=60)
    s.ok(pb.ClockTick(), advance_ms=120_000)
    unwanted = s.uuid(DAY)
    assert _needs(s.state) == {"missing": (0, 1)}
    s.want("w2", DAY)
    assert s.uuid(DAY) == unwanted  # it joins the waiting instance, no new one
    assert not is_unwanted(s.state, s.instance(DAY))
    assert _needs(s.state) == {"missing": (1, 0)} == _scanned(s.state)


def test_a_derivative_wants_upstream_instance_is_wanted_while_its_parent_is_active() -> None:
    s = Story()
    s.want("w1", WEEK)
    s.buffer("run-1", WEEK)
    s.missing("run-1", DAY)
    s.derivative("w-day", "w1", "run-1", DAY)
    assert s.istate(WEEK) == I.UPSTREAM_BUILDING and s.istate(DAY) == I.MISSING
    assert _needs(s.state) == {"missing": (1, 0), "upstream_building": (1, 0)} == _scanned(s.state)
    s.ok(pb.WantCancel(want_id="w1", reason="not needed"))
    assert s.wstate("w-day") == W.CANCELED  # the cancel reached the derivative want
    assert is_unwanted(s.state, s.instance(DAY)) and is_unwanted(s.state, s.instance(WEEK))
    assert _needs(s.state) == {"missing": (0, 1), "upstream_building": (0, 1)} == _scanned(s.state)


def test_building_and_ended_instances_are_never_unwanted() -> None:
    s = Story()
    s.want("w1", DAY, OTHER, ttl_seconds=60)
    s.buffer("run-1", DAY)
    s.fail("run-1", permanent=False)  # UpForRetry: waiting
    s.buffer("run-2", OTHER)  # Building: its run ends it
    s.ok(pb.ClockTick(), advance_ms=120_000)
    assert s.istate(DAY) == I.UP_FOR_RETRY and s.istate(OTHER) == I.BUILDING
    assert is_unwanted(s.state, s.instance(DAY)) and not is_unwanted(s.state, s.instance(OTHER))
    assert _needs(s.state) == {"up_for_retry": (0, 1)} == _scanned(s.state)
    s.succeed("run-2")
    assert not is_unwanted(s.state, s.instance(OTHER))


def test_as_of_a_seq_the_counts_are_those_of_the_state_replayed_to_it() -> None:
    s = Story()
    s.want("w1", DAY, ttl_seconds=60)
    s.ok(pb.ClockTick(), advance_ms=120_000)
    s.want("w2", DAY)
    s.want("w3", OTHER, ttl_seconds=60)
    s.ok(pb.ClockTick(), advance_ms=120_000)
    for seq in range(1, s.state.head_seq + 1):
        replayed = BuildState(strict=True)
        for at, event in enumerate(s.events[:seq], 1):
            replayed.apply(at, event)
        past = PastState(s.state, seq, lambda: 0)
        assert waiting_counts(past, past.counts()["instances"]) == waiting_counts(  # type: ignore[arg-type]
            replayed, replayed.counts()["instances"]
        )
        assert set(past.active_wants_by_ref) == set(replayed.active_wants_by_ref)
    assert waiting_counts(s.state, s.state.counts()["instances"])["missing"] == WaitingCount(2, 1)
