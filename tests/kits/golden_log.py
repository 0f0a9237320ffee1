"""The golden event logs: every event type as the schema wrote it when it was added, kept as bytes forever.

`GOLDEN_LOGS` lists them, one entry each: its name, its file (`tests/data/`), the generator that wrote it
once, and the digest its strict replay pins (`tests/state/log/test_golden_logs.py` checks every entry). A new event
type (or a new rule of an old one) gets a new entry: write a generator, run `python tests/kits/golden_log.py
<name>` once to write its file, and pin the digest the test reports. A file is never regenerated when
the schema changes, it is what old logs look like: the script refuses to overwrite one.
Format: each event as a varint length followed by the serialized `partbuild.v1.Event`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from google.protobuf.internal.decoder import _DecodeVarint32
from google.protobuf.internal.encoder import _VarintBytes

from partbuild.examples.clicks.simulate import SimulationPlan, simulate
from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.log.events import envelope, from_job_run, manual, system
from partbuild.state.rules.ids import instance_uuid

from golden_automation import code_change_events, code_version_events, reaction_events, schedule_events
from golden_gone_judged import gone_judged_events
from golden_outcomes import outcome_events
from golden_reaction_notes import reaction_note_events

DATA = Path(__file__).resolve().parents[1] / "data"  # tests/data


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
    from partbuild.state.rules.bucketing import bucket

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


def group_events() -> list[pb.Event]:
    """A worker group over 4 buckets: hand-offs, a join, a death with a pending share, a stale leader, a late
    member, fenced runs, waits, failures and derivative wants (accepted from owners, rejected from others)."""
    from partbuild.state.rules.bucketing import bucket

    refs = [f"noop/{n}" for n in range(12)]
    in_bucket = {b: [ref for ref in refs if bucket("partbuild", ref, 4) == b] for b in range(1, 5)}
    a, b, c = "host-a:101:0a0a0a0a", "host-b:202:0b0b0b0b", "host-c:303:0c0c0c0c"
    events: list[pb.Event] = []

    def add(payload: object, source: pb.EventSource | None = None) -> int:
        stamp = 1_796_000_000_000 + 1_000 * len(events)
        events.append(envelope(payload, source=source, timestamp_ms=stamp, event_id=f"grp{len(events)}"))  # type: ignore[arg-type]
        return len(events)

    def state(task: str, data: list[int], share: dict[int, str] | None = None) -> pb.GroupTaskState:
        return pb.GroupTaskState(task_id=task, state_timestamp_ms=1_796_000_000_000, data=data, share=share or {})

    def epoch(epoch_id: str, previous: str, leader: str, states: list[pb.GroupTaskState]) -> pb.GroupEpoch:
        return pb.GroupEpoch(group="workers", epoch_id=epoch_id, previous_epoch_id=previous, namespace="partbuild",
                             bucket_total=4, leader_task_id=leader, message_timestamp_ms=1_796_000_000_000,
                             members=[s.task_id for s in states], connector_state=states)  # fmt: skip

    def message(epoch_id: str, task: str, states: list[pb.GroupTaskState]) -> pb.GroupTaskMessage:
        return pb.GroupTaskMessage(group="workers", epoch_id=epoch_id, task_id=task,
                                   message_timestamp_ms=1_796_000_000_000, connector_state=states)  # fmt: skip

    def fence(epoch_id: str, task: str) -> pb.DecisionFence:
        return pb.DecisionFence(group="workers", epoch_id=epoch_id, task_id=task)

    e1, e2, e3 = (f"7d1f0c1e-0000-4000-8000-00000000000{n}" for n in (1, 2, 3))
    want = add(pb.WantCreate(want_id="w", partition_refs=refs), manual("ann"))
    uuid = {ref: instance_uuid(want, ref) for ref in refs}
    sa, sb, sc = system("orchestrator", a), system("orchestrator", b), system("orchestrator", c)
    add(epoch(e1, "", a, [state(a, [1, 2, 3, 4]), state(b, [])]), sa)
    add(message(e1, a, [state(a, [1, 2, 3, 4], {3: b, 4: b}), state(b, [])]), sa)  # a shares 3 and 4 to b
    add(message(e1, b, [state(a, [1, 2, 3, 4], {3: b, 4: b}), state(b, [3, 4])]), sb)  # b picks them up
    three = in_bucket[3][0]
    early = pb.JobRunBuffer(job_run_id="noop-a-0", job_label="noop", instance_uuids=[uuid[three]], fence=fence(e1, a))
    add(early, sa)  # rejected: b owns 3 now, though a still holds it until it drops it
    add(message(e1, a, [state(a, [1, 2]), state(b, [3, 4])]), sa)  # a drops them
    mine = [uuid[ref] for ref in in_bucket[3] + in_bucket[4]]
    add(pb.JobRunBuffer(job_run_id="noop-b-0", job_label="noop", instance_uuids=mine, fence=fence(e1, b)), sb)
    add(pb.JobRunHeartbeat(job_run_id="noop-b-0"), sb)
    add(epoch(e2, e1, a, [state(a, [1, 2]), state(b, [3, 4]), state(c, [])]), sa)  # c joins
    add(message(e1, b, [state(a, [1, 2]), state(b, [3, 4])]), sb)  # late, of the old epoch: rejected
    add(message(e2, a, [state(a, [1, 2], {2: c}), state(b, [3, 4]), state(c, [])]), sa)  # a shares 2 to c
    add(epoch(e3, e2, a, [state(a, [1, 2, 3, 4]), state(c, [])]), sa)  # b died; 2 was not picked up: a's again
    add(epoch("b-thinks-it-leads", e2, b, [state(a, [1]), state(b, [3, 4]), state(c, [2])]), sb)  # stale: rejected
    add(pb.JobRunFailure(job_run_id="noop-b-0", message="heartbeat timeout", fence=fence(e3, a)), sa)  # b's stale run
    one = in_bucket[1][0]
    wait = [pb.InstanceWait(instance_uuid=uuid[one], upstream_refs=["raw/x"])]
    add(pb.InstancesWaitUpstream(waits=wait, fence=fence(e3, c)), sc)  # rejected: a owns 1
    add(pb.InstancesWaitUpstream(waits=wait, fence=fence(e3, a)), sa)
    add(pb.WantCreate(want_id="d-x", partition_refs=["raw/x"], parent_want_id="w", fence=fence(e3, a)), sa)
    add(pb.WantCreate(want_id="d-y", partition_refs=["raw/y"], parent_want_id="w", fence=fence(e3, b)), sb)  # rejected
    static = pb.BucketScope(namespace="partbuild", bucket_id=1, bucket_total=4)
    add(pb.BucketRunStart(bucket=static, static_bucket=True), system("orchestrator", "host-d:404:0d0d0d0d"))  # rejected
    return events


def group_fence_events() -> list[pb.Event]:
    """Epochs that fence off removed members' runs: b's heartbeat, success and unfenced failure after its removal
    are rejected, a's fenced failure is accepted, a later epoch without the flag keeps the fence."""
    from partbuild.state.rules.bucketing import bucket

    a, b = "host-a:101:0a0a0a0a", "host-b:202:0b0b0b0b"
    refs = [f"noop/{n}" for n in range(8)]
    events: list[pb.Event] = []

    def add(payload: object, source: pb.EventSource | None = None) -> int:
        stamp = 1_797_000_000_000 + 1_000 * len(events)
        events.append(envelope(payload, source=source, timestamp_ms=stamp, event_id=f"gf{len(events)}"))  # type: ignore[arg-type]
        return len(events)

    def states(data: dict[str, list[int]], share: dict[int, str] | None = None) -> list[pb.GroupTaskState]:
        return [pb.GroupTaskState(task_id=task, state_timestamp_ms=1_797_000_000_000, data=held,
                                  share=share if task == a else None) for task, held in data.items()]  # fmt: skip

    def epoch(epoch_id: str, previous: str, data: dict[str, list[int]], fences: bool) -> pb.GroupEpoch:
        return pb.GroupEpoch(group="fenced", epoch_id=epoch_id, previous_epoch_id=previous, namespace="fenced",
                             bucket_total=2, leader_task_id=a, message_timestamp_ms=1_797_000_000_000,
                             members=list(data), connector_state=states(data), fences_removed_runs=fences)  # fmt: skip

    def message(task: str, data: dict[str, list[int]], share: dict[int, str] | None = None) -> pb.GroupTaskMessage:
        return pb.GroupTaskMessage(group="fenced", epoch_id=e1, task_id=task, message_timestamp_ms=1_797_000_000_000,
                                   connector_state=states(data, share))  # fmt: skip

    e1, e2, e3 = (f"7d1f0c1e-0000-4000-8000-0000000000f{n}" for n in (1, 2, 3))
    want = add(pb.WantCreate(want_id="w", partition_refs=refs), manual("ann"))
    sa, sb = system("orchestrator", a), system("orchestrator", b)
    add(epoch(e1, "", {a: [1, 2], b: []}, fences=True), sa)
    add(message(a, {a: [1, 2], b: []}, {2: b}), sa)  # a shares bucket 2 with b
    add(message(b, {a: [1, 2], b: [2]}, {2: b}), sb)  # b picks it up
    add(message(a, {a: [1], b: [2]}), sa)  # a drops it
    mine = [instance_uuid(want, ref) for ref in refs if bucket("fenced", ref, 2) == 2]
    fence = pb.DecisionFence(group="fenced", epoch_id=e1, task_id=b)
    add(pb.JobRunBuffer(job_run_id="noop-b", job_label="noop", instance_uuids=mine, fence=fence), sb)
    add(pb.JobRunHeartbeat(job_run_id="noop-b"), from_job_run("noop-b"))
    add(epoch(e2, e1, {a: [1, 2]}, fences=True), sa)  # b missed its member timeout
    add(pb.JobRunHeartbeat(job_run_id="noop-b"), from_job_run("noop-b"))  # rejected: b resumed too late
    add(pb.JobRunSuccess(job_run_id="noop-b"), from_job_run("noop-b"))  # rejected
    add(pb.JobRunFailure(job_run_id="noop-b", message="executor error"), from_job_run("noop-b"))  # rejected
    add(epoch(e3, e2, {a: [1, 2]}, fences=False), sa)  # an older leader's epoch: the fence holds
    add(pb.JobRunHeartbeat(job_run_id="noop-b"), from_job_run("noop-b"))  # rejected
    gone = pb.DecisionFence(group="fenced", epoch_id=e3, task_id=a)
    add(pb.JobRunFailure(job_run_id="noop-b", message="its worker is gone", fence=gone), sa)
    add(pb.JobRunBuffer(job_run_id="noop-a", job_label="noop", instance_uuids=mine, fence=gone), sa)
    add(pb.JobRunSuccess(job_run_id="noop-a"), from_job_run("noop-a"))
    return events


