"""The golden logs of automation (issue 25), their generators kept apart from golden_log.py: schedule ticks and
pauses, reactions firing wants, job runs with their code versions, on_code_change's taints and firings."""

from __future__ import annotations

from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.fold.reactions import reaction_want_id
from partbuild.state.fold.schedules import tick_time_text
from partbuild.state.log.events import envelope, from_job_run, manual, system
from partbuild.state.rules.ids import instance_uuid


def schedule_events() -> list[pb.Event]:
    """Issue 25's schedules: scheduled, catch-up, skipped and manual ticks with their wants, a failed want
    function, pause and resume, and the copies and mistakes the fold rejects."""
    events: list[pb.Event] = []

    def add(payload: object, source: pb.EventSource | None = None) -> int:
        stamp = 1_800_000_000_000 + len(events)
        events.append(envelope(payload, source=source, timestamp_ms=stamp, event_id=f"s{len(events)}"))  # type: ignore[arg-type]
        return len(events)

    hour = 3_600_000
    t0 = 1_799_996_400_000  # 2027-01-15T07:00:00Z

    def tick(kind: int, at: int, *refs: str, missed: int = 0, error: str = "", want_id: str = "") -> pb.ScheduleTick:
        name = "hourly"
        found = pb.ScheduleTick(schedule=name, tick_ms=at, kind=kind, missed=missed, error=error)
        if refs:
            manual_part = "manual:" if kind == pb.TICK_KIND_MANUAL else ""
            stamp = tick_time_text(at)
            found.want.CopyFrom(
                pb.WantCreate(
                    want_id=want_id or f"schedule:{name}:{manual_part}{stamp}",
                    partition_refs=refs,
                    data_timestamp_ms=at,
                    ttl_seconds=7200,
                )
            )
        return found

    orchestrator = system("orchestrator")
    add(tick(pb.TICK_KIND_SCHEDULED, t0, "h/1"), orchestrator)  # 1
    add(tick(pb.TICK_KIND_SCHEDULED, t0, "h/1"), orchestrator)  # 2: rejected, the same time again (a copy)
    add(tick(pb.TICK_KIND_CATCH_UP, t0 + 3 * hour, "h/4", missed=2), orchestrator)  # 3
    add(tick(pb.TICK_KIND_SCHEDULED, t0 + 2 * hour, "h/3"), orchestrator)  # 4: rejected, before the last tick
    add(tick(pb.TICK_KIND_SCHEDULED, t0 + 4 * hour, "h/5", want_id="other"), orchestrator)  # 5: rejected, want id
    add(pb.ScheduleControl(schedule="hourly", paused=True, reason="upstream outage"), manual("ann"))  # 6
    add(pb.ScheduleControl(schedule="hourly", paused=True), manual("ann"))  # 7: rejected, already paused
    add(tick(pb.TICK_KIND_SCHEDULED, t0 + 4 * hour, "h/5"), orchestrator)  # 8: rejected, paused
    add(tick(pb.TICK_KIND_MANUAL, t0 + 4 * hour + 5, "h/5"), manual("ann"))  # 9: by hand, while paused
    add(pb.ScheduleControl(schedule="hourly", paused=False), manual("ann"))  # 10
    add(tick(pb.TICK_KIND_SKIPPED, t0 + 6 * hour, missed=1), orchestrator)  # 11
    add(tick(pb.TICK_KIND_SKIPPED, t0 + 7 * hour, "h/8"), orchestrator)  # 12: rejected, a skipped tick's want
    add(tick(pb.TICK_KIND_SCHEDULED, t0 + 7 * hour, error="want function raised KeyError: 'x'"), orchestrator)  # 13
    add(tick(pb.TICK_KIND_SCHEDULED, t0 + 8 * hour, "h/9", "h/9"), orchestrator)  # 14: rejected, a ref twice
    add(tick(pb.TICK_KIND_SCHEDULED, t0 + 8 * hour, "h/9"), orchestrator)  # 15
    add(pb.ClockTick(), orchestrator)  # 16
    return events


