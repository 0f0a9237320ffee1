"""PartitionGone in the fold: accepted only behind the slice that ended its key range, for a Live instance there.

(Source scan cursors are covered by tests/orchestrator/sources/test_scanner.py and the golden logs `scans`
and `shards`; the golden log `gone` pins the digest of these rules.)
"""

from __future__ import annotations

from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.fold.build_state import BuildState
from partbuild.state.fold.records import InstanceState, WantState
from partbuild.state.log.events import envelope, manual, system

REF = "raw/date=2026-01-01"
WHERE = "/data/raw/date=2026-01-01"
SCANNER = system("source-scanner", "test")


class Log:
    """A BuildState fed one event at a time: seq = position."""

    def __init__(self) -> None:
        self.state = BuildState()
        self.seq = 0

    def add(self, payload: object, source: pb.EventSource = SCANNER) -> str | None:
        self.seq += 1
        return self.state.apply(self.seq, envelope(payload, source=source, timestamp_ms=1_800_000_000_000 + self.seq))  # type: ignore[arg-type]

    def end_pass(self, pass_number: int) -> int:
        assert self.add(pb.SourceScanProgress(source="raw", pass_number=pass_number, last_key=b"z", done=True)) is None
        return self.seq


def gone(pass_number: int, scan_seq: int, location: str = WHERE) -> pb.PartitionGone:
    return pb.PartitionGone(
        partition_ref=REF, location=location, source="raw", pass_number=pass_number, scan_seq=scan_seq
    )


def test_a_gone_is_accepted_only_behind_its_slice_for_the_live_instance_there() -> None:
    log = Log()
    log.end_pass(1)
    log.add(pb.PartitionObserved(partition_ref=REF, location=WHERE, version="v1"))
    uuid = log.state.canonical[REF]
    ended = log.end_pass(2)
    assert "another location" in (log.add(gone(2, ended, "/elsewhere")) or "")
    assert "stale scanner" in (log.add(gone(2, ended - 1)) or "")
    assert "not the current pass" in (log.add(gone(1, ended)) or "")
    assert "not the current pass" in (log.add(pb.PartitionGone(partition_ref=REF, location=WHERE, source="x")) or "")
    assert log.add(gone(2, ended)) is None
    instance = log.state.instances[uuid]
    assert instance.state == InstanceState.GONE and log.state.canonical[REF] == uuid
    assert instance.note == f"its data is gone: pass 2 of source raw no longer found it (seq {log.seq})"
    assert "not Live" in (log.add(gone(2, ended)) or "")
    assert log.state.counts()["instances"]["gone"] == 1

    # A want of a gone ref joins the gone instance and waits (Idle); data observed again is a new Live instance.
    assert log.add(pb.WantCreate(want_id="w", partition_refs=[REF]), manual("ann")) is None
    assert log.state.wants["w"].state == WantState.IDLE and log.state.canonical[REF] == uuid
    assert log.add(pb.PartitionObserved(partition_ref=REF, location=WHERE, version="v1")) is None
    restored = log.state.canonical[REF]
    assert restored != uuid and log.state.instances[restored].state == InstanceState.LIVE
    assert log.state.instances[uuid].state == InstanceState.GONE and log.state.instances[uuid].superseded_seq
    assert log.state.wants["w"].state == WantState.SUCCESSFUL
