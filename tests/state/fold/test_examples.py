"""The fold on hand-written logs: the invariant checker itself, rejections that must leave the clock and
state alone, cascading taints on cycles and diamonds, TTLs already passed, and the exact size limits of
refs and ids."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.fold.build_state import BuildState
from partbuild.state.fold.records import InstanceState, WantState
from partbuild.state.log.digest import state_digest
from partbuild.state.log.events import envelope
from partbuild.state.log.snapshot import decode_state, encode_state
from partbuild.state.queries.lineage import ref_history

from invariantkit import check_invariants, check_taint_outcome
from stepkit import FUTURE_FIELD, INT64_MAX, LOCATIONS, REFS, T0


class Log:
    """A tiny event writer for the example tests: consecutive seqs, a clock that ticks 1 s."""

    def __init__(self) -> None:
        self.state = BuildState(strict=True)
        self.ts = T0

    def add(self, payload: Any, *, advance_ms: int = 1_000) -> str | None:
        self.ts += advance_ms
        seq = self.state.head_seq + 1
        return self.state.apply(seq, envelope(payload, timestamp_ms=self.ts, event_id=f"evt-{seq}"))

    def ok(self, payload: Any, **kwargs: int) -> None:
        reason = self.add(payload, **kwargs)
        assert reason is None, reason
        check_invariants(self.state)

    def uuid(self, ref: str) -> str:
        return self.state.canonical[ref]


A, B, C = REFS[0], REFS[2], REFS[4]


def test_check_invariants_accepts_a_full_lifecycle_and_catches_corruption() -> None:
    """The checker passes on a state with every kind of entity, and fails on each injected corruption."""
    log = Log()
    log.ok(pb.WantCreate(want_id="w", partition_refs=[A, B], ttl_seconds=3600))
    log.ok(pb.JobRunBuffer(job_run_id="r1", job_label="j", instance_uuids=[log.uuid(B)]))
    log.ok(pb.JobRunMissingDeps(job_run_id="r1", missing_refs=[A, C]))
    assert log.state.wants["w"].state == WantState.UPSTREAM_BUILDING
    log.ok(pb.PartitionObserved(partition_ref=A, location=LOCATIONS[0]))
    log.ok(pb.PartitionObserved(partition_ref=C, location=LOCATIONS[0]))
    assert log.state.instances[log.uuid(B)].state == InstanceState.MISSING
    log.ok(pb.JobRunBuffer(job_run_id="r2", job_label="j", instance_uuids=[log.uuid(B)]))
    log.ok(pb.JobRunSuccess(job_run_id="r2", input_instance_uuids=[log.uuid(A), log.uuid(C)]))
    assert log.state.wants["w"].state == WantState.SUCCESSFUL
    log.ok(pb.PartitionTaint(partition_ref=A, reason="bad"))
    assert log.state.instances[log.state.instances[log.uuid(B)].previous_uuid or ""].state == InstanceState.TAINTED
    log.ok(pb.InstanceRetention(drop_superseded_created_before_seq=log.state.head_seq))
    assert log.state.dropped_instances == 2  # the tainted A and B
    log.ok(pb.WantCreate(want_id="w2", partition_refs=[B], ttl_seconds=3600))
    log.ok(pb.JobRunBuffer(job_run_id="r3", job_label="j", instance_uuids=[log.uuid(B)]))
    assert log.state.wants["w2"].state == WantState.BUILDING

    healthy = encode_state(log.state)
    live, missing = InstanceState.LIVE, InstanceState.MISSING
    corruptions = [
        lambda s: s.instance_counts.__setitem__(live, s.instance_counts[live] + 1),
        lambda s: setattr(s.instances[s.canonical[A]], "superseded_seq", 3),
        lambda s: setattr(s.instances[s.canonical[C]], "state", InstanceState.TAINTED),
        lambda s: s.canonical.__setitem__(A, s.canonical[C]),
        lambda s: setattr(s.instances[s.canonical[B]], "attempts", ()),
        lambda s: setattr(s.instances[s.canonical[A]], "consumers", [s.canonical[B]]),
        lambda s: s.wants_by_ref.clear(),
        lambda s: s.wants["w2"].tally.__setitem__(missing, 1),
        lambda s: setattr(s, "clock_ms", s.clock_ms + 3_600_000),  # w2 should have expired
        lambda s: s.active_wants_by_ref.clear(),
        lambda s: s.wanted_instance_counts.__setitem__(missing, s.wanted_instance_counts[missing] + 1),
    ]
    for corrupt in corruptions:
        state = decode_state(healthy)
        check_invariants(state)
        corrupt(state)
        with pytest.raises(AssertionError):
            check_invariants(state)


def test_rejected_event_with_a_wild_timestamp_expires_nothing() -> None:
    """Only applied events move the clock: an invalid event far in the future leaves TTLs alone."""
    log = Log()
    log.ok(pb.WantCreate(want_id="w", partition_refs=[A], ttl_seconds=60))
    before = state_digest(log.state)
    assert log.add(pb.WantCancel(want_id="ghost"), advance_ms=10**9) is not None
    assert log.state.wants["w"].state == WantState.IDLE
    assert log.state.clock_ms == T0 + 1_000
    check_invariants(log.state)
    assert state_digest(log.state) != before  # head_seq and the rejection are part of the digest
    # The next applied event carries the clock past the TTL: the want expires in that same step.
    log.ok(pb.WantCreate(want_id="w2", partition_refs=[B]), advance_ms=0)
    assert log.state.wants["w"].state == WantState.EXPIRED
    assert log.state.wants["w2"].state == WantState.IDLE


def test_payload_from_a_newer_schema_and_garbage_are_rejections() -> None:
    """Unknown payload types, empty payloads and unparseable bytes become rejections, not errors."""
    state = BuildState(strict=True)
    assert state.apply_payload(1, pb.Event(event_id="e").SerializeToString() + FUTURE_FIELD) is not None
    assert state.apply_payload(2, b"") is not None
    assert state.apply_payload(3, b"\xff\xff\xff") is not None
    bad_utf8 = bytearray(envelope(pb.WantCancel(want_id="abc"), timestamp_ms=1, event_id="e").SerializeToString())
    bad_utf8[-1] = 0xFF
    assert state.apply_payload(4, bytes(bad_utf8)) is not None
    assert [r.event_type for r in state.rejections] == ["none", "none", "unparseable", "unparseable"]
    assert state.clock_ms == 0 and not state.wants and not state.instances
    with pytest.raises(ValueError):
        state.apply_payload(4, b"\xff")


def _build(log: Log, run_id: str, ref: str, inputs: Sequence[str] = ()) -> str:
    """Buffer and succeed one run for `ref`'s canonical instance; returns the instance built."""
    uuid = log.uuid(ref)
    log.ok(pb.JobRunBuffer(job_run_id=run_id, job_label="j", instance_uuids=[uuid]))
    log.ok(pb.JobRunSuccess(job_run_id=run_id, input_instance_uuids=list(inputs)))
    return uuid


