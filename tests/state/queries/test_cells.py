"""A ref's grid cell and the checks a grid's check filter reads, with the seq since which they have held
(`ref_cell`, what the state store keeps per ref): as of every seq from `since` to the head, a read of the
past finds the same cell and the same checks, including while a stale instance serves."""

from __future__ import annotations

from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.fold.build_state import BuildState
from partbuild.state.fold.checks import latest_checks
from partbuild.state.fold.past import PastState
from partbuild.state.log.events import envelope, from_job_run, manual
from partbuild.state.queries.cells import GRID_STATES, cell_state, ref_cell
from partbuild.state.rules.check_results import check_result_name

from golden_log import GOLDEN_LOGS, read_events


def _readers_checks(state: PastState | BuildState, ref: str) -> tuple[tuple[str, str], ...] | None:
    """The latest checks of the instance readers of `ref` get, as a grid's check filter reads them."""
    instance = state.served_instance(ref) or state.canonical_instance(ref)
    assert instance is not None
    latest = latest_checks(state.check_results.get(instance.uuid, ()))
    return None if latest is None else tuple((row[0], check_result_name(row[1], row[2], row[3])) for row in latest[1])


def _held_since(state: BuildState) -> int:
    """Check every ref's `ref_cell` against reads of the past from its `since` to the head; how many reads."""
    reads = 0
    for ref in state.canonical:
        found = ref_cell(state, ref)
        assert found is not None
        cell, since, checks = found
        for seq in range(since, state.head_seq + 1):
            past = PastState(state, seq, lambda: 0)
            assert cell_state(past, ref) == GRID_STATES[cell], (ref, seq)
            assert _readers_checks(past, ref) == checks, (ref, seq)
            reads += 1
    return reads


def test_every_refs_cell_and_checks_held_since_the_seq_it_says_in_every_golden_log() -> None:
    for log in GOLDEN_LOGS:
        events = read_events(log.name)
        every = 1 if log.name == "outcomes" else max(7, len(events) // 10)  # its stale periods: at each seq
        state = BuildState()
        for seq, event in enumerate(events, start=1):
            state.apply(seq, event)
            if seq % every == 0 or seq == len(events):
                _held_since(state)


def test_checks_run_again_on_a_stale_instance_while_it_serves_move_its_refs_since() -> None:
    """The outcomes log up to a keep-serving taint (d/1 serves its stale instance, checked, while its successor
    is Missing), then that stale instance's checks run again: the checks readers get change, and so does
    `since`, though neither the canonical instance nor its predecessor changed."""
    events = read_events("outcomes")[:27]
    state = BuildState()
    for seq, event in enumerate(events, start=1):
        state.apply(seq, event)
    served = state.serving["d/1"]
    assert served != state.canonical["d/1"]
    rows = [pb.CheckResult(name="rows", passed=False, blocking=False, description="rows")]
    again = [
        envelope(pb.ChecksRequest(request_id="again", instance_uuid=served)),
        envelope(pb.ChecksRerun(request_id="again", checks=pb.InstanceChecks(instance_uuid=served, results=rows))),
        envelope(pb.ClockTick()),
    ]
    for seq, event in enumerate(again, start=len(events) + 1):
        assert state.apply(seq, event) is None
    found = ref_cell(state, "d/1")
    assert found is not None and found[1] == len(events) + 2 and found[2] == (("rows", "warning"),)
    assert _held_since(state) > len(state.canonical)


def test_a_stale_instance_withdrawn_after_its_successor_was_replaced_moves_its_refs_since() -> None:
    """x/1 serves its stale instance (checked again meanwhile) while its successor fails for good and a new
    want makes another: withdrawing the stale one then changes what readers get, though the canonical instance
    and its predecessor do not change: the ref's kept serving changes say when."""
    events = read_events("outcomes")[:21]
    state = BuildState()
    for seq, event in enumerate(events, start=1):
        state.apply(seq, event)
    stale, successor = state.serving["x/1"], state.canonical["x/1"]
    rows = [pb.CheckResult(name="rows", passed=True, blocking=False, description="rows")]
    checks = pb.InstanceChecks(instance_uuid=stale, results=rows)
    failed = pb.JobRunFailure(job_run_id="r7", error_class=pb.ERROR_CLASS_PERMANENT, message="bad")
    more = [
        envelope(pb.ChecksRequest(request_id="again", instance_uuid=stale)),
        envelope(pb.ChecksRerun(request_id="again", checks=checks)),
        envelope(pb.JobRunBuffer(job_run_id="r7", job_label="x", instance_uuids=[successor], serve_stale=True)),
        envelope(failed, source=from_job_run("r7")),
        envelope(pb.WantCreate(want_id="w9", partition_refs=["x/1"]), source=manual("ann")),
        envelope(pb.PartitionTaint(partition_ref="x/1", reason="wrong", instance_uuid=stale), source=manual("ann")),
    ]
    for seq, event in enumerate(more, start=len(events) + 1):
        assert state.apply(seq, event) is None
    assert not state.serving and state.instances[state.canonical["x/1"]].previous_uuid == successor
    found = ref_cell(state, "x/1")
    assert found is not None and found[1] == state.head_seq and found[2] is None
    assert _held_since(state) > len(state.canonical)
