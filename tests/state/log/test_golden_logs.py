"""Events are forever: every golden log (tests/golden_log.py's `GOLDEN_LOGS`) still replays to its digest."""

from __future__ import annotations

import pytest

from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.fold.build_state import BuildState
from partbuild.state.fold.records import InstanceState, JobRunState, WantState
from partbuild.state.log.digest import state_digest
from partbuild.state.log.group_verify import verify

from golden_log import GOLDEN_LOGS, GoldenLog, read


def replayed(payloads: list[bytes]) -> BuildState:
    """A strict fold of a golden log's events, seq 1 onwards."""
    state = BuildState(strict=True)
    for seq, payload in enumerate(payloads, 1):
        state.apply_payload(seq, payload)
    return state


@pytest.mark.parametrize("log", GOLDEN_LOGS, ids=lambda log: log.name)
def test_every_golden_log_replays_to_its_pinned_digest(log: GoldenLog) -> None:
    """Audits of old logs compare digests across versions: a golden log's digest never changes."""
    payloads = read(log.name)
    state = replayed(payloads)
    assert state.head_seq == len(payloads) > 0
    digest = state_digest(state)
    assert digest == log.digest, f"{log.file} replays to {digest}"


def test_every_golden_file_has_one_entry() -> None:
    files = [log.file for log in GOLDEN_LOGS]
    assert len({log.name for log in GOLDEN_LOGS}) == len(files) == len(set(files))
    assert sorted(files) == sorted(path.name for path in GOLDEN_LOGS[0].path.parent.glob("golden_log_*.bin"))


V1_KINDS = {
    "want_create",
    "want_cancel",
    "job_run_buffer",
    "job_run_heartbeat",
    "job_run_success",
    "job_run_failure",
    "job_run_cancel",
    "job_run_missing_deps",
    "partition_taint",
    "partition_observed",
    "instance_retention",
    "instances_wait_upstream",
    "clock_tick",
}


def test_the_v1_golden_log_replays_without_rejections() -> None:
    payloads = read("v1")
    state = replayed(payloads)
    assert state.head_seq == len(payloads) and state.rejections == [] and state.groups == {}
    kinds = {pb.Event.FromString(payload).WhichOneof("payload") for payload in payloads}
    # Every event type of schema v1 as it was when the file was written (types added later, such as
    # bucket_run_start, belong in a golden log of their own).
    assert kinds == V1_KINDS
    assert state.wants["late"].state == WantState.CANCELED
    assert state.canonical_instance("x/out").state == InstanceState.MISSING  # type: ignore[union-attr]
    assert state.job_runs["x-run"].state == JobRunState.CANCELED
    assert state.canonical_instance("x/in").metadata == {"k": "v"}  # type: ignore[union-attr]
    assert state.want_counts[WantState.SUCCESSFUL] > 50 and state.run_counts[JobRunState.FAILED] > 0
    # The taint superseded a daily and its weekly; retention then dropped both old instances.
    assert state.dropped_instances == 2 and state.instance_counts[InstanceState.TAINTED] == 0


BUCKET_KINDS = {"want_create", "bucket_run_start", "job_run_buffer", "job_run_success", "bucket_layout"}


def test_the_bucketing_golden_log_replays_with_its_rejections() -> None:
    """Bucket starts (round-robin as first written, static ones with a worker id), scoped runs, a re-shard."""
    payloads = read("buckets")
    events = [pb.Event.FromString(payload) for payload in payloads]
    assert {event.WhichOneof("payload") for event in events} == BUCKET_KINDS
    state = replayed(payloads)
    assert [(r.seq, r.event_type) for r in state.rejections] == [(6, "bucket_run_start"), (8, "job_run_buffer")]
    assert "namespace 'partbuild' is split into 3 buckets (since seq 2)" in state.rejections[0].reason
    assert "namespace 'partbuild' is split into 2 buckets (since seq 7)" in state.rejections[1].reason
    assert state.bucket_layouts == {"partbuild": (2, 7)} and state.groups == {}
    assert state.bucket_runs == {"partbuild": 2}  # the static starts left the rotation where round-robin put it
    assert state.job_runs["noop-3-b1-0"].state == JobRunState.SUCCEEDED
    assert state.job_runs["noop-8-b2-0"].state == JobRunState.QUEUED and "noop-7-b2-0" not in state.job_runs
    assert events[2].source.system.worker == "host-a:101:0a0a0a0a"