def version_events() -> list[pb.Event]:
    """raw -> daily -> weekly from observed raw days; then the raw data is observed again, versioned."""
    events: list[pb.Event] = []

    def add(payload: object, source: pb.EventSource | None = None) -> int:
        events.append(
            envelope(payload, source=source, timestamp_ms=1_795_000_000_000 + len(events), event_id=f"v{len(events)}")  # type: ignore[arg-type]
        )
        return len(events)

    def observed(day: int, version: str = "", location: str = "", strong: bool = False) -> int:
        ref = f"raw/date=2026-01-0{day}"
        where = location or f"/data/{ref}"
        return add(pb.PartitionObserved(partition_ref=ref, location=where, version=version, version_strong=strong))

    raw1 = observed(1)  # before versions
    raw2 = observed(2, "size=10,mtime=1")
    raw3 = observed(3, "etag-3", strong=True)
    refs = ["daily/date=2026-01-01", "daily/date=2026-01-02", "daily/date=2026-01-03", "weekly/week=2026-W01"]
    want = add(pb.WantCreate(want_id="w", partition_refs=refs), manual("ann"))
    inputs = {}
    for n, raw_seq in enumerate((raw1, raw2, raw3), start=1):
        ref = f"daily/date=2026-01-0{n}"
        run = f"daily-{n}"
        add(pb.JobRunBuffer(job_run_id=run, job_label="daily", instance_uuids=[instance_uuid(want, ref)]))
        raw_uuid = instance_uuid(raw_seq, f"raw/date=2026-01-0{n}")
        add(pb.JobRunSuccess(job_run_id=run, input_instance_uuids=[raw_uuid]), from_job_run(run))
        inputs[ref] = instance_uuid(want, ref)
    weekly = instance_uuid(want, refs[3])
    add(pb.JobRunBuffer(job_run_id="weekly-1", job_label="weekly", instance_uuids=[weekly]))
    add(pb.JobRunSuccess(job_run_id="weekly-1", input_instance_uuids=list(inputs.values())), from_job_run("weekly-1"))
    observed(1, "size=10,mtime=1")  # the version of day 1 is learned: nothing changes
    observed(2, "size=10,mtime=1")  # the same version again: rejected
    observed(3, "etag-3", location="/moved/raw/date=2026-01-03", strong=True)  # the same bytes moved
    observed(2, "size=12,mtime=2")  # late data for day 2: daily 2 and the weekly are tainted
    add(pb.PartitionObserved(partition_ref="raw/x", location="/x", version_strong=True))  # rejected: no version
    return events


