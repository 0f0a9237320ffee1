"""ReactionFired in the fold (state/fold/reactions.py): its one want lands with its cause, and copies and
mistakes are rejected with a reason, changing nothing."""

from __future__ import annotations

from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.fold.build_state import BuildState
from partbuild.state.fold.reactions import reaction_cause, reaction_want_id
from partbuild.state.fold.records import WantState
from partbuild.state.rules.ids import instance_uuid

from golden_log import reaction_events


def folded() -> tuple[BuildState, dict[int, str | None]]:
    state = BuildState()
    verdicts = {}
    for seq, event in enumerate(reaction_events(), start=1):
        verdicts[seq] = state.apply(seq, event)
    return state, verdicts


def test_a_firing_creates_its_want_with_the_change_that_caused_it() -> None:
    state, verdicts = folded()
    raw1, raw2 = instance_uuid(1, "raw/a"), instance_uuid(7, "raw/a")
    want_id = reaction_want_id("d", pb.REACTION_KIND_UPSTREAM_CHANGE, raw2, "d/1")
    assert verdicts[8] is None
    want = state.wants[want_id]
    assert want.refs == ("d/1",) and want.source == "system:orchestrator" and want.state == WantState.SUCCESSFUL
    assert state.want_causes[want_id] == f"reaction on_upstream_change of job d: raw/a got instance {raw2} (was {raw1})"
    weekly = reaction_want_id("wk", pb.REACTION_KIND_UPSTREAM_CHANGE, instance_uuid(7, "d/1"), "wk/1")
    assert verdicts[14] is None and state.wants[weekly].state == WantState.SUCCESSFUL
    arrival = reaction_want_id("d", pb.REACTION_KIND_SOURCE_ARRIVAL, instance_uuid(17, "raw/b"), "d/2")
    assert state.want_causes[arrival] == (
        f"reaction on_source_arrival of job d: raw/b first observed as instance {instance_uuid(17, 'raw/b')}"
    )


def test_copies_and_mistakes_are_rejected_with_their_reason() -> None:
    state, verdicts = folded()
    rejected = {seq: reason for seq, reason in verdicts.items() if reason is not None}
    want_id = reaction_want_id("d", pb.REACTION_KIND_UPSTREAM_CHANGE, instance_uuid(7, "raw/a"), "d/1")
    assert rejected[9] == f"want '{want_id}' already exists"
    assert rejected[10].startswith("a reaction's want is named")
    assert rejected[11].endswith("is not an instance of 'd/1'")
    assert rejected[19] == "a source's arrival supersedes no instance"
    assert rejected[20] == "a reaction's want names one partition"
    assert rejected[21] == "a reaction fires with a want"
    assert set(rejected) == {9, 10, 11, 19, 20, 21}
    assert "mine" not in state.wants and "d/3" not in state.canonical


def test_the_cause_of_an_unknown_kind_is_refused_before_anything_is_read() -> None:
    state = BuildState()
    fired = pb.ReactionFired(job="d", kind=7, cause_ref="raw/a", cause_instance_uuid="u")
    assert state.apply(1, pb.Event(reaction_fired=fired)).startswith("reaction kind 7 is not one of")
    fired.kind = pb.REACTION_KIND_UPSTREAM_CHANGE
    assert reaction_cause(fired) == "reaction on_upstream_change of job d: raw/a first observed as instance u"