GROUP_KINDS = {
    "want_create",
    "group_epoch",
    "group_task_message",
    "job_run_buffer",
    "job_run_heartbeat",
    "job_run_failure",
    "instances_wait_upstream",
    "bucket_run_start",
}
A, B, C = "host-a:101:0a0a0a0a", "host-b:202:0b0b0b0b", "host-c:303:0c0c0c0c"
E1, E2, E3 = (f"7d1f0c1e-0000-4000-8000-00000000000{n}" for n in (1, 2, 3))


def test_the_group_golden_log_replays_with_exactly_its_rejections() -> None:
    """Hand-offs, a join, a death with a pending share, a stale leader, a late member, fenced decisions."""
    payloads = read("group")
    events = [pb.Event.FromString(payload) for payload in payloads]
    assert {event.WhichOneof("payload") for event in events} == GROUP_KINDS
    state = replayed(payloads)
    assert [(r.seq, r.event_type) for r in state.rejections] == [
        (5, "job_run_buffer"),  # a still held bucket 3, but it was b's once b picked it up
        (10, "group_task_message"),  # b's message of the old epoch
        (13, "group_epoch"),  # b's epoch built on e2 after a's e3: a stale leader
        (15, "instances_wait_upstream"),  # c decided about a's bucket 1
        (18, "want_create"),  # b is no member of e3
        (19, "bucket_run_start"),  # a static worker in the group's namespace
    ]
    reasons = [r.reason for r in state.rejections]
    assert f"task {A!r} does not own bucket 3 of group 'workers' (owned by {B!r})" in reasons[0]
    assert reasons[1].startswith(f"epoch {E1!r} is an old epoch of group 'workers'; the current one is {E2!r}")
    assert reasons[2].endswith(f"but the current epoch is {E3!r} (since seq 12): a stale leader's epoch")
    assert f"task {C!r} does not own bucket 1 of group 'workers' (owned by {A!r})" in reasons[3]
    assert reasons[4] == f"fenced decision: task {B!r} is not a member of group 'workers' in epoch {E3!r}"
    assert reasons[5].startswith("namespace 'partbuild' is shared by worker group 'workers' (since seq 2)")
    group = state.groups["workers"]
    assert (group.epoch_id, group.leader, group.members, group.epochs) == (E3, A, (A, C), 3)
    assert group.owners == {1: A, 2: A, 3: A, 4: A}  # b's buckets and a's pending share to c went to the leader
    assert state.bucket_layouts == {"partbuild": (4, 2)}
    assert state.job_runs["noop-b-0"].state == JobRunState.FAILED  # b's stale run, failed by the new owner
    assert "noop-a-0" not in state.job_runs and state.wants["d-x"].parent_want_id == "w" and "d-y" not in state.wants
    assert verify(events) == []


def test_the_group_fences_golden_log_rejects_exactly_the_removed_members_own_events() -> None:
    """After the epoch that removed b, its run's heartbeats and unfenced outcomes are refused (under a later
    epoch without the flag too); the new owner's fenced failure ends it and a's retry builds its partitions."""
    payloads = read("group_fences")
    state = replayed(payloads)
    refused = [(r.seq, r.event_type) for r in state.rejections]
    assert refused == [
        (9, "job_run_heartbeat"),
        (10, "job_run_success"),
        (11, "job_run_failure"),
        (13, "job_run_heartbeat"),
    ]
    assert all(f"was buffered by task {B!r}, which is no longer a member" in r.reason for r in state.rejections)
    assert state.groups["fenced"].fences_runs_since == 2 and state.run_fences == {}
    failed, retry = state.job_runs["noop-b"], state.job_runs["noop-a"]
    assert (failed.state, failed.error_message) == (JobRunState.FAILED, "its worker is gone")
    assert retry.state == JobRunState.SUCCEEDED
    assert verify([pb.Event.FromString(payload) for payload in payloads]) == []