def scan_events() -> list[pb.Event]:
    """Two passes of a source scan with observations, an error, a stale scanner, an operator's new pass."""
    events: list[pb.Event] = []
    scanner = system("source-scanner", "host:1:aaaa")

    def add(payload: object, source: pb.EventSource | None = scanner) -> None:
        stamp = 1_796_000_000_000 + len(events)
        events.append(envelope(payload, source=source, timestamp_ms=stamp, event_id=f"s{len(events)}"))  # type: ignore[arg-type]

    def progress(pass_number: int, after: bytes, last: bytes, **fields: object) -> pb.SourceScanProgress:
        return pb.SourceScanProgress(source="raw", pass_number=pass_number, after_key=after, last_key=last, **fields)  # type: ignore[arg-type]

    def observed(day: int, version: str) -> pb.PartitionObserved:
        ref = f"raw/date=2026-01-0{day}"
        found = pb.PartitionObserved(partition_ref=ref, location=f"/data/{ref}", bytes=10 * day, version=version)
        found.metadata["files"] = "2"
        return found

    add(progress(1, b"", b"date=2026-01-01/_SUCCESS", items=3, partitions=1))  # 1
    add(observed(1, "a1"))
    add(progress(1, b"date=2026-01-01/_SUCCESS", b"date=2026-01-02/_SUCCESS", items=2, partitions=1))  # 3
    add(observed(2, "a2"))
    add(pb.WantCreate(want_id="w", partition_refs=["daily/date=2026-01-02"]), manual("ann"))
    add(progress(1, b"date=2026-01-01/_SUCCESS", b"date=2026-01-03/x", items=2))  # 6: stale, rejected
    add(
        progress(
            1, b"date=2026-01-02/_SUCCESS", b"date=2026-01-02/_SUCCESS", error="SlowDown (503)", error_retryable=True
        )
    )
    add(progress(1, b"date=2026-01-02/_SUCCESS", b"date=2026-01-02/_SUCCESS", resume_token=b"tok", done=True))  # 8
    add(progress(1, b"date=2026-01-02/_SUCCESS", b"date=2026-01-02/_SUCCESS"))  # 9: the pass is done, rejected
    add(progress(2, b"", b"date=2026-01-02/_SUCCESS", items=5, partitions=2))  # 10
    add(observed(2, "b2"))
    add(progress(3, b"", b"", items=0), manual("ann"))  # 12: an operator starts a new pass at once
    add(progress(3, b"", b"date=2026-01-01/x", resume_token=b"t"))  # 13: the scanner takes up the new pass
    add(progress(4, b"k", b""))  # 14: rejected: a new pass begins at the start
    add(progress(3, b"", b"", resume_token=b"t"))  # 15: rejected: a token without a key
    return events


