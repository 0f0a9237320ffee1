"""PartitionGone in the fold: accepted only behind the slice that ended its key range, for a Live instance there.

(Source scan cursors are covered by tests/orchestrator/sources/test_scanner.py and the golden logs `scans`
and `shards`; the golden log `gone` pins the digest of these rules.)
"""

from __future__ import annotations

from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.fold.build_state import BuildState
from partbuild.state.fold.records import InstanceState, WantState
from partbuild.state.log.events import envelope, from_job_run, manual, system

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


def built_from_raw(log: Log, name: str) -> str:
    """A daily wanted by a person and built from REF's canonical instance; its UUID."""
    raw = log.state.canonical[REF]
    assert log.add(pb.WantCreate(want_id=name, partition_refs=[f"daily/{name}"]), manual("ann")) is None
    uuid = log.state.canonical[f"daily/{name}"]
    assert log.add(pb.JobRunBuffer(job_run_id=name, job_label="daily", instance_uuids=[uuid])) is None
    assert log.add(pb.JobRunSuccess(job_run_id=name, input_instance_uuids=[raw]), from_job_run(name)) is None
    assert log.state.instances[uuid].state == InstanceState.LIVE
    return uuid


def gone_and_back(log: Log, pass_number: int, observed: pb.PartitionObserved) -> tuple[str, str]:
    """REF gone in pass `pass_number`, then observed again as `observed`: (the instance that went, the Live one)."""
    went = log.state.canonical[REF]
    assert log.add(gone(pass_number, log.end_pass(pass_number))) is None
    assert log.state.instances[went].state == InstanceState.GONE
    assert log.add(observed) is None
    back = log.state.canonical[REF]
    assert log.state.instances[back].state == InstanceState.LIVE
    return went, back


def test_data_back_after_it_was_gone_is_judged_by_its_version() -> None:
    """A Spark overwrite deletes a directory, then writes it again: a scan between the two says it is gone."""
    log = Log()
    log.end_pass(1)
    judged = {"judge_gone_by_version": True}
    log.add(pb.PartitionObserved(partition_ref=REF, location=WHERE, version="v1", **judged))
    first = built_from_raw(log, "a")
    # The version it had, at the same place: the data the daily was built from, the same instance Live again.
    went, back = gone_and_back(log, 2, pb.PartitionObserved(partition_ref=REF, location=WHERE, version="v1", **judged))
    assert back == went and log.state.instances[back].note == f"found again with the version it had (seq {log.seq})"
    assert log.state.instances[first].state == InstanceState.LIVE and not log.state.instances[first].note
    # Another version: new data; the daily built from the gone instance is out of date.
    went, back = gone_and_back(log, 3, pb.PartitionObserved(partition_ref=REF, location=WHERE, version="v2", **judged))
    seq = log.seq
    assert back != went and log.state.instances[went].superseded_seq == seq
    assert log.state.instances[first].state == InstanceState.TAINTED
    assert log.state.instances[first].note == f"upstream {REF} has new data (observed at seq {seq})"
    # The same strong version somewhere else: the same bytes moved. Nothing built from them is tainted...
    strong = {"version": "s1", "version_strong": True, **judged}
    log.add(pb.PartitionObserved(partition_ref=REF, location=WHERE, **strong))
    second = built_from_raw(log, "b")
    went, back = gone_and_back(log, 4, pb.PartitionObserved(partition_ref=REF, location="/moved", **strong))
    assert back != went and log.state.instances[second].state == InstanceState.LIVE
    # ...and what was built from those bytes is tainted by the next new data, wherever it was built from.
    log.add(pb.PartitionObserved(partition_ref=REF, location="/moved", version="s2", version_strong=True, **judged))
    assert log.state.instances[second].state == InstanceState.TAINTED
    assert log.state.rejections == []


def test_data_back_after_it_was_gone_taints_nothing_in_logs_written_before_the_rule() -> None:
    log = Log()
    log.end_pass(1)
    log.add(pb.PartitionObserved(partition_ref=REF, location=WHERE, version="v1"))
    daily = built_from_raw(log, "a")
    went, back = gone_and_back(log, 2, pb.PartitionObserved(partition_ref=REF, location=WHERE, version="v1"))
    assert back != went  # even the version it had: a new instance
    gone_and_back(log, 3, pb.PartitionObserved(partition_ref=REF, location=WHERE, version="v2"))
    assert log.state.instances[daily].state == InstanceState.LIVE and not log.state.instances[daily].note
