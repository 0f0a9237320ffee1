"""`Job.batch_bytes`: runs formed by their partitions' input bytes as well as by count.

The packing itself is the pure `pack_by_bytes`; the decide-level tests build a
strict BuildState through the real fold (`foldkit.Story`), with source partitions
observed with `bytes`, and look at the JobRunBuffer events `decide` returns.
"""

from __future__ import annotations

from itertools import pairwise
from typing import Any, cast

import pytest
from hypothesis import given
from hypothesis import strategies as st

from partbuild.orchestrator.context import JobContext
from partbuild.orchestrator.decide import Decision, decide, input_bytes, pack_by_bytes
from partbuild.orchestrator.graph import Graph, GraphError, Job, RetryPolicy, SourceDataset
from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.fold.build_state import BuildState
from partbuild.state.fold.records import Instance
from partbuild.state.fold.records import InstanceState as I

from foldkit import Story

# ----------------------------------------------------------------- pack_by_bytes


def spans(sizes: list[int], max_count: int, max_bytes: int | None) -> list[list[int]]:
    return [list(span) for span in pack_by_bytes(sizes, max_count, max_bytes)]


def test_packs_greedily_in_order_up_to_the_byte_limit() -> None:
    assert spans([40, 40, 30, 60, 40, 100, 0], 10, 100) == [[0, 1], [2, 3], [4], [5, 6]]


def test_an_item_over_the_limit_runs_alone() -> None:
    assert spans([10, 500, 10], 10, 100) == [[0], [1], [2]]
    assert spans([500], 10, 100) == [[0]]
    assert spans([500, 0, 0], 10, 100) == [[0], [1, 2]]


def test_the_count_still_caps_a_run() -> None:
    assert spans([1] * 7, 3, 1_000) == [[0, 1, 2], [3, 4, 5], [6]]
    assert spans([0] * 4, 2, 1) == [[0, 1], [2, 3]]


def test_without_a_byte_limit_only_the_count_counts() -> None:
    assert spans([10**12] * 5, 2, None) == [[0, 1], [2, 3], [4]]


def test_no_items_no_runs() -> None:
    assert pack_by_bytes([], 3, 100) == []
    assert pack_by_bytes([], 3, None) == []


@given(
    sizes=st.lists(st.integers(min_value=0, max_value=200), max_size=60),
    max_count=st.integers(min_value=1, max_value=12),
    max_bytes=st.none() | st.integers(min_value=1, max_value=300),
)
def test_packing_properties(sizes: list[int], max_count: int, max_bytes: int | None) -> None:
    runs = pack_by_bytes(sizes, max_count, max_bytes)
    # Every index in exactly one run, contiguous and in order.
    assert [index for run in runs for index in run] == list(range(len(sizes)))
    for run in runs:
        assert 1 <= len(run) <= max_count
        total = sum(sizes[index] for index in run)
        if max_bytes is not None and total > max_bytes:
            assert len(run) == 1  # only an oversized item alone may pass the limit
    # Greedy: the next item would not have fit in the run before it.
    for before, after in pairwise(runs):
        total = sum(sizes[index] for index in before) + sizes[after[0]]
        assert len(before) == max_count or (max_bytes is not None and total > max_bytes)


# ----------------------------------------------------------------- Job validation


@pytest.mark.parametrize("value", [0, -1, True, False, "10", 10.0])
def test_bad_batch_bytes_are_graph_errors(value: Any) -> None:
    with pytest.raises(GraphError, match="batch_bytes must be None or an int of at least 1"):
        Job("j", ["x/{n}"], noop, batch_bytes=value)


def test_batch_bytes_defaults_to_none_and_accepts_positive_ints() -> None:
    assert Job("j", ["x/{n}"], noop).batch_bytes is None
    assert Job("j", ["x/{n}"], noop, batch_bytes=1).batch_bytes == 1


# ----------------------------------------------------------------- decide


def noop(_: JobContext) -> None:
    """A job body: decisions never run it."""


def src(n: int) -> str:
    return f"src/n={n}"


def out(n: int) -> str:
    return f"out/n={n}"


def make_graph(*, batch_bytes: int | None, concurrency: int = 10, inputs: int = 1, **job: Any) -> Graph:
    """src (source) -> out; out/n=k reads src/n=k .. src/n=k+inputs-1."""
    return Graph(
        [
            Job(
                "out",
                ["out/n={n:int}"],
                noop,
                inputs=lambda p: [src(p["n"] + i) for i in range(inputs)],
                batch_size=10,
                batch_bytes=batch_bytes,
                max_concurrency=concurrency,
                **job,
            )
        ],
        [SourceDataset("src", "src/n={n:int}", locate=lambda p: f"/data/{p.ref}")],
    )


def observed(sizes: list[int]) -> Story:
    """A story where src/n=k is Live with `sizes[k]` bytes."""
    s = Story()
    for n, size in enumerate(sizes):
        s.ok(pb.PartitionObserved(partition_ref=src(n), location=f"/data/{src(n)}", bytes=size))
    return s