def test_cascading_taint_terminates_on_a_provenance_cycle() -> None:
    """Inputs only have to exist, so x can be built from y and y from x; a taint still ends, tainting both."""
    log = Log()
    log.ok(pb.WantCreate(want_id="w", partition_refs=[A, B]))
    x, y = log.uuid(A), log.uuid(B)
    _build(log, "r1", B, [x])  # x is still Missing here: a valid (if odd) input
    _build(log, "r2", A, [y])
    assert list(log.state.instances[x].consumers or ()) == [y] and list(log.state.instances[y].consumers or ()) == [x]
    log.ok(pb.PartitionTaint(partition_ref=A, reason="bad"))
    check_taint_outcome(log.state, log.state.head_seq, pb.PartitionTaint(partition_ref=A))
    assert log.state.instances[x].state == log.state.instances[y].state == InstanceState.TAINTED
    assert log.state.instance_counts[InstanceState.MISSING] == 2  # one fresh instance per ref, not more


def test_cascading_taint_reaches_a_diamond_bottom_once() -> None:
    """A -> B, A -> C, (B, C) -> D: tainting A replaces each of B, C and D exactly once."""
    log = Log()
    d = REFS[6]
    log.ok(pb.WantCreate(want_id="w", partition_refs=[A, B, C, d]))
    a = _build(log, "ra", A)
    b = _build(log, "rb", B, [a])
    c = _build(log, "rc", C, [a])
    _build(log, "rd", d, [b, c])
    head = log.state.head_seq
    log.ok(pb.PartitionTaint(partition_ref=A))
    check_taint_outcome(log.state, head + 1, pb.PartitionTaint(partition_ref=A))
    assert [len(ref_history(log.state, ref)) for ref in (A, B, C, d)] == [2, 2, 2, 2]
    assert all(log.state.instances[log.uuid(ref)].state == InstanceState.MISSING for ref in (A, B, C, d))


def test_want_whose_ttl_passed_before_it_arrived_expires_in_the_same_event() -> None:
    """data_timestamp + ttl already behind the log's clock: applied, then expired at its own seq."""
    log = Log()
    log.ok(pb.WantCreate(want_id="late", partition_refs=[A], ttl_seconds=60, data_timestamp_ms=T0 - 3_600_000))
    want = log.state.wants["late"]
    assert want.state == WantState.EXPIRED and want.updated_seq == want.created_seq == log.state.head_seq
    assert want.tally is None and not log.state.expiry
    assert log.state.want_counts[WantState.EXPIRED] == 1 and sum(log.state.want_counts) == 1
    # Its instance stays, Missing, with no active want left for it.
    assert log.state.instances[log.uuid(A)].state == InstanceState.MISSING
    assert list(log.state.active_wants_for_ref(A)) == []


@pytest.mark.parametrize(
    ("ref", "want_id", "applied"),
    [
        ("x" * 4096, "i" * 256, True),  # both exactly at their limit
        ("é" * 2048, "w", True),  # 4096 bytes of UTF-8 in 2048 characters
        ("😀" * 1024, "w", True),  # 4096 bytes in 1024 characters
        ("é" * 2049, "w", False),  # 4098 bytes: over, although only 2049 characters
        ("x" * 4097, "w", False),
        ("ok", "i" * 257, False),
        ("a\u2028b", "w", True),  # a line separator is not a control character
        ("a\x9fb", "w", False),  # the last C1 control character
    ],
)
def test_ref_and_id_length_limits_are_exact(ref: str, want_id: str, applied: bool) -> None:
    """Limits count UTF-8 bytes for refs and characters for ids; a rejection leaves no trace but itself."""
    log = Log()
    reason = log.add(pb.WantCreate(want_id=want_id, partition_refs=[ref], ttl_seconds=INT64_MAX))
    assert (reason is None) == applied, reason
    assert (ref in log.state.canonical) == applied
    assert len(log.state.rejections) == (not applied)
    check_invariants(log.state)
