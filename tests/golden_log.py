"""The golden event log: every event type as this schema version writes it, kept as bytes forever.

`python tests/golden_log.py` writes `tests/data/golden_log_v1.bin` (only ever done once per schema
version: the file must not be regenerated when the schema changes, it is what old logs look like).
Format: each event as a varint length followed by the serialized `partbuild.v1.Event`.
"""

from __future__ import annotations

from pathlib import Path

from google.protobuf.internal.decoder import _DecodeVarint32
from google.protobuf.internal.encoder import _VarintBytes

from partbuild.examples.clicks.simulate import SimulationPlan, simulate
from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.events import envelope, manual, system
from partbuild.state.ids import instance_uuid

GOLDEN = Path(__file__).parent / "data" / "golden_log_v1.bin"


def golden_events() -> list[pb.Event]:
    """A W1-shaped history (wants, dep misses, derivative wants, retries, taints) plus the remaining types."""
    events = list(simulate(SimulationPlan(weeks=26, sites=1, fail_every=3, taint_every=25)))
    seq = len(events)

    def add(payload: object, source: pb.EventSource | None = None) -> None:
        nonlocal seq
        seq += 1
        events.append(envelope(payload, source=source, timestamp_ms=1_790_000_000_000 + seq, event_id=f"g{seq}"))  # type: ignore[arg-type]

    add(pb.WantCreate(want_id="late", partition_refs=["agg/weekly_clicks/site=0/week=2026-W30"], ttl_seconds=60))
    add(pb.WantCancel(want_id="late", reason="not needed"), manual("ann"))
    add(pb.WantCreate(want_id="w-wait", partition_refs=["x/out"]))
    add(
        pb.InstancesWaitUpstream(
            waits=[pb.InstanceWait(instance_uuid=instance_uuid(seq, "x/out"), upstream_refs=["x/in"])]
        )
    )
    add(pb.PartitionObserved(partition_ref="x/in", location="/data/x/in", row_count=1, bytes=2, metadata={"k": "v"}))
    add(pb.JobRunBuffer(job_run_id="x-run", job_label="x", instance_uuids=[instance_uuid(seq - 2, "x/out")]))
    add(pb.JobRunCancel(job_run_id="x-run", reason="operator"))
    add(pb.InstanceRetention(drop_superseded_created_before_seq=seq), system("retention"))
    add(pb.ClockTick(), system("orchestrator"))
    return events


def write(path: Path = GOLDEN) -> None:
    with path.open("wb") as out:
        for event in golden_events():
            data = event.SerializeToString()
            out.write(_VarintBytes(len(data)) + data)


def read(path: Path = GOLDEN) -> list[bytes]:
    """The serialized events of a golden log, in order."""
    data = path.read_bytes()
    payloads, position = [], 0
    while position < len(data):
        size, position = _DecodeVarint32(data, position)
        payloads.append(data[position : position + size])
        position += size
    return payloads


if __name__ == "__main__":
    write()