def scan_shard_events() -> list[pb.Event]:
    """A request before any pass, a pass split in three scanned shard by shard, a request during a pass."""
    events: list[pb.Event] = []

    def add(payload: object, source: pb.EventSource | None = None) -> None:
        stamp = 1_797_000_000_000 + len(events)
        source = source or system("source-scanner", "host:2:bbbb")
        events.append(envelope(payload, source=source, timestamp_ms=stamp, event_id=f"h{len(events)}"))  # type: ignore[arg-type]

    def part(shard: int, after: bytes, last: bytes, **fields: object) -> pb.SourceScanProgress:
        return pb.SourceScanProgress(source="raw", pass_number=1, shard=shard, after_key=after, last_key=last, **fields)  # type: ignore[arg-type]

    add(pb.SourceScanRequest(source="raw", reason="first look"), manual("ann"))  # 1
    add(part(0, b"", b"d=1/x", split_keys=[b"d=4/", b"d=7/"], items=3, bytes=30, partitions=1))  # 2
    add(part(2, b"", b"d=8/x", items=4, bytes=40, partitions=2))  # 3: shards go in any order
    add(part(1, b"", b"d=5/x", items=2, bytes=20, done=True, split_hint=b"d=5/"))  # 4
    add(part(1, b"d=5/x", b"d=6/x"))  # 5: rejected, shard 1 is done
    add(pb.SourceScanRequest(source="raw", reason="rewritten"), manual("ann"))  # 6: due after this pass
    add(part(0, b"d=1/x", b"d=3/x", items=1, bytes=10, done=True, split_hint=b"d=2/"))  # 7
    add(part(2, b"d=8/x", b"d=9/x", done=True, split_hint=b"d=3/"))  # 8: rejected, the hint is outside
    add(part(2, b"d=8/x", b"d=9/x", done=True, split_hint=b"d=9/"))  # 9: the pass is done
    add(pb.SourceScanProgress(source="raw", pass_number=2, shard=3, last_key=b"z"))  # 10: rejected, not shard 0
    add(pb.SourceScanRequest(source=""), manual("ann"))  # 11: rejected, no source
    return events


def subscription_events() -> list[pb.Event]:
    """Two subscriptions, pause and resume, a reshard growing the RQ, resets, a delete and a re-create."""
    events: list[pb.Event] = []

    def add(payload: object) -> None:
        stamp = 1_798_000_000_000 + len(events)
        events.append(envelope(payload, source=manual("ann"), timestamp_ms=stamp, event_id=f"s{len(events)}"))  # type: ignore[arg-type]

    retry = pb.RetryPolicy(max_attempts=5, backoff_initial_ms=100, backoff_max_ms=10_000, timeout_ms=2_000)

    def create(name: str, **fields: object) -> pb.SubscriptionCreate:
        values: dict[str, object] = {
            "name": name,
            "endpoint": "https://hooks.example.com/pb",
            "ordering": "partition_ref",
            "format": "partbuild",
            "retry": retry,
            "shard_count": 2,
            "main_partitions": 12,
            "rq_partitions": 12,
            "dlq_partitions": 12,
            "secret_digest": "0f" * 16,
        }
        values.update(fields)
        return pb.SubscriptionCreate(**values)  # type: ignore[arg-type]

    flt = pb.SubscriptionFilter(event_types=["job_run_success"], ref_prefixes=["agg/"])
    add(create("alerts", filter=flt))  # 1
    add(create("lineage", format="openlineage", ordering="job_run", start_after_seq=0))  # 2
    add(pb.SubscriptionChange(name="alerts", action=pb.SUBSCRIPTION_ACTION_PAUSE, reason="maintenance"))  # 3
    add(pb.SubscriptionChange(name="alerts", action=pb.SUBSCRIPTION_ACTION_PAUSE))  # 4: rejected, paused
    add(pb.SubscriptionChange(name="alerts", action=pb.SUBSCRIPTION_ACTION_RESUME))  # 5
    add(pb.SubscriptionReshard(name="alerts", shard_count=8))  # 6: 8 does not divide 12: rejected
    add(pb.SubscriptionReshard(name="alerts", shard_count=8, main_partitions=24))  # 7: RQ and DLQ grow to 16
    add(pb.SubscriptionOffsetReset(name="alerts", queue=pb.SUBSCRIPTION_QUEUE_MAIN, to_seq=1))  # 8: rewind
    add(pb.SubscriptionOffsetReset(name="alerts", queue=pb.SUBSCRIPTION_QUEUE_RQ, to_seq=7))  # 9
    add(pb.SubscriptionOffsetReset(name="alerts", queue=pb.SUBSCRIPTION_QUEUE_RQ, to_seq=3))  # 10: rejected
    add(create("alerts"))  # 11: rejected, exists
    add(pb.SubscriptionChange(name="lineage", action=pb.SUBSCRIPTION_ACTION_DELETE))  # 12
    add(create("lineage", shard_count=3))  # 13: a new incarnation of the name
    add(create("bad name!"))  # 14: rejected
    return events