def reaction_events() -> list[pb.Event]:
    """Issue 25's reactions: upstream changes down a chain and a source's arrival firing wants, and the copies
    and mistakes the fold rejects."""
    events: list[pb.Event] = []

    def add(payload: object, source: pb.EventSource | None = None) -> int:
        stamp = 1_820_000_000_000 + len(events)
        events.append(envelope(payload, source=source, timestamp_ms=stamp, event_id=f"r{len(events)}"))  # type: ignore[arg-type]
        return len(events)

    def fired(job: str, kind: int, cause: tuple[str, str, str], ref: str, want_id: str = "") -> pb.ReactionFired:
        cause_ref, uuid, previous = cause
        want_id = want_id or reaction_want_id(job, kind, uuid, ref)
        want = pb.WantCreate(want_id=want_id, partition_refs=[ref], ttl_seconds=3600)
        return pb.ReactionFired(
            job=job,
            kind=kind,
            cause_ref=cause_ref,
            cause_instance_uuid=uuid,
            previous_instance_uuid=previous,
            want=want,
        )

    upstream, arrival = pb.REACTION_KIND_UPSTREAM_CHANGE, pb.REACTION_KIND_SOURCE_ARRIVAL
    connector, orchestrator, ann = system("connector"), system("orchestrator"), manual("ann")
    seen = pb.PartitionObserved(partition_ref="raw/a", location="/data/a", version="v1", version_strong=True)
    raw1 = instance_uuid(add(seen, connector), "raw/a")  # 1
    wanted = add(pb.WantCreate(want_id="w", partition_refs=["d/1", "wk/1"]), ann)  # 2
    d1, wk1 = instance_uuid(wanted, "d/1"), instance_uuid(wanted, "wk/1")
    add(pb.JobRunBuffer(job_run_id="r1", job_label="d", instance_uuids=[d1]), orchestrator)  # 3
    add(pb.JobRunSuccess(job_run_id="r1", input_instance_uuids=[raw1]), from_job_run("r1"))  # 4
    add(pb.JobRunBuffer(job_run_id="r2", job_label="wk", instance_uuids=[wk1]), orchestrator)  # 5
    add(pb.JobRunSuccess(job_run_id="r2", input_instance_uuids=[d1]), from_job_run("r2"))  # 6
    seen = pb.PartitionObserved(partition_ref="raw/a", location="/data/a2", version="v2", version_strong=True)
    changed = add(seen, connector)  # 7: new data, taints d/1 and wk/1
    raw2, d1b, wk1b = (instance_uuid(changed, ref) for ref in ("raw/a", "d/1", "wk/1"))
    add(fired("d", upstream, ("raw/a", raw2, raw1), "d/1"), orchestrator)  # 8
    add(fired("d", upstream, ("raw/a", raw2, raw1), "d/1"), orchestrator)  # 9: rejected, a copy (the want exists)
    add(fired("d", upstream, ("raw/a", raw2, raw1), "d/1", want_id="mine"), orchestrator)  # 10: rejected, want id
    add(fired("d", upstream, ("d/1", raw2, raw1), "d/1"), orchestrator)  # 11: rejected, not an instance of d/1
    add(pb.JobRunBuffer(job_run_id="r3", job_label="d", instance_uuids=[d1b]), orchestrator)  # 12
    add(pb.JobRunSuccess(job_run_id="r3", input_instance_uuids=[raw2]), from_job_run("r3"))  # 13
    add(fired("wk", upstream, ("d/1", d1b, d1), "wk/1"), orchestrator)  # 14: the weekly follows its daily
    add(pb.JobRunBuffer(job_run_id="r4", job_label="wk", instance_uuids=[wk1b]), orchestrator)  # 15
    add(pb.JobRunSuccess(job_run_id="r4", input_instance_uuids=[d1b]), from_job_run("r4"))  # 16
    raw_b = instance_uuid(add(pb.PartitionObserved(partition_ref="raw/b", location="/data/b"), connector), "raw/b")
    add(fired("d", arrival, ("raw/b", raw_b, ""), "d/2"), orchestrator)  # 18: a source's first arrival
    add(fired("d", arrival, ("raw/b", raw_b, raw1), "d/3"), orchestrator)  # 19: rejected, an arrival supersedes none
    two = fired("d", arrival, ("raw/b", raw_b, ""), "d/3")
    two.want.partition_refs.append("d/4")
    add(two, orchestrator)  # 20: rejected, two refs
    add(
        pb.ReactionFired(job="d", kind=upstream, cause_ref="raw/b", cause_instance_uuid=raw_b), orchestrator
    )  # 21: no want
    add(pb.ClockTick(), orchestrator)  # 22
    return events