def step(s: Story, graph: Graph) -> Decision:
    """Decide, then apply every returned event through the fold (all must be accepted)."""
    s.clock_ms += 1_000
    decision = decide(s.state, graph, s.clock_ms)
    for event in decision.events:
        s.events.append(event)
        reason = s.state.apply(len(s.events), event)
        assert reason is None, f"decision event {event.WhichOneof('payload')} rejected: {reason}"
    return decision


def grouped(s: Story, decision: Decision) -> list[list[str]]:
    """The refs of each JobRunBuffer the decision made, in order."""
    buffers = [e.job_run_buffer for e in decision.events if e.WhichOneof("payload") == "job_run_buffer"]
    return [[s.state.instances[uuid].ref for uuid in buffer.instance_uuids] for buffer in buffers]


def test_runs_hold_at_most_batch_bytes_of_input() -> None:
    sizes = [40, 40, 30, 150, 10, 10, 100, 0]
    s = observed(sizes)
    s.want("w", *[out(n) for n in range(len(sizes))])
    decision = step(s, make_graph(batch_bytes=100))
    assert grouped(s, decision) == [
        [out(0), out(1)],  # 80; +30 would pass 100
        [out(2)],  # 30; +150 would pass
        [out(3)],  # 150 alone: over the limit, runs anyway
        [out(4), out(5)],  # 20; +100 would pass
        [out(6), out(7)],  # exactly 100
    ]
    assert all(s.istate(out(n)) == I.BUILDING for n in range(len(sizes)))


def test_batch_size_still_caps_the_count() -> None:
    s = observed([1] * 12)
    s.want("w", *[out(n) for n in range(12)])
    decision = step(s, make_graph(batch_bytes=1_000))
    assert grouped(s, decision) == [[out(n) for n in range(10)], [out(10), out(11)]]


def test_without_batch_bytes_bytes_do_not_matter() -> None:
    s = observed([10**9] * 3)
    s.want("w", *[out(n) for n in range(3)])
    assert grouped(s, step(s, make_graph(batch_bytes=None))) == [[out(0), out(1), out(2)]]


def test_input_bytes_sum_over_every_input() -> None:
    """out/n=k reads src/n=k and src/n=k+1: 30+30, 30+50, 50+50 bytes."""
    s = observed([30, 30, 50, 50])
    s.want("w", *[out(n) for n in range(3)])
    graph = make_graph(batch_bytes=140, inputs=2)
    assert [input_bytes(s.state, graph, out(n)) for n in range(3)] == [60, 80, 100]
    assert grouped(s, step(s, graph)) == [[out(0), out(1)], [out(2)]]


def test_inputs_that_are_not_live_or_empty_count_zero() -> None:
    s = observed([0, 70])
    s.want("w", out(2))  # src/n=2 is wanted (so it has an instance) but not observed: not Live
    graph = make_graph(batch_bytes=100, inputs=2)
    step(s, graph)
    assert s.istate(src(2)) != I.LIVE
    assert input_bytes(s.state, graph, out(0)) == 70  # src/n=0 Live with byte_count 0
    assert input_bytes(s.state, graph, out(1)) == 70  # src/n=2 not Live
    assert input_bytes(s.state, graph, out(5)) == 0  # inputs never seen
    s.ok(pb.PartitionTaint(partition_ref=src(1), reason="bad rows"))  # its 70 bytes are no input now
    assert s.istate(src(1)) == I.MISSING
    assert input_bytes(s.state, graph, out(0)) == 0


def test_only_live_inputs_count_even_with_bytes_recorded() -> None:
    """The fold only records bytes on Live instances; input_bytes checks the state anyway."""

    class OneInstanceState:
        def canonical_instance(self, ref: str) -> Instance | None:
            instance = Instance("u", ref, I.BUILDING if ref == src(1) else I.LIVE, 1, None)
            instance.byte_count = 10
            return instance

    state = cast(BuildState, OneInstanceState())
    assert input_bytes(state, make_graph(batch_bytes=100, inputs=3), out(0)) == 20


def test_concurrency_limits_the_byte_packed_runs() -> None:
    sizes = [60, 60, 60, 60]
    s = observed(sizes)
    s.want("w", *[out(n) for n in range(4)])
    graph = make_graph(batch_bytes=100, concurrency=2)
    first = step(s, graph)
    assert grouped(s, first) == [[out(0)], [out(1)]]
    assert step(s, graph).events == []  # no room
    s.succeed(first.new_runs[0])
    assert grouped(s, step(s, graph)) == [[out(2)]]


def test_instances_with_different_failure_counts_are_not_packed_together() -> None:
    s = observed([10, 10, 10])
    graph = make_graph(batch_bytes=100, retry=RetryPolicy(max_attempts=3, backoff_ms=0))
    s.want("a", out(0))
    (run_id,) = step(s, graph).new_runs
    s.fail(run_id, permanent=False)
    assert s.istate(out(0)) == I.UP_FOR_RETRY
    s.want("b", out(1), out(2))
    groups = sorted(grouped(s, step(s, graph)))
    assert groups == [[out(0)], [out(1), out(2)]]
