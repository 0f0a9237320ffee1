"""The golden event logs: every event type as the schema wrote it when it was added, kept as bytes forever.

`python tests/golden_log.py` writes `tests/data/golden_log_v1.bin`, `python tests/golden_log.py buckets`
writes `tests/data/golden_log_buckets.bin` (bucketing events, 2026-11). Each is written only once: a file
must never be regenerated when the schema changes, it is what old logs look like.
Format: each event as a varint length followed by the serialized `partbuild.v1.Event`.
"""

from __future__ import annotations

from pathlib import Path

from google.protobuf.internal.decoder import _DecodeVarint32
from google.protobuf.internal.encoder import _VarintBytes

from partbuild.examples.clicks.simulate import SimulationPlan, simulate
from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.events import envelope, from_job_run, manual, system
from partbuild.state.ids import instance_uuid

GOLDEN = Path(__file__).parent / "data" / "golden_log_v1.bin"
GOLDEN_BUCKETS = Path(__file__).parent / "data" / "golden_log_buckets.bin"


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


def bucket_events() -> list[pb.Event]:
    """Sharded workers: a round-robin start, static starts (one of an overlapping layout), scoped runs, a re-shard."""
    from partbuild.state.bucketing import bucket

    refs = [f"noop/{n}" for n in range(12)]
    in_bucket = {
        total: {b: [r for r in refs if bucket("partbuild", r, total) == b] for b in range(1, 4)} for total in (2, 3)
    }
    events: list[pb.Event] = []

    def add(payload: object, source: pb.EventSource | None = None) -> int:
        events.append(
            envelope(payload, source=source, timestamp_ms=1_795_000_000_000 + len(events), event_id=f"b{len(events)}")
        )  # type: ignore[arg-type]
        return len(events)

    def scope(bucket_id: int, total: int) -> pb.BucketScope:
        return pb.BucketScope(namespace="partbuild", bucket_id=bucket_id, bucket_total=total)

    want = add(pb.WantCreate(want_id="w", partition_refs=refs), manual("ann"))
    add(pb.BucketRunStart(bucket=scope(2, 3)), system("orchestrator"))  # round-robin, as first written
    first, second = system("orchestrator", "host-a:101:0a0a0a0a"), system("orchestrator", "host-b:202:0b0b0b0b")
    add(pb.BucketRunStart(bucket=scope(1, 3), static_bucket=True), first)
    uuids = [instance_uuid(want, ref) for ref in in_bucket[3][1]]
    add(pb.JobRunBuffer(job_run_id="noop-3-b1-0", job_label="noop", instance_uuids=uuids, bucket=scope(1, 3)), first)
    add(pb.JobRunSuccess(job_run_id="noop-3-b1-0"), from_job_run("noop-3-b1-0"))
    add(pb.BucketRunStart(bucket=scope(1, 2), static_bucket=True), second)  # overlaps: rejected
    add(pb.BucketLayout(namespace="partbuild", bucket_total=2), manual("ops"))
    stale = [instance_uuid(want, ref) for ref in in_bucket[3][2][:1]]
    add(pb.JobRunBuffer(job_run_id="noop-7-b2-0", job_label="noop", instance_uuids=stale, bucket=scope(2, 3)), first)
    fresh = [instance_uuid(want, ref) for ref in in_bucket[2][2] if ref not in in_bucket[3][1]]
    add(pb.JobRunBuffer(job_run_id="noop-8-b2-0", job_label="noop", instance_uuids=fresh, bucket=scope(2, 2)), second)
    return events


def write(path: Path = GOLDEN, events: list[pb.Event] | None = None) -> None:
    with path.open("wb") as out:
        for event in golden_events() if events is None else events:
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
    import sys

    if sys.argv[1:] == ["buckets"]:
        write(GOLDEN_BUCKETS, bucket_events())
    else:
        write()