def test_the_versions_golden_log_replays_with_exactly_its_rejections() -> None:
    """Versions learned, repeated, moved with strong versions kept, and late data that taints its consumers."""
    state = replayed(read("versions"))
    assert [(r.seq, r.event_type) for r in state.rejections] == [(14, "partition_observed"), (17, "partition_observed")]
    assert state.rejections[0].reason.endswith("with this version")
    assert state.rejections[1].reason == "a strong version needs a version"
    canonical = {ref: state.instances[uuid] for ref, uuid in state.canonical.items()}
    day1, day2, day3 = (canonical[f"raw/date=2026-01-0{n}"] for n in (1, 2, 3))
    assert (day1.version, day1.created_seq) == (("size=10,mtime=1", False), 1)  # learned, same instance
    assert (day2.version, day2.created_seq) == (("size=12,mtime=2", False), 16)
    assert (day3.version, day3.location) == (("etag-3", True), "/moved/raw/date=2026-01-03")
    states = {ref: instance.state for ref, instance in canonical.items()}
    assert states["daily/date=2026-01-02"] == states["weekly/week=2026-W01"] == InstanceState.MISSING
    assert states["daily/date=2026-01-01"] == states["daily/date=2026-01-03"] == InstanceState.LIVE
    tainted = [i.ref for i in state.instances.values() if i.state == InstanceState.TAINTED]
    assert sorted(tainted) == ["daily/date=2026-01-02", "weekly/week=2026-W01"]
    assert state.wants["w"].state == WantState.SUCCESSFUL


def test_the_scans_golden_log_replays_with_exactly_its_rejections() -> None:
    """Slices continue their pass from the cursor; stale slices, slices of a done pass and bad bounds are rejected."""
    state = replayed(read("scans"))
    assert [(r.seq, r.event_type) for r in state.rejections] == [(6, "source_scan_progress")] + [
        (seq, "source_scan_progress") for seq in (9, 14, 15)
    ]
    assert "moved past where this slice began" in state.rejections[0].reason
    scan = state.sources["raw"]
    assert (scan.pass_number, scan.done, scan.passes_done) == (3, False, 1)
    (key_range,) = scan.ranges
    assert (key_range.last_key, key_range.resume_token) == (b"date=2026-01-01/x", b"t")
    assert (scan.items_total, scan.partitions_total, scan.errors_total) == (10, 4, 1)
    assert (scan.last_pass_items, scan.last_pass_partitions) == (5, 2)
    assert (scan.last_error, scan.last_error_retryable) == ("SlowDown (503)", True)
    raw2 = state.instances[state.canonical["raw/date=2026-01-02"]]
    assert (raw2.version, raw2.byte_count, raw2.metadata) == (("b2", False), 20, {"files": "2"})
    assert "date=2026-01" not in repr(scan)  # the record prints its cursor redacted


def test_the_scan_shards_golden_log_replays_with_exactly_its_rejections() -> None:
    """A pass split in three, its shards finished in any order; a request during a pass makes the next one due."""
    state = replayed(read("shards"))
    assert [r.seq for r in state.rejections] == [5, 8, 10, 11]
    scan = state.sources["raw"]
    assert (scan.done, scan.passes_done, scan.rescan_requested) == (True, 1, True)
    bounds = [(done.start, done.end, done.bytes, done.split_hint) for done in scan.last_pass_ranges]
    assert bounds == [(b"", b"d=4/", 40, b"d=2/"), (b"d=4/", b"d=7/", 20, b"d=5/"), (b"d=7/", b"", 40, b"d=9/")]
    assert (scan.items_total, scan.partitions_total, scan.last_pass_done_ms) == (10, 3, 1_797_000_000_008)


def test_the_subscriptions_golden_log_replays_with_exactly_its_rejections() -> None:
    """Subscriptions made, paused, resumed, resharded (the RQ and DLQ grow), reset, deleted and made again."""
    state = replayed(read("subscriptions"))
    assert [r.seq for r in state.rejections] == [4, 6, 8, 10, 11, 14]
    assert "do not divide: change the shard count first" in state.rejections[2].reason  # a rewind across topic 0
    alerts = state.subscriptions["alerts"]
    assert (alerts.status, alerts.shard_count, alerts.event_types, alerts.ref_prefixes) == (
        "active",
        8,
        ("job_run_success",),
        ("agg/",),
    )
    main = [(t.partitions, t.k, t.start_seq) for t in alerts.main.storage_topics]
    assert (main, alerts.main.produce_pointer) == ([(12, 1, 2), (24, 2, 8)], 1)
    assert (
        [(t.partitions, t.k) for t in alerts.rq.storage_topics]
        == [(12, 1), (16, 1)]
        == [(t.partitions, t.k) for t in alerts.dlq.storage_topics]
    )
    assert (alerts.resets, alerts.rq_floor) == (((9, "rq", 7),), 7)
    lineage = state.subscriptions["lineage"]
    assert (lineage.key, lineage.shard_count, lineage.start_after_seq, lineage.format) == (
        "lineage@13",
        3,
        13,
        "partbuild",
    )


