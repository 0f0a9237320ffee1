"""The golden log of issue 34 (a partition is the unit of success), its generator kept apart from golden_log.py.

A partially successful run (one output failed by its blocking check, one on its own, the fold's gate refusing
a success without the checks its buffer named), a batch split after it failed as a whole and its outputs
retried alone, check durations, and stale periods: new source data leaving a daily serving while its
successor fails then goes Live, a keep-serving taint and a person's withdrawal of the stale instance, retention
keeping what serves, and a job of the withdraw policy tainted at once. Rejected copies of each new rule too.
"""

from __future__ import annotations

from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.log.events import envelope, from_job_run, manual, system
from partbuild.state.rules.ids import instance_uuid

ORCHESTRATOR = system("orchestrator", "host:1:aaaa")
CONNECTOR = system("connector")
PERMANENT = pb.ERROR_CLASS_PERMANENT
RETRYABLE = pb.ERROR_CLASS_RETRYABLE


class _Log:
    """Events with consecutive seqs; `uuid` is the instance a WantCreate or PartitionObserved at a seq makes."""

    def __init__(self) -> None:
        self.events: list[pb.Event] = []

    def add(self, payload: object, source: pb.EventSource = ORCHESTRATOR) -> int:
        seq = len(self.events) + 1
        event = envelope(payload, source=source, timestamp_ms=1_800_000_000_000 + seq * 1_000, event_id=f"o-{seq}")  # type: ignore[arg-type]
        self.events.append(event)
        return seq

    def run(self, payload: object, run_id: str) -> int:
        return self.add(payload, from_job_run(run_id))


def _checks(uuid: str, passed: bool, duration_ms: int = 0) -> pb.InstanceChecks:
    result = pb.CheckResult(name="rows", passed=passed, blocking=True, description="rows", duration_ms=duration_ms)
    return pb.InstanceChecks(instance_uuid=uuid, results=[result])


def outcome_events() -> list[pb.Event]:
    """About 40 events; the comments give each one's seq."""
    log = _Log()
    want = log.add(pb.WantCreate(want_id="w1", partition_refs=["d/1", "d/2", "d/3", "d/4"]), manual("ann"))  # 1
    d1, d2, d3, d4 = (instance_uuid(want, ref) for ref in ("d/1", "d/2", "d/3", "d/4"))
    buffer = pb.JobRunBuffer(job_run_id="r1", job_label="d", instance_uuids=[d1, d2, d3, d4], serve_stale=True)
    buffer.blocking_checks.append("rows")
    log.add(buffer)  # 2
    log.run(pb.JobRunSuccess(job_run_id="r1", checks=[_checks(d1, True)]), "r1")  # 3: rejected, d/2 unchecked
    failed = [
        pb.OutputFailure(instance_uuid=d3, error_class=PERMANENT, message="check rows failed on d/3: 0 rows"),
        pb.OutputFailure(instance_uuid=d4, error_class=RETRYABLE, message="CANNOT_READ_FILE_FOOTER: /raw/4"),
    ]
    every = [*failed, pb.OutputFailure(instance_uuid=d1), pb.OutputFailure(instance_uuid=d2)]
    log.run(pb.JobRunSuccess(job_run_id="r1", failed_outputs=every), "r1")  # 4: rejected, nothing left to succeed
    checks = [_checks(d1, True, 120), _checks(d2, True, 80), _checks(d3, False, 95)]
    log.run(pb.JobRunSuccess(job_run_id="r1", checks=checks, failed_outputs=failed), "r1")  # 5: d/1, d/2 Live
    batch = log.add(pb.WantCreate(want_id="w2", partition_refs=["d/5", "d/6"]), manual("ann"))  # 6
    d5, d6 = instance_uuid(batch, "d/5"), instance_uuid(batch, "d/6")
    log.add(pb.JobRunBuffer(job_run_id="r2", job_label="d", instance_uuids=[d5, d6], serve_stale=True))  # 7
    split = pb.JobRunFailure(job_run_id="r2", error_class=PERMANENT, message="Py4JJavaError: o1.parquet", split=True)
    log.run(split, "r2")  # 8: both up for retry, neither failed for good
    for number, uuid in enumerate((d5, d6), start=3):  # 9-12: each alone
        log.add(pb.JobRunBuffer(job_run_id=f"r{number}", job_label="d", instance_uuids=[uuid], serve_stale=True))
        log.run(pb.JobRunSuccess(job_run_id=f"r{number}"), f"r{number}")
    log.add(pb.WantCreate(want_id="w3", partition_refs=["d/7"]), manual("ann"))  # 13
    log.add(pb.JobRunBuffer(job_run_id="r5", job_label="d", instance_uuids=[instance_uuid(13, "d/7")]))  # 14
    log.run(pb.JobRunFailure(job_run_id="r5", message="boom", split=True), "r5")  # 15: rejected, one output
    raw = log.add(pb.PartitionObserved(partition_ref="raw/1", location="/raw/1", version="v1"), CONNECTOR)  # 16
    x = log.add(pb.WantCreate(want_id="w4", partition_refs=["x/1"]), manual("ann"))  # 17
    x1 = instance_uuid(x, "x/1")
    log.add(pb.JobRunBuffer(job_run_id="r6", job_label="x", instance_uuids=[x1], serve_stale=True))  # 18
    log.run(pb.JobRunSuccess(job_run_id="r6", input_instance_uuids=[instance_uuid(raw, "raw/1")]), "r6")  # 19
    changed = log.add(pb.PartitionObserved(partition_ref="raw/1", location="/raw/1", version="v2"), CONNECTOR)  # 20
    successor = instance_uuid(changed, "x/1")  # x/1 stale, still serving
    log.add(pb.WantCreate(want_id="w5", partition_refs=["x/1"]), manual("ann"))  # 21
    log.add(pb.JobRunBuffer(job_run_id="r7", job_label="x", instance_uuids=[successor], serve_stale=True))  # 22
    log.run(pb.JobRunFailure(job_run_id="r7", error_class=RETRYABLE, message="late"), "r7")  # 23: still serving
    log.add(pb.InstanceRetention(drop_superseded_before_seq=23), system("retention"))  # 24: keeps the stale one
    log.add(pb.JobRunBuffer(job_run_id="r8", job_label="x", instance_uuids=[successor], serve_stale=True))  # 25
    log.run(pb.JobRunSuccess(job_run_id="r8", input_instance_uuids=[instance_uuid(changed, "raw/1")]), "r8")  # 26
    log.add(pb.PartitionTaint(partition_ref="d/1", reason="code changed", keep_serving=True))  # 27: stale
    log.add(pb.PartitionTaint(partition_ref="d/1", reason="again", keep_serving=True))  # 28: rejected, stale already
    log.add(pb.PartitionTaint(partition_ref="d/1", reason="wrong totals", instance_uuid=d1), manual("ann"))  # 29
    y = log.add(pb.WantCreate(want_id="w6", partition_refs=["y/1"]), manual("ann"))  # 30
    log.add(pb.JobRunBuffer(job_run_id="r9", job_label="y", instance_uuids=[instance_uuid(y, "y/1")]))  # 31
    log.run(pb.JobRunSuccess(job_run_id="r9", input_instance_uuids=[instance_uuid(changed, "raw/1")]), "r9")  # 32
    log.add(pb.PartitionObserved(partition_ref="raw/1", location="/raw/1", version="v3"), CONNECTOR)  # 33: y/1 tainted
    log.add(pb.ClockTick())  # 34
    return log.events