def gone_events() -> list[pb.Event]:
    """Partitions gone: a pass misses a day a daily was built from, stale gones rejected, a want waits, a restore."""
    events: list[pb.Event] = []
    scanner = system("source-scanner", "host:3:cccc")

    def add(payload: object, source: pb.EventSource | None = scanner) -> int:
        stamp = 1_799_000_000_000 + len(events)
        events.append(envelope(payload, source=source, timestamp_ms=stamp, event_id=f"p{len(events)}"))  # type: ignore[arg-type]
        return len(events)

    def observed(day: int, version: str) -> pb.PartitionObserved:
        ref = f"raw/date=2026-01-0{day}"
        return pb.PartitionObserved(partition_ref=ref, location=f"/data/{ref}", bytes=10, version=version)

    def gone(day: int, pass_number: int, scan_seq: int) -> pb.PartitionGone:
        ref = f"raw/date=2026-01-0{day}"
        return pb.PartitionGone(
            partition_ref=ref, location=f"/data/{ref}", source="raw", pass_number=pass_number, scan_seq=scan_seq
        )

    add(pb.SourceScanProgress(source="raw", pass_number=1, last_key=b"date=2026-01-02/_SUCCESS", done=True))  # 1
    add(observed(1, "a1"))
    add(observed(2, "a2"))
    daily = add(pb.WantCreate(want_id="w1", partition_refs=["daily/date=2026-01-01"]), manual("ann"))  # 4
    add(
        pb.JobRunBuffer(
            job_run_id="r1", job_label="daily", instance_uuids=[instance_uuid(daily, "daily/date=2026-01-01")]
        )
    )
    add(
        pb.JobRunSuccess(job_run_id="r1", input_instance_uuids=[instance_uuid(2, "raw/date=2026-01-01")]),
        from_job_run("r1"),
    )
    ended = add(pb.SourceScanProgress(source="raw", pass_number=2, last_key=b"date=2026-01-02/_SUCCESS", done=True))
    add(gone(1, 2, ended))  # 8: day 1 is gone; the daily built from it stays Live
    add(gone(2, 2, ended - 1))  # 9: rejected, not behind the slice that ended the range
    add(gone(1, 2, ended))  # 10: rejected, no longer Live
    add(gone(2, 1, ended))  # 11: rejected, a stale pass
    waiting = add(pb.WantCreate(want_id="w2", partition_refs=["raw/date=2026-01-01"]), manual("ann"))  # 12: waits
    add(pb.SourceScanProgress(source="raw", pass_number=3, last_key=b"date=2026-01-02/_SUCCESS", done=True))
    add(observed(1, "b1"))  # 14: restored: a new Live instance; the want is satisfied
    assert waiting == 12


def cancel_retention_events() -> list[pb.Event]:
    """Issue 23's rules: a cancel that replaces its run's instances, and retention by when instances stopped
    being canonical (an instance canonical since seq 1 survives a cutoff right after it was superseded)."""
    events: list[pb.Event] = []

    def add(payload: object, source: pb.EventSource | None = None) -> int:
        stamp = 1_799_000_000_000 + len(events)
        events.append(envelope(payload, source=source, timestamp_ms=stamp, event_id=f"c{len(events)}"))  # type: ignore[arg-type]
        return len(events)

    connector, orchestrator = system("connector"), system("orchestrator")
    long1 = add(pb.PartitionObserved(partition_ref="raw/a", location="/data/a/v1"), connector)  # 1
    add(pb.PartitionObserved(partition_ref="raw/b", location="/data/b/v1"), connector)  # 2
    add(pb.PartitionObserved(partition_ref="raw/b", location="/data/b/v2"), connector)  # 3: raw/b's first superseded
    wanted = add(pb.WantCreate(want_id="w", partition_refs=["d/1"]), manual("ann"))  # 4
    first = instance_uuid(wanted, "d/1")
    add(pb.JobRunBuffer(job_run_id="r1", job_label="d", instance_uuids=[first]), orchestrator)  # 5
    add(pb.JobRunHeartbeat(job_run_id="r1"), from_job_run("r1"))  # 6
    canceled = add(pb.JobRunCancel(job_run_id="r1", reason="operator", replace_instances=True), manual("ann"))  # 7
    add(pb.JobRunSuccess(job_run_id="r1"), from_job_run("r1"))  # 8: rejected, canceled
    add(pb.JobRunBuffer(job_run_id="r2", job_label="d", instance_uuids=[first]), orchestrator)  # 9: rejected
    fresh = instance_uuid(canceled, "d/1")
    add(pb.JobRunBuffer(job_run_id="r2", job_label="d", instance_uuids=[fresh]), orchestrator)  # 10
    add(pb.JobRunSuccess(job_run_id="r2", input_instance_uuids=[instance_uuid(long1, "raw/a")]), from_job_run("r2"))
    superseded = add(pb.PartitionObserved(partition_ref="raw/a", location="/data/a/v2"), connector)  # 12
    add(pb.InstanceRetention(drop_superseded_before_seq=superseded), system("retention"))  # 13
    both = pb.InstanceRetention(drop_superseded_before_seq=5, drop_superseded_created_before_seq=5)
    add(both, system("retention"))  # 14: rejected, both rules
    add(pb.InstanceRetention(drop_superseded_before_seq=-1), system("retention"))  # 15: rejected
    add(pb.ClockTick(), orchestrator)  # 16
    return events