def test_the_cancel_retention_golden_log_replays_with_exactly_its_rejections() -> None:
    """A canceled run's instance ends Canceled and a fresh one is built; retention by supersession keeps the
    instance canonical from seq 1 to 12 and drops those superseded before the cutoff (the canceled one too)."""
    state = replayed(read("cancel_retention"))
    assert [(r.seq, r.event_type) for r in state.rejections] == [
        (8, "job_run_success"),
        (9, "job_run_buffer"),
        (14, "instance_retention"),
        (15, "instance_retention"),
    ]
    assert "no longer canonical" in state.rejections[1].reason
    assert state.job_runs["r1"].state == JobRunState.CANCELED and state.wants["w"].state == WantState.SUCCESSFUL
    canceled, built = state.job_runs["r1"].instance_uuids[0], state.canonical["d/1"]
    assert canceled not in state.instances and state.instances[built].previous_uuid == canceled
    long_lived = state.instances[state.instances[state.canonical["raw/a"]].previous_uuid or ""]
    assert (long_lived.created_seq, long_lived.superseded_seq) == (1, 12) and state.superseded == [long_lived.uuid]
    assert state.dropped_instances == 2 and state.counts()["instances"]["canceled"] == 0


def test_the_checks_golden_log_keeps_each_outcomes_results_and_rejects_what_the_gate_forbids() -> None:
    """Issue 24: a success with a warning, a check error then a blocking failure of the same instance (two entries),
    and successes the fold rejects (a failed blocking or errored check, another run's instance, names twice)."""
    state = replayed(read("checks"))
    assert [r.seq for r in state.rejections] == [9, 10, 13, 14, 15, 16]
    assert "failed blocking check" in state.rejections[0].reason and "errored" in state.rejections[1].reason
    d1, d2, d3 = (state.canonical[ref] for ref in ("d/1", "d/2", "d/3"))
    assert [state.instances[uuid].state for uuid in (d1, d2, d3)] == [
        InstanceState.LIVE,
        InstanceState.FAILED,
        InstanceState.LIVE,
    ]
    assert state.instances[d2].note == "check rows_nonzero failed on d/2: 0 rows"
    assert [seq for seq, _ in state.check_results[d2]] == [7, 11] and [seq for seq, _ in state.check_results[d1]] == [5]
    ((_, warned),) = state.check_results[d1]
    assert [(name, passed, blocking) for name, passed, blocking, *_ in warned] == [
        ("rows_nonzero", True, True),
        ("url_not_null", False, False),
    ]
    assert state.wants["w"].state == WantState.FAILED


def test_the_checks_rerun_golden_log_answers_each_request_once_and_taints_on_a_blocking_failure() -> None:
    """Issue 24, checks on what is already Live: a passing rerun, a skipped one, a failing one whose taint reaches
    the weekly built from the daily; a second answer, a second pending request, a stale taint and requests for a
    source or a tainted instance are rejected."""
    state = replayed(read("checks_rerun"))
    assert [r.seq for r in state.rejections] == [9, 13, 16, 17, 18]
    reasons = [r.reason for r in state.rejections]
    assert "already answered at seq 8" in reasons[0] and "already requested (request 'q3', pending)" in reasons[1]
    assert "no longer the canonical instance" in reasons[2] and "source data" in reasons[3] and "tainted" in reasons[4]
    assert {rid: answered for rid, (_, _, answered) in state.check_requests.items()} == {"q1": 8, "q2": 11, "q3": 14}
    assert not state.pending_check_requests
    d1 = state.check_requests["q1"][0]
    wk = state.check_requests["q2"][0]
    assert [seq for seq, _ in state.check_results[d1]] == [8, 14] and wk not in state.check_results
    assert (state.instances[d1].state, state.instances[wk].state) == (InstanceState.TAINTED, InstanceState.TAINTED)
    assert state.instances[d1].note == "check rows_nonzero failed on d/1: 0 rows (checks run again, request q3)"
    assert state.instances[wk].note.startswith("upstream d/1 tainted: check rows_nonzero failed")
    assert state.canonical["d/1"] != d1 and state.instances[state.canonical["d/1"]].state == InstanceState.MISSING