def code_version_events() -> list[pb.Event]:
    """Issue 25's code versions: runs buffered with the job's code version (one without, as old logs have
    them), a success and a failure under versions, and a version too long for the fold."""
    events: list[pb.Event] = []

    def add(payload: object, source: pb.EventSource | None = None) -> int:
        stamp = 1_820_000_000_000 + len(events)
        events.append(envelope(payload, source=source, timestamp_ms=stamp, event_id=f"c{len(events)}"))  # type: ignore[arg-type]
        return len(events)

    orchestrator, ann = system("orchestrator"), manual("ann")
    refs = ["wk/1", "wk/2", "wk/3", "wk/4"]
    wanted = add(pb.WantCreate(want_id="w", partition_refs=refs), ann)  # 1
    wk = [instance_uuid(wanted, ref) for ref in refs]
    add(pb.JobRunBuffer(job_run_id="r1", job_label="wk", instance_uuids=[wk[0]], code_version="v1"), orchestrator)  # 2
    add(pb.JobRunSuccess(job_run_id="r1"), from_job_run("r1"))  # 3
    add(pb.JobRunBuffer(job_run_id="r2", job_label="wk", instance_uuids=[wk[1]]), orchestrator)  # 4: no version
    add(pb.JobRunSuccess(job_run_id="r2"), from_job_run("r2"))  # 5
    too_long = pb.JobRunBuffer(job_run_id="r3", job_label="wk", instance_uuids=[wk[2]], code_version="v" * 257)
    add(too_long, orchestrator)  # 6: rejected, the version is too long
    add(pb.JobRunBuffer(job_run_id="r3", job_label="wk", instance_uuids=[wk[2]], code_version="v2"), orchestrator)  # 7
    add(pb.JobRunSuccess(job_run_id="r3"), from_job_run("r3"))  # 8
    add(pb.JobRunBuffer(job_run_id="r4", job_label="wk", instance_uuids=[wk[3]], code_version="v2"), orchestrator)  # 9
    failure = pb.JobRunFailure(job_run_id="r4", error_class=pb.ERROR_CLASS_PERMANENT, message="boom")
    add(failure, from_job_run("r4"))  # 10
    add(pb.ClockTick(), orchestrator)  # 11
    return events


def code_change_events() -> list[pb.Event]:
    """Issue 25's on_code_change: a Live daily built by version v1 tainted and wanted again under v2 (one append),
    its copy and the mistakes the fold rejects, then the rebuild under v2."""
    events: list[pb.Event] = []

    def add(payload: object, source: pb.EventSource | None = None) -> int:
        stamp = 1_830_000_000_000 + len(events)
        events.append(envelope(payload, source=source, timestamp_ms=stamp, event_id=f"x{len(events)}"))  # type: ignore[arg-type]
        return len(events)

    kind = pb.REACTION_KIND_CODE_CHANGE

    def fired(uuid: str, ref: str = "d/1", built: str = "v1", current: str = "v2", **more: str) -> pb.ReactionFired:
        want = pb.WantCreate(want_id=reaction_want_id("d", kind, uuid, ref), partition_refs=[ref])
        return pb.ReactionFired(
            job="d", kind=kind, cause_ref="d/1", cause_instance_uuid=uuid, want=want,
            built_version=built, current_version=current, **more,
        )  # fmt: skip

    orchestrator, ann = system("orchestrator"), manual("ann")
    d1 = instance_uuid(add(pb.WantCreate(want_id="w", partition_refs=["d/1"]), ann), "d/1")  # 1
    add(pb.JobRunBuffer(job_run_id="r1", job_label="d", instance_uuids=[d1], code_version="v1"), orchestrator)  # 2
    add(pb.JobRunSuccess(job_run_id="r1"), from_job_run("r1"))  # 3
    reason = "code version of job d changed: built by v1, the job's is v2 (on_code_change)"
    add(pb.PartitionTaint(partition_ref="d/1", reason=reason, instance_uuid=d1), orchestrator)  # 4
    add(fired(d1), orchestrator)  # 5: wants d/1 again
    add(fired(d1), orchestrator)  # 6: rejected, a copy (its want exists)
    add(fired(d1, built="v2"), orchestrator)  # 7: rejected, the same version
    add(fired(d1, ref="d/2"), orchestrator)  # 8: rejected, another ref than its cause
    add(fired(d1, previous_instance_uuid=d1), orchestrator)  # 9: rejected, supersedes nothing
    upstream = pb.ReactionFired(
        job="d", kind=pb.REACTION_KIND_UPSTREAM_CHANGE, cause_ref="d/1", cause_instance_uuid=d1, built_version="v1"
    )
    add(upstream, orchestrator)  # 10: rejected, versions belong to on_code_change
    add(pb.ClockTick(), orchestrator)  # 11
    return events