def check_events() -> list[pb.Event]:
    """Issue 24's quality checks carried by outcomes: a success with a warning, a check that errored (retryable),
    the retry's blocking failure (permanent), and outcomes whose checks the fold rejects."""
    events: list[pb.Event] = []

    def add(payload: object, source: pb.EventSource | None = None) -> int:
        stamp = 1_800_000_000_000 + len(events)
        events.append(envelope(payload, source=source, timestamp_ms=stamp, event_id=f"q{len(events)}"))  # type: ignore[arg-type]
        return len(events)

    def result(
        name: str, passed: bool, blocking: bool = True, errored: bool = False, **metrics: float
    ) -> pb.CheckResult:
        return pb.CheckResult(
            name=name,
            passed=passed,
            blocking=blocking,
            errored=errored,
            description=f"{name} said {passed}",
            metrics=metrics,
        )

    def checks(uuid: str, *results: pb.CheckResult) -> pb.InstanceChecks:
        return pb.InstanceChecks(instance_uuid=uuid, results=results)

    connector, orchestrator = system("connector"), system("orchestrator")
    raw = instance_uuid(add(pb.PartitionObserved(partition_ref="raw/a", location="/data/a"), connector), "raw/a")  # 1
    wanted = add(pb.WantCreate(want_id="w", partition_refs=["d/1", "d/2", "d/3"]), manual("ann"))  # 2
    d1, d2, d3 = (instance_uuid(wanted, ref) for ref in ("d/1", "d/2", "d/3"))
    add(pb.JobRunBuffer(job_run_id="r1", job_label="d", instance_uuids=[d1]), orchestrator)  # 3
    add(pb.JobRunHeartbeat(job_run_id="r1"), from_job_run("r1"))  # 4
    warned = checks(d1, result("rows_nonzero", True, rows=5), result("url_not_null", False, blocking=False, nulls=2))
    add(pb.JobRunSuccess(job_run_id="r1", input_instance_uuids=[raw], checks=[warned]), from_job_run("r1"))  # 5
    add(pb.JobRunBuffer(job_run_id="r2", job_label="d", instance_uuids=[d2]), orchestrator)  # 6
    error = "check rows_nonzero errored: ValueError: no column url"
    errored = checks(d2, result("rows_nonzero", False, errored=True))
    failure = pb.JobRunFailure(job_run_id="r2", error_class=pb.ERROR_CLASS_RETRYABLE, message=error, checks=[errored])
    add(failure, from_job_run("r2"))  # 7
    add(pb.JobRunBuffer(job_run_id="r3", job_label="d", instance_uuids=[d2]), orchestrator)  # 8
    blocked = checks(d2, result("rows_nonzero", False, rows=0), result("url_not_null", True, blocking=False))
    add(pb.JobRunSuccess(job_run_id="r3", checks=[blocked]), from_job_run("r3"))  # 9: rejected, a failed blocking check
    add(pb.JobRunSuccess(job_run_id="r3", checks=[errored]), from_job_run("r3"))  # 10: rejected, an errored check
    message = "check rows_nonzero failed on d/2: 0 rows"
    failure = pb.JobRunFailure(job_run_id="r3", error_class=pb.ERROR_CLASS_PERMANENT, message=message, checks=[blocked])
    add(failure, from_job_run("r3"))  # 11
    add(pb.JobRunBuffer(job_run_id="r4", job_label="d", instance_uuids=[d3]), orchestrator)  # 12
    passed = checks(d3, result("rows_nonzero", True, rows=7))
    add(pb.JobRunSuccess(job_run_id="r4", checks=[checks(d1, result("x", True))]), from_job_run("r4"))  # 13: rejected
    twice = checks(d3, result("rows_nonzero", True), result("rows_nonzero", True))
    add(pb.JobRunSuccess(job_run_id="r4", checks=[twice]), from_job_run("r4"))  # 14: rejected, a name twice
    add(pb.JobRunSuccess(job_run_id="r4", checks=[passed, passed]), from_job_run("r4"))  # 15: rejected, d/3 twice
    add(pb.JobRunSuccess(job_run_id="r4", checks=[checks(d3, result("", True))]), from_job_run("r4"))  # 16: rejected
    add(pb.JobRunSuccess(job_run_id="r4", checks=[passed]), from_job_run("r4"))  # 17
    add(pb.ClockTick(), orchestrator)  # 18
    return events