def test_the_code_versions_golden_log_keeps_each_runs_version_and_rejects_one_too_long() -> None:
    """Issue 25, code versions: runs keep the version they were buffered with (none: unknown, as old logs)."""
    state = replayed(read("code_versions"))
    assert [(r.seq, r.event_type) for r in state.rejections] == [(6, "job_run_buffer")]
    assert "code_version is longer than 256 characters" in state.rejections[0].reason
    versions = {run_id: (run.state, run.code_version) for run_id, run in state.job_runs.items()}
    assert versions == {
        "r1": (JobRunState.SUCCEEDED, "v1"),
        "r2": (JobRunState.SUCCEEDED, None),
        "r3": (JobRunState.SUCCEEDED, "v2"),
        "r4": (JobRunState.FAILED, "v2"),
    }


def test_the_outcomes_golden_log_fails_partitions_alone_and_keeps_readers_on_the_last_good_version() -> None:
    """Issue 34: a run with two outputs Live and two failed each on its own (the gate refusing a success without
    the checks its buffer named), a split batch retried alone, a stale period from new source data that ends when
    the successor goes Live (retention keeping the stale instance meanwhile), a keep-serving taint withdrawn by a
    person, and a job of the withdraw policy tainted at once."""
    payloads = read("outcomes")
    state = replayed(payloads)
    assert [r.seq for r in state.rejections] == [3, 4, 15, 28]
    run = state.job_runs["r1"]
    assert run.state == JobRunState.SUCCEEDED and run.blocking_checks == ("rows",) and len(run.failed_outputs) == 2
    notes = {ref: state.instances[state.canonical[ref]].note for ref in ("d/3", "d/4")}
    assert notes == {"d/3": "check rows failed on d/3: 0 rows", "d/4": "CANNOT_READ_FILE_FOOTER: /raw/4"}
    assert state.instances[state.canonical["d/2"]].state == InstanceState.LIVE
    assert [row[-1] for _, rows in state.check_results[state.canonical["d/2"]] for row in rows] == [80]  # ms
    assert state.job_runs["r2"].split and all(state.job_runs[r].state == JobRunState.SUCCEEDED for r in ("r3", "r4"))
    # x/1: served by its first instance from seq 20 to 25 (a failed successor between), by its successor from 26.
    served = [replayed(payloads[:seq]).served_instance("x/1") for seq in (19, 20, 24, 25, 26)]
    first, successor = served[0], served[-1]
    assert first is not None and successor is not None and first.uuid != successor.uuid
    assert [instance.uuid for instance in served if instance is not None] == [first.uuid] * 4 + [successor.uuid]
    assert state.serving == {"x/1": successor.uuid}  # stale again after seq 33's new data
    assert state.served_instance("d/1") is None  # withdrawn by a person while it was stale
    y1 = state.instances[state.instances[state.canonical["y/1"]].previous_uuid]
    assert y1.state == InstanceState.TAINTED  # its job withdraws on upstream change: no stale period


def test_the_gone_judged_golden_log_gives_back_the_same_instance_and_taints_only_for_new_data() -> None:
    """Day 1 back with its version: the same instance Live again, its waiting want satisfied; day 2 with another:
    its daily stale until rebuilt; day 3's same strong bytes elsewhere: nothing tainted; retention after."""
    from golden_gone_judged import gone_judged_events

    events = gone_judged_events()
    state = replayed(read("gone_judged"))
    assert [(r.seq, r.event_type) for r in state.rejections] == [(18, "partition_gone")]
    raw1 = state.instances[state.canonical["raw/date=2026-01-01"]]
    assert raw1.created_seq == 2 and raw1.state == InstanceState.LIVE  # the instance observed first
    assert raw1.note == "found again with the version it had (seq 20)"
    assert state.wants["again"].state == WantState.SUCCESSFUL
    dailies = {day: state.instances[state.canonical[f"daily/date=2026-01-0{day}"]] for day in (1, 2, 3)}
    assert [daily.created_seq for daily in dailies.values()] == [5, 21, 11]  # only day 2's was rebuilt
    assert dailies[2].inputs == (state.canonical["raw/date=2026-01-02"],) and dailies[2].created_seq == 21
    assert all(daily.state == InstanceState.LIVE and not daily.note for daily in dailies.values())
    assert state.serving == {}
    assert state.instances[state.canonical["raw/date=2026-01-03"]].location.startswith("/moved/")
    assert len(state.instances) == 6  # day 2's and 3's first raw instances and the stale daily dropped
    assert [e.SerializeToString() for e in events] == read("gone_judged")  # the file is what the generator writes
