"""The golden log of data back after it was gone, judged by its version (2026-11-30), kept apart from golden_log.py.

A Spark overwrite deletes a directory, then writes it again; a scan between the two says it is gone. Day 1 comes
back with the version it had: the same instance is Live again, and a want waiting for it is satisfied. Day 2
comes back with another version: a new instance, and the daily built from the gone one goes stale (it keeps
serving until its rebuild is Live). Day 3 comes back as the same strong bytes elsewhere: nothing is tainted.
Then retention drops the superseded day 2 and the stale daily. Rejected: a gone of an instance already gone.
"""

from __future__ import annotations

from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.log.events import envelope, from_job_run, manual, system
from partbuild.state.rules.ids import instance_uuid

SCANNER = system("source-scanner", "host:4:dddd")
ORCHESTRATOR = system("orchestrator", "host:4:dddd")
T0 = 1_811_000_000_000


class _Log:
    def __init__(self) -> None:
        self.events: list[pb.Event] = []

    def add(self, payload: object, source: pb.EventSource = SCANNER) -> int:
        seq = len(self.events) + 1
        event = envelope(payload, source=source, timestamp_ms=T0 + seq * 1_000, event_id=f"g-{seq}")  # type: ignore[arg-type]
        self.events.append(event)
        return seq

    def end_pass(self, pass_number: int) -> int:
        done = pb.SourceScanProgress(
            source="raw", pass_number=pass_number, last_key=b"date=2026-01-03/_SUCCESS", done=True
        )
        return self.add(done)

    def observe(self, day: int, version: str, *, where: str = "", strong: bool = False) -> int:
        ref = raw(day)
        seen = pb.PartitionObserved(
            partition_ref=ref,
            location=where or f"/data/{ref}",
            bytes=10,
            version=version,
            version_strong=strong,
            judge_gone_by_version=True,
        )
        return self.add(seen)

    def gone(self, day: int, pass_number: int, scan_seq: int, *, where: str = "") -> int:
        ref = raw(day)
        message = pb.PartitionGone(
            partition_ref=ref,
            location=where or f"/data/{ref}",
            source="raw",
            pass_number=pass_number,
            scan_seq=scan_seq,
        )
        return self.add(message)

    def build_daily(self, day: int, inputs: list[str]) -> str:
        """A daily of `day` wanted by a person and built (serving stale when out of date); its instance UUID."""
        ref, name = f"daily/date=2026-01-0{day}", f"d{day}"
        uuid = instance_uuid(self.add(pb.WantCreate(want_id=name, partition_refs=[ref]), manual("ann")), ref)
        buffer = pb.JobRunBuffer(job_run_id=name, job_label="daily", instance_uuids=[uuid], serve_stale=True)
        self.add(buffer, ORCHESTRATOR)
        self.add(pb.JobRunSuccess(job_run_id=name, input_instance_uuids=inputs), from_job_run(name))
        return uuid


def raw(day: int) -> str:
    return f"raw/date=2026-01-0{day}"


def gone_judged_events() -> list[pb.Event]:
    log = _Log()
    log.end_pass(1)  # 1
    first = {day: instance_uuid(log.observe(day, f"a{day}", strong=day == 3), raw(day)) for day in (1, 2, 3)}  # 2-4
    for day in (1, 2, 3):
        log.build_daily(day, [first[day]])  # 5-13
    ended = log.end_pass(2)  # 14
    for day in (1, 2, 3):
        log.gone(day, 2, ended)  # 15-17
    log.gone(1, 2, ended)  # 18: rejected, gone already
    log.add(pb.WantCreate(want_id="again", partition_refs=[raw(1)]), manual("ann"))  # 19: waits for day 1
    log.observe(1, "a1")  # 20: the version it had: the same instance Live again; "again" is satisfied
    log.observe(2, "b2")  # 21: new data: a new instance; daily 2 goes stale and keeps serving
    log.observe(3, "a3", where="/moved/raw/date=2026-01-03", strong=True)  # 22: the same bytes moved
    stale = instance_uuid(21, "daily/date=2026-01-02")
    buffer = pb.JobRunBuffer(job_run_id="d2-again", job_label="daily", instance_uuids=[stale], serve_stale=True)
    log.add(buffer, ORCHESTRATOR)  # 23
    rebuilt = pb.JobRunSuccess(job_run_id="d2-again", input_instance_uuids=[instance_uuid(21, raw(2))])
    log.add(rebuilt, from_job_run("d2-again"))  # 24: the rebuild is Live; the stale daily stops serving
    log.add(pb.InstanceRetention(drop_superseded_before_seq=25), manual("ann"))  # 25
    return log.events