def checks_rerun_events() -> list[pb.Event]:
    """Issue 24's checks run again on Live instances: a request, a passing rerun, a skipped one, a failing
    rerun with its taint (cascading to the weekly built from the daily), and what the fold refuses."""
    events: list[pb.Event] = []

    def add(payload: object, source: pb.EventSource | None = None) -> int:
        stamp = 1_810_000_000_000 + len(events)
        events.append(envelope(payload, source=source, timestamp_ms=stamp, event_id=f"k{len(events)}"))  # type: ignore[arg-type]
        return len(events)

    def rerun(request_id: str, uuid: str, passed: bool, rows: float) -> pb.ChecksRerun:
        said = pb.CheckResult(name="rows_nonzero", passed=passed, blocking=True, description=f"{rows:g} rows")
        said.metrics["rows"] = rows
        return pb.ChecksRerun(request_id=request_id, checks=pb.InstanceChecks(instance_uuid=uuid, results=[said]))

    connector, orchestrator, ann = system("connector"), system("orchestrator"), manual("ann")
    raw = instance_uuid(add(pb.PartitionObserved(partition_ref="raw/a", location="/data/a"), connector), "raw/a")  # 1
    wanted = add(pb.WantCreate(want_id="w", partition_refs=["d/1", "wk/1"]), ann)  # 2
    d1, wk = instance_uuid(wanted, "d/1"), instance_uuid(wanted, "wk/1")
    add(pb.JobRunBuffer(job_run_id="r1", job_label="d", instance_uuids=[d1]), orchestrator)  # 3
    add(pb.JobRunSuccess(job_run_id="r1", input_instance_uuids=[raw]), from_job_run("r1"))  # 4
    add(pb.JobRunBuffer(job_run_id="r2", job_label="wk", instance_uuids=[wk]), orchestrator)  # 5
    add(pb.JobRunSuccess(job_run_id="r2", input_instance_uuids=[d1]), from_job_run("r2"))  # 6
    add(pb.ChecksRequest(request_id="q1", instance_uuid=d1, comment="new check"), ann)  # 7
    add(rerun("q1", d1, True, 5), orchestrator)  # 8
    add(rerun("q1", d1, True, 5), orchestrator)  # 9: rejected, already answered
    add(pb.ChecksRequest(request_id="q2", instance_uuid=wk), ann)  # 10
    add(pb.ChecksRerun(request_id="q2", skipped="job wk declares no checks"), orchestrator)  # 11
    add(pb.ChecksRequest(request_id="q3", instance_uuid=d1), ann)  # 12
    add(pb.ChecksRequest(request_id="q4", instance_uuid=d1), ann)  # 13: rejected, q3 is pending
    add(rerun("q3", d1, False, 0), orchestrator)  # 14
    reason = "check rows_nonzero failed on d/1: 0 rows (checks run again, request q3)"
    add(pb.PartitionTaint(partition_ref="d/1", reason=reason, instance_uuid=d1), orchestrator)  # 15: taints d/1, wk/1
    add(pb.PartitionTaint(partition_ref="d/1", reason=reason, instance_uuid=d1), orchestrator)  # 16: rejected, moved
    add(pb.ChecksRequest(request_id="q5", instance_uuid=raw), ann)  # 17: rejected, source data
    add(pb.ChecksRequest(request_id="q6", instance_uuid=d1), ann)  # 18: rejected, tainted
    add(pb.ClockTick(), orchestrator)  # 19
    return events


@dataclass(frozen=True)
class GoldenLog:
    """One golden log: `python tests/kits/golden_log.py <name>` wrote `tests/data/<file>` from `events` once."""

    name: str
    file: str
    events: Callable[[], list[pb.Event]]
    digest: str  # `state_digest` of its strict replay: audits of old logs compare digests across versions

    @property
    def path(self) -> Path:
        return DATA / self.file


GOLDEN_LOGS = (
    GoldenLog(
        "v1",  # schema v1, every type it had: a W1-shaped history and the remaining types
        "golden_log_v1.bin",
        golden_events,
        "4b02d60e882d6c26b2c90cdb2fea74fa3ba11443efd74ebeb5f5a49465c6ed99",
    ),
    GoldenLog(
        "buckets",  # bucketing events, 2026-11
        "golden_log_buckets.bin",
        bucket_events,
        "2c6a5a2f3dbfef4264f180c2f1e98b455e0b72aa9ca6d218074ebaa15d232a8b",
    ),
    GoldenLog(
        "group",  # worker groups and fenced decisions, 2026-11
        "golden_log_group.bin",
        group_events,
        "4af51da881194a72763eea81bcb204ec1177dce10e47b48f4d27e566a0fd5fc1",
    ),
    GoldenLog(
        "group_fences",  # epochs fencing off removed members' runs, 2026-11-30
        "golden_log_group_fences.bin",
        group_fence_events,
        "2f1041c5b7d315e6ad10a4df0c63dec5c12f8f9c94eaa38819aaed349e29616d",
    ),
    GoldenLog(
        "versions",  # versioned source observations, 2026-11
        "golden_log_versions.bin",
        version_events,
        "b17365e9380a9f8112bc73e4177f554c1b2963bdc030392b4fe878957fc89134",
    ),
    GoldenLog(
        "scans",  # source scan cursors, 2026-11
        "golden_log_scans.bin",
        scan_events,
        "50188415e78a09665084d6ccd62c5b35c8b8595e1b20ec7e6a80154c9ceef43d",
    ),
    GoldenLog(
        "shards",  # scans split into key ranges, scan requests, 2026-11
        "golden_log_scan_shards.bin",
        scan_shard_events,
        "c2f4af87a5aa2534e7de8b9669480377d5030383ae6cfe6cbfcff2ec2249649d",
    ),
    GoldenLog(
        "subscriptions",  # webhook subscriptions and their changes, 2026-11
        "golden_log_subscriptions.bin",
        subscription_events,
        "43b694143e873f31ed9814c009802159b7cf0021a4d705dccca2bad44d12dfe7",
    ),
    GoldenLog(
        "gone",  # source partitions gone, and restored, 2026-11
        "golden_log_gone.bin",
        gone_events,
        "15e616869586a4ed154929c15af5e477cb57bb317738fc9c8455ac4958bd3e1f",
    ),
    GoldenLog(
        "cancel_retention",  # cancels replacing instances, retention by supersession (issue 23), 2026-11
        "golden_log_cancel_retention.bin",
        cancel_retention_events,
        "13b6da9f59d6301f9e2e27e81466853ef07c2ad6dd5f04ec657c1dc8a7a0e785",
    ),
    GoldenLog(
        "checks",  # quality check results carried by outcomes (issue 24), 2026-11
        "golden_log_checks.bin",
        check_events,
        "21f8b0fff707441cdfed499f1197a650e4f39a388bdd8531e44a27dcd2e30740",
    ),
    GoldenLog(
        "checks_rerun",  # checks run again on Live instances, their taint (issue 24), 2026-11
        "golden_log_checks_rerun.bin",
        checks_rerun_events,
        "1f322f9274ee13c31580cabe454fb9b8137ef9129945a52bd52e107729c73599",
    ),
    GoldenLog(
        "schedules",  # schedule ticks with their wants, pauses (issue 25), 2026-11
        "golden_log_schedules.bin",
        schedule_events,
        "cdbaa2a0fe51e03a49b7c749a0a4c099060ce1d2949b1c7a4cbf7876a4742c0b",
    ),
    GoldenLog(
        "reactions",  # reactions firing wants, their copies rejected (issue 25), 2026-11
        "golden_log_reactions.bin",
        reaction_events,
        "f3dcb5e51fb70c1259c9d263346611a357dcd42c62dc7f3b3239e6a9b01324db",
    ),
    GoldenLog(
        "code_versions",  # job runs recorded with their job's code version (issue 25), 2026-11
        "golden_log_code_versions.bin",
        code_version_events,
        "8b57280d45e79b32bac75f052af376c34f3a5a69efdce3b8ac9ac0dd46b96b75",
    ),
    GoldenLog(
        "code_change",  # on_code_change: a stale instance tainted and wanted again (issue 25), 2026-11
        "golden_log_code_change.bin",
        code_change_events,
        "045b81dd8f4f104be031b72d43fcaa694598b7d2ec40142130745c5caa71f7de",
    ),
    GoldenLog(
        "outcomes",  # per-output outcomes, split batches, stale instances that keep serving (issue 34), 2026-11
        "golden_log_outcomes.bin",
        outcome_events,
        "624586e2f003875952e10b241aa570cb170232152e1ab3067e7e01e615b75909",
    ),
    GoldenLog(
        "reaction_notes",  # what reactions owe: pending firings, cursors, settled ones (issue 35), 2026-11
        "golden_log_reaction_notes.bin",
        reaction_note_events,
        "4725fd8bd80c48cde3e5a81f394cc88a091c08700fa4c86785c5cfe714ea7ee2",
    ),
    GoldenLog(
        "gone_judged",  # data back after it was gone, judged by its version, 2026-11-30
        "golden_log_gone_judged.bin",
        gone_judged_events,
        "96a00c80395f1d80d9f3caa98dd8613e95e9f880de970a06cd0a2a70fbbc4678",
    ),
)
BY_NAME = {log.name: log for log in GOLDEN_LOGS}


def write(log: GoldenLog) -> None:
    """Write a golden log's file from its generator; never over an existing file."""
    with log.path.open("xb") as out:
        for event in log.events():
            data = event.SerializeToString()
            out.write(_VarintBytes(len(data)) + data)


def read(name: str = "v1") -> list[bytes]:
    """The serialized events of a golden log, in order."""
    data = BY_NAME[name].path.read_bytes()
    payloads, position = [], 0
    while position < len(data):
        size, position = _DecodeVarint32(data, position)
        payloads.append(data[position : position + size])
        position += size
    return payloads


if __name__ == "__main__":
    import sys

    write(BY_NAME[sys.argv[1] if len(sys.argv) > 1 else "v1"])


def read_events(name: str = "v1") -> list[pb.Event]:
    """The events of a golden log, parsed, in order."""
    return [pb.Event.FromString(payload) for payload in read(name)]
