"""The generated history of the time-travel property test (tests/api/test_time_travel.py).

`w1_history()` is workload W1 as `examples/clicks/simulate.py` writes it (weekly wants, dep misses,
derivative wants, retryable failures and retries, taints and rebuilds), followed by what the simulator
lacks, acting on the records it made so that they change again long after they were created: source
versions (weak learned, weak new, strong learned, strong moved, strong new) tainting what was built
from them, waits for upstream (`InstancesWaitUpstream`, two levels), a canceled job run and its retry
(a cancel as older logs have it: the same instances back to Missing), a cancel as writers make it now
(the instances Canceled, fresh ones rebuilt at once), a permanent failure failing its waiters, canceled
and expired (TTL) wants, outcomes carrying quality check results (a warning, an error, a blocking failure),
retention in the middle (by creation, as older logs have it; then by when
instances stopped being canonical, as writers make it now) and at the end, a subscription's, a source
scan's and a bucket layout's changes, and a few rejected events. Every event is checked against a
strict fold as it is written: the history is valid as built.

`catalog(events)` lists what a log names (refs, instances, wants, job runs, groups, subscriptions) and,
for each seq, which of them the event at that seq may have changed the answers about: the test reads
those at the seq of a change and at the seq before it, where an inexact history would show first.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from dataclasses import dataclass
from pickle import dumps

from google.protobuf.message import Message

from partbuild.examples.clicks.simulate import DAY_MS, START_DATE, SimulationPlan, simulate
from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.fold.build_state import BuildState
from partbuild.state.fold.records import InstanceState, WantState
from partbuild.state.log.events import envelope, from_job_run, manual, system

from foldkit import subscription

PLAN = SimulationPlan(weeks=8, sites=2, fail_every=3, taint_every=4)
SMALL_PLAN = SimulationPlan(weeks=2, sites=2, fail_every=2, taint_every=2)  # every kind of change, few records
ORCHESTRATOR = system("orchestrator")
CONNECTOR = system("connector")
SCANNER = system("source-scanner", "host:1:aaaa")


class History:
    """Events of one log, each folded into a strict BuildState when written (seq = position)."""

    def __init__(self, events: list[pb.Event]) -> None:
        self.state = BuildState(strict=True)
        self.events: list[pb.Event] = []
        self.clock_ms = 0
        for event in events:
            self._fold(event, rejected=False)

    @property
    def seq(self) -> int:
        return len(self.events)

    def _fold(self, event: pb.Event, *, rejected: bool) -> None:
        self.events.append(event)
        self.clock_ms = max(self.clock_ms, event.timestamp_ms)
        reason = self.state.apply(self.seq, event)
        assert (reason is not None) == rejected, f"seq {self.seq}: {reason or 'accepted'}: {event}"

    def add(self, payload: Message, source: pb.EventSource | None = ORCHESTRATOR, *, advance_ms: int = 1_000) -> int:
        """Append an event the fold accepts; returns its seq."""
        event = envelope(payload, source=source, timestamp_ms=self.clock_ms + advance_ms, event_id=f"gen-{self.seq}")
        self._fold(event, rejected=False)
        return self.seq

    def reject(self, payload: Message, source: pb.EventSource | None = ORCHESTRATOR) -> None:
        """Append an event the fold rejects (a history holds those too)."""
        event = envelope(payload, source=source, timestamp_ms=self.clock_ms + 1_000, event_id=f"gen-{self.seq}")
        self._fold(event, rejected=True)

    def uuid(self, ref: str) -> str:
        return self.state.canonical[ref]

    def uuids(self, refs: list[str]) -> list[str]:
        return [self.uuid(ref) for ref in refs]

    def istate(self, ref: str) -> InstanceState:
        return self.state.instances[self.uuid(ref)].state

    def run(self, run_id: str, label: str, refs: list[str]) -> None:
        self.add(pb.JobRunBuffer(job_run_id=run_id, job_label=label, instance_uuids=self.uuids(refs)))

    def succeed(self, run_id: str, inputs: list[str]) -> None:
        self.add(pb.JobRunSuccess(job_run_id=run_id, input_instance_uuids=inputs), from_job_run(run_id))

    def wait(self, waiting: dict[str, list[str]]) -> None:
        """Each ref's canonical instance waits for the listed upstream refs."""
        waits = [pb.InstanceWait(instance_uuid=self.uuid(ref), upstream_refs=up) for ref, up in waiting.items()]
        self.add(pb.InstancesWaitUpstream(waits=waits))


def refs_of_week(site: int, week: int) -> tuple[str, list[str], list[str]]:
    """The weekly ref, the daily refs and the raw refs of one simulated week (as `simulate` names them)."""
    monday = START_DATE + dt.timedelta(weeks=week)
    days = [monday + dt.timedelta(days=n) for n in range(7)]
    year, number, _ = monday.isocalendar()
    weekly = f"agg/weekly_clicks/site={site}/week={year}-W{number:02d}"
    return (
        weekly,
        [f"agg/daily_clicks/site={site}/date={day.isoformat()}" for day in days],
        [f"raw/clicks/site={site}/date={day.isoformat()}" for day in days],
    )


def w1_history(plan: SimulationPlan = PLAN) -> list[pb.Event]:
    """The generated W1 history (see the module's docstring): about 390 events of PLAN, 160 of SMALL_PLAN."""
    h = History(list(simulate(plan)))
    _small_records(h, 1)
    _versions(h)
    _rebuild_with_a_canceled_run(h)
    h.add(pb.InstanceRetention(drop_superseded_created_before_seq=h.seq // 2), system("retention"))
    _small_records(h, 2)
    _upstream_fails(h, plan.weeks)
    _cancel_and_expire(h, plan.weeks)
    canceled_at = _cancel_and_rebuild_elsewhere(h, plan.weeks + 1)
    # Keeps what the cancel superseded (and whatever stopped being canonical since); drops the older ones.
    h.add(pb.InstanceRetention(drop_superseded_before_seq=canceled_at), system("retention"))
    _small_records(h, 3)
    _gone_and_restored(h)
    _checked(h, plan.weeks + 2)
    _partition_outcomes(h, plan.weeks + 3)
    weekly, _, _ = refs_of_week(1, 1)
    h.add(pb.PartitionTaint(partition_ref=weekly, reason="checked by hand", only_this_ref=True), manual("ann"))
    h.add(pb.InstanceRetention(drop_superseded_created_before_seq=h.seq), system("retention"))
    h.add(pb.ClockTick())
    return h.events


def _versions(h: History) -> None:
    """Site 0, week 1: raw days 0 and 1 observed again with versions; new data taints the daily and weekly."""
    weekly, dailies, raws = refs_of_week(0, 1)
    day0, day1 = raws[0], raws[1]
    h.add(pb.PartitionObserved(partition_ref=day0, location=f"/data/{day0}", version="size=1,mtime=1"), CONNECTOR)
    assert h.istate(dailies[0]) == InstanceState.LIVE  # learned: nothing changes
    h.add(pb.PartitionObserved(partition_ref=day0, location=f"/data/{day0}", version="size=2,mtime=2"), CONNECTOR)
    assert h.istate(dailies[0]) == h.istate(weekly) == InstanceState.MISSING  # the old ones are Tainted
    h.reject(pb.PartitionObserved(partition_ref=day0, location=f"/data/{day0}", version="size=2,mtime=2"), CONNECTOR)
    strong = {"version": "etag-1", "version_strong": True}
    h.add(pb.PartitionObserved(partition_ref=day1, location=f"/data/{day1}", **strong), CONNECTOR)  # type: ignore[arg-type]
    h.add(pb.PartitionObserved(partition_ref=day1, location=f"/moved/{day1}", **strong), CONNECTOR)  # type: ignore[arg-type]
    assert h.istate(dailies[1]) == InstanceState.LIVE  # the same bytes moved
    newer = pb.PartitionObserved(partition_ref=day1, location=f"/moved/{day1}", version="etag-2", version_strong=True)
    h.add(newer, CONNECTOR)
    assert h.istate(dailies[1]) == InstanceState.MISSING


def _rebuild_with_a_canceled_run(h: History) -> None:
    """Rebuild the tainted week: a want, waits, a derivative want, a canceled run, its retry, the weekly."""
    weekly, dailies, raws = refs_of_week(0, 1)
    h.add(pb.WantCreate(want_id="rebuild-w1", partition_refs=[weekly], sla_seconds=60), manual("analyst"))
    h.wait({weekly: dailies[:2]})
    parent = pb.WantCreate(want_id="rebuild-w1-daily", partition_refs=dailies[:2], parent_want_id="rebuild-w1")
    h.add(parent)
    h.run("rebuild-w1-daily-1", "daily", dailies[:2])
    h.add(pb.JobRunHeartbeat(job_run_id="rebuild-w1-daily-1"))
    h.add(pb.JobRunCancel(job_run_id="rebuild-w1-daily-1", reason="operator"), manual("ann"))
    h.reject(pb.JobRunCancel(job_run_id="rebuild-w1-daily-1", reason="twice"), manual("ann"))
    h.run("rebuild-w1-daily-2", "daily", dailies[:2])
    h.succeed("rebuild-w1-daily-2", h.uuids(raws[:2]))
    assert h.istate(weekly) == InstanceState.MISSING  # woken: it waited for the two dailies only
    h.run("rebuild-w1-weekly", "weekly", [weekly])
    h.succeed("rebuild-w1-weekly", h.uuids(dailies))
    assert h.state.wants["rebuild-w1"].state == WantState.SUCCESSFUL


def _upstream_fails(h: History, week: int) -> None:
    """Site 0, a new week: the weekly waits for dailies waiting for raw data; a daily run fails for good."""
    weekly, dailies, raws = refs_of_week(0, week)
    h.add(pb.WantCreate(want_id="w-new", partition_refs=[weekly], comment="next week"), manual("analyst"))
    h.wait({weekly: dailies})
    h.add(pb.WantCreate(want_id="w-new-daily", partition_refs=dailies, parent_want_id="w-new"))
    h.wait({daily: [raw] for daily, raw in zip(dailies, raws, strict=True)})
    h.add(pb.WantCreate(want_id="w-new-raw", partition_refs=raws[:4], parent_want_id="w-new-daily"))
    for raw in raws[:4]:
        h.add(pb.PartitionObserved(partition_ref=raw, location=f"/data/{raw}", version=f"v-{raw[-2:]}"), CONNECTOR)
    h.run("w-new-daily-1", "daily", dailies[:4])
    h.add(pb.JobRunFailure(job_run_id="w-new-daily-1", error_class=pb.ERROR_CLASS_RETRYABLE, retry_after_ms=5_000))
    h.run("w-new-daily-2", "daily", dailies[:4])
    failure = pb.JobRunFailure(job_run_id="w-new-daily-2", error_class=pb.ERROR_CLASS_PERMANENT, message="bad schema")
    h.add(failure, from_job_run("w-new-daily-2"))
    assert h.istate(weekly) == InstanceState.UPSTREAM_FAILED
    assert h.state.wants["w-new"].state == WantState.UPSTREAM_FAILED


def _cancel_and_expire(h: History, week: int) -> None:
    """Site 1, a new week: a want canceled while it waits; another (TTL 60 s) and its child expire."""
    weekly, dailies, _ = refs_of_week(1, week)
    h.add(pb.WantCreate(want_id="w-cancel", partition_refs=[weekly]), manual("analyst"))
    h.wait({weekly: dailies[:3]})
    h.add(pb.WantCancel(want_id="w-cancel", reason="not needed"), manual("analyst"))
    h.reject(pb.WantCancel(want_id="w-cancel", reason="twice"), manual("analyst"))
    h.add(pb.WantCreate(want_id="w-ttl", partition_refs=[weekly], ttl_seconds=60), manual("analyst"))
    h.add(pb.WantCreate(want_id="w-ttl-daily", partition_refs=dailies[:3], parent_want_id="w-ttl", ttl_seconds=60))
    h.run("w-ttl-daily-1", "daily", dailies[:1])
    h.add(pb.JobRunMissingDeps(job_run_id="w-ttl-daily-1", missing_refs=["raw/clicks/site=1/late"]))
    h.add(pb.ClockTick(), advance_ms=2 * 60_000)
    assert h.state.wants["w-ttl"].state == h.state.wants["w-ttl-daily"].state == WantState.EXPIRED
    h.reject(pb.WantCreate(want_id="w-ttl", partition_refs=[weekly]), manual("analyst"))
    late = pb.WantCreate(
        want_id="w-late", partition_refs=[weekly], data_timestamp_ms=h.clock_ms - DAY_MS, ttl_seconds=60
    )
    h.add(late, manual("analyst"))
    assert h.state.wants["w-late"].state == WantState.EXPIRED  # expired by the event that created it


def _gone_and_restored(h: History) -> None:
    """Site 1, week 1: a pass no longer finds a raw day (Gone; its daily stays Live); a want waits; it comes back."""
    _, dailies, raws = refs_of_week(1, 1)
    raw = raws[2]
    gone_uuid = h.uuid(raw)
    location = h.state.instances[gone_uuid].location
    assert location is not None and h.istate(raw) == h.istate(dailies[2]) == InstanceState.LIVE
    ended = h.add(pb.SourceScanProgress(source="raw", pass_number=2, after_key=b"d=3/x", last_key=b"d=4/x", done=True))
    gone = pb.PartitionGone(partition_ref=raw, location=location, source="raw", pass_number=2, scan_seq=ended)
    h.add(gone, SCANNER)
    h.reject(gone, SCANNER)  # no longer Live
    assert h.istate(raw) == InstanceState.GONE and h.istate(dailies[2]) == InstanceState.LIVE
    h.add(pb.WantCreate(want_id="w-gone", partition_refs=[raw]), manual("analyst"))
    assert h.state.wants["w-gone"].state == WantState.IDLE  # waits for the data
    h.add(pb.PartitionObserved(partition_ref=raw, location=location, version="restored"), CONNECTOR)
    assert h.uuid(raw) != gone_uuid and h.istate(raw) == InstanceState.LIVE
    assert h.state.wants["w-gone"].state == WantState.SUCCESSFUL


def _cancel_and_rebuild_elsewhere(h: History, week: int) -> int:
    """Site 1, a later week: a running run canceled as writers cancel now, its instances Canceled and fresh
    ones (new UUIDs, new locations) rebuilt at once; the canceled run's late success is rejected. Returns
    the cancel's seq."""
    _, dailies, _ = refs_of_week(1, week)
    h.add(pb.WantCreate(want_id="w-recancel", partition_refs=dailies[:2]), manual("analyst"))
    h.run("w-recancel-1", "daily", dailies[:2])
    h.add(pb.JobRunHeartbeat(job_run_id="w-recancel-1"), from_job_run("w-recancel-1"))
    canceled = h.uuids(dailies[:2])
    cancel = pb.JobRunCancel(job_run_id="w-recancel-1", reason="operator", replace_instances=True)
    canceled_at = h.add(cancel, manual("ann"))
    assert [h.state.instances[uuid].state for uuid in canceled] == [InstanceState.CANCELED] * 2
    assert not set(canceled) & set(h.uuids(dailies[:2]))
    h.reject(pb.JobRunBuffer(job_run_id="w-recancel-stale", job_label="daily", instance_uuids=canceled))
    h.run("w-recancel-2", "daily", dailies[:2])
    h.reject(pb.JobRunSuccess(job_run_id="w-recancel-1"), from_job_run("w-recancel-1"))
    h.succeed("w-recancel-2", [])
    assert h.state.wants["w-recancel"].state == WantState.SUCCESSFUL
    return canceled_at


def check(name: str, passed: bool, *, blocking: bool = True, errored: bool = False, **metrics: float) -> pb.CheckResult:
    """A check's result as the gate records it (orchestrator/checks.py)."""
    return pb.CheckResult(
        name=name, passed=passed, blocking=blocking, errored=errored, description=f"{name}: {passed}", metrics=metrics
    )


def _checked(h: History, week: int) -> None:
    """Site 0, a later week: outcomes with check results (issue 24). A success with a warning (its instance
    Live); a check that errored (retryable), then the retry's blocking failure (permanent), checking the same
    instance twice; a success carrying a failed blocking check is rejected."""
    _, dailies, _ = refs_of_week(0, week)
    h.add(pb.WantCreate(want_id="w-checks", partition_refs=dailies[:2]), manual("analyst"))
    warned, failed = h.uuids(dailies[:2])
    h.run("w-checks-1", "daily", dailies[:1])
    bad = pb.InstanceChecks(instance_uuid=warned, results=[check("rows_nonzero", False)])
    h.reject(pb.JobRunSuccess(job_run_id="w-checks-1", checks=[bad]), from_job_run("w-checks-1"))
    results = [check("rows_nonzero", True, rows=12), check("url_not_null", False, blocking=False, nulls=3)]
    passed = pb.JobRunSuccess(
        job_run_id="w-checks-1", checks=[pb.InstanceChecks(instance_uuid=warned, results=results)]
    )
    h.add(passed, from_job_run("w-checks-1"))
    assert h.state.instances[warned].state == InstanceState.LIVE
    h.run("w-checks-2", "daily", dailies[1:2])
    errored = pb.InstanceChecks(instance_uuid=failed, results=[check("rows_nonzero", False, errored=True)])
    message = "check rows_nonzero errored: ValueError: no such column"
    retry = pb.JobRunFailure(job_run_id="w-checks-2", error_class=pb.ERROR_CLASS_RETRYABLE, message=message)
    retry.checks.append(errored)
    h.add(retry, from_job_run("w-checks-2"))
    h.run("w-checks-3", "daily", dailies[1:2])
    blocked = pb.InstanceChecks(instance_uuid=failed, results=[check("rows_nonzero", False, rows=0)])
    message = f"check rows_nonzero failed on {dailies[1]}: 0 rows"
    final = pb.JobRunFailure(job_run_id="w-checks-3", error_class=pb.ERROR_CLASS_PERMANENT, message=message)
    final.checks.append(blocked)
    h.add(final, from_job_run("w-checks-3"))
    assert h.state.instances[failed].state == InstanceState.FAILED
    assert [seq for seq, _ in h.state.check_results[failed]] == [h.seq - 2, h.seq]


def _partition_outcomes(h: History, week: int) -> None:
    """Site 1, a later week (issue 34): a batch where one output fails its check and one fails on its own, a
    batch split after it failed as a whole, then a stale period: new raw data leaves the daily and the weekly
    built from it serving, stale, while the daily's successor fails, until the successor goes Live; at last a
    person's taint withdraws the weekly still serving."""
    weekly, dailies, raws = refs_of_week(1, week)
    for raw in raws[:4]:
        h.add(pb.PartitionObserved(partition_ref=raw, location=f"/data/{raw}", version="v1"), CONNECTOR)
    h.add(pb.WantCreate(want_id="w-outcomes", partition_refs=dailies[:4]), manual("analyst"))
    uuids = h.uuids(dailies[:4])
    buffer = pb.JobRunBuffer(job_run_id="w-out-1", job_label="daily", instance_uuids=uuids, serve_stale=True)
    buffer.blocking_checks.append("rows_nonzero")
    h.add(buffer)
    blocked = pb.InstanceChecks(instance_uuid=uuids[2], results=[check("rows_nonzero", False, rows=0)])
    passing = [
        pb.InstanceChecks(instance_uuid=uuid, results=[check("rows_nonzero", True, rows=5)]) for uuid in uuids[:2]
    ]
    h.reject(pb.JobRunSuccess(job_run_id="w-out-1", checks=passing), from_job_run("w-out-1"))  # the gate's
    failures = [
        pb.OutputFailure(instance_uuid=uuids[2], error_class=pb.ERROR_CLASS_PERMANENT, message="check rows_nonzero"),
        pb.OutputFailure(instance_uuid=uuids[3], error_class=pb.ERROR_CLASS_RETRYABLE, message="corrupt footer"),
    ]
    success = pb.JobRunSuccess(job_run_id="w-out-1", checks=[*passing, blocked], failed_outputs=failures)
    for uuid, raw in zip(uuids[:2], raws[:2], strict=True):  # each output read its own day
        success.outputs.add(instance_uuid=uuid, location=f"/w/{uuid}", input_instance_uuids=[h.uuid(raw)])
    h.add(success, from_job_run("w-out-1"))
    h.add(pb.WantCreate(want_id="w-outcomes-2", partition_refs=dailies[4:]), manual("analyst"))
    h.add(pb.JobRunBuffer(job_run_id="w-out-2", job_label="daily", instance_uuids=h.uuids(dailies[4:])))
    split = pb.JobRunFailure(
        job_run_id="w-out-2", error_class=pb.ERROR_CLASS_RETRYABLE, message="o1.parquet", split=True
    )
    h.add(split, from_job_run("w-out-2"))
    for n, daily in enumerate(dailies[4:]):
        h.add(pb.JobRunBuffer(job_run_id=f"w-out-alone-{n}", job_label="daily", instance_uuids=[h.uuid(daily)]))
        h.succeed(f"w-out-alone-{n}", [])
    h.add(pb.WantCreate(want_id="w-outcomes-weekly", partition_refs=[weekly]), manual("analyst"))
    h.add(
        pb.JobRunBuffer(
            job_run_id="w-out-weekly", job_label="weekly", instance_uuids=[h.uuid(weekly)], serve_stale=True
        )
    )
    h.succeed("w-out-weekly", h.uuids(dailies[:2]))
    stale_daily = h.uuid(dailies[0])
    h.add(pb.PartitionObserved(partition_ref=raws[0], location=f"/data/{raws[0]}", version="v2"), CONNECTOR)
    assert h.state.serving == {dailies[0]: stale_daily, weekly: h.state.serving[weekly]}
    h.add(pb.WantCreate(want_id="w-outcomes-3", partition_refs=dailies[:1]), manual("analyst"))
    h.add(
        pb.JobRunBuffer(job_run_id="w-out-3", job_label="daily", instance_uuids=h.uuids(dailies[:1]), serve_stale=True)
    )
    h.add(pb.JobRunFailure(job_run_id="w-out-3", error_class=pb.ERROR_CLASS_RETRYABLE, message="late"))
    h.add(
        pb.JobRunBuffer(job_run_id="w-out-4", job_label="daily", instance_uuids=h.uuids(dailies[:1]), serve_stale=True)
    )
    h.succeed("w-out-4", h.uuids(raws[:1]))
    assert list(h.state.serving) == [weekly]
    h.add(pb.PartitionTaint(partition_ref=weekly, reason="wrong totals"), manual("ann"))
    assert not h.state.serving


def _small_records(h: History, step: int) -> None:
    """A subscription, a source scan and a bucket layout change, a little at each step."""
    if step == 1:
        h.add(subscription("hooks"), manual("ann"))
        first = pb.SourceScanProgress(source="raw", pass_number=1, last_key=b"d=1/x", items=3, partitions=1)
        h.add(first, SCANNER)
        h.add(pb.BucketLayout(namespace="partbuild", bucket_total=2), manual("ops"))
    elif step == 2:
        h.add(pb.SubscriptionChange(name="hooks", action=pb.SUBSCRIPTION_ACTION_PAUSE, reason="maintenance"))
        h.add(pb.SourceScanProgress(source="raw", pass_number=1, after_key=b"d=1/x", last_key=b"d=2/x", done=True))
        h.add(pb.SourceScanRequest(source="raw", reason="rewritten"), manual("ann"))
        h.add(pb.BucketLayout(namespace="partbuild", bucket_total=4), manual("ops"))
    else:
        h.add(pb.SubscriptionChange(name="hooks", action=pb.SUBSCRIPTION_ACTION_RESUME), manual("ann"))
        h.add(pb.SubscriptionReshard(name="hooks", shard_count=4), manual("ann"))
        h.add(subscription("audit", format="cloudevents"), manual("ann"))
        h.add(pb.SubscriptionChange(name="hooks", action=pb.SUBSCRIPTION_ACTION_DELETE), manual("ann"))
        h.add(pb.SourceScanProgress(source="raw", pass_number=2, last_key=b"d=3/x", items=1), SCANNER)


# ----------------------------------------------------------------------------- what a log names, what changes

Key = tuple[str, str]  # (kind, id): kinds "ref", "uuid", "want", "run", "group", "subscription"
WAITING_DEPTH = 4  # how deep a want's detail follows what its refs wait for (api/service/wants.py)
LINEAGE_DEPTH = 2  # the deepest lineage the test reads


@dataclass(frozen=True)
class Catalog:
    """Every id a log ever had, by kind; what each event may have changed; what retention dropped."""

    ids: dict[str, list[str]]  # kind -> ids, sorted
    changed: list[frozenset[Key]]  # by seq (0: nothing): ids whose answers the event may have changed
    moved: list[frozenset[Key]]  # by seq: the records (and canonical pointers) the event did change
    roots: dict[str, str]  # want id -> the id of its root want
    labels: list[str]  # job labels, sorted


@dataclass
class _Seen:
    """What the catalog remembers of an instance after it changed (kept after retention drops it)."""

    ref: str
    neighbours: set[str]  # every input and consumer it ever had
    attempts: tuple[str, ...]


def catalog(events: list[pb.Event]) -> Catalog:
    """Fold `events` once, comparing every record before and after each event (records change in place)."""
    state = BuildState()
    prints: dict[Key, object] = {}
    seen: dict[str, _Seen] = {}
    changed: list[frozenset[Key]] = [frozenset()]
    moved: list[frozenset[Key]] = [frozenset()]
    named: list[set[str]] = [set()]
    for seq, event in enumerate(events, 1):
        waiters_before = {ref: set(uuids) for ref, uuids in state.waiters.items()}
        state.apply(seq, event)
        now = _prints(state)
        keys = {key for key in now.keys() | prints.keys() if now.get(key) != prints.get(key)}
        prints = now
        moved.append(frozenset(keys))
        for kind, uuid in keys:
            instance = state.instances.get(uuid) if kind == "uuid" else None
            if instance is not None:
                remembered = seen.setdefault(uuid, _Seen(instance.ref, set(), ()))
                remembered.neighbours.update(instance.inputs, instance.consumers or ())
                remembered.attempts = tuple(instance.attempts)
        affected: set[Key] = set()
        for key in keys:
            affected |= _affected(state, key, seen, waiters_before)
        changed.append(frozenset(affected))
        named.append(set(_strings(event)))
    ids = {
        "ref": sorted({remembered.ref for remembered in seen.values()} | set(state.canonical)),
        "uuid": sorted(seen),
        "want": sorted(state.wants),
        "run": sorted(state.job_runs),
        "group": sorted(state.groups),
        "subscription": sorted(state.subscriptions),
    }
    kinds = {ident: kind for kind, values in ids.items() for ident in values}
    # An event also "changes" what it names, even when rejected: a history must not record a rejected event.
    changed = [
        frozenset(keys | {(kinds[text], text) for text in strings if text in kinds})
        for keys, strings in zip(changed, named, strict=True)
    ]
    return Catalog(
        ids=ids,
        changed=changed,
        moved=moved,
        roots={want_id: want.root_want_id for want_id, want in state.wants.items()},
        labels=sorted({run.job_label for run in state.job_runs.values()}),
    )


def _prints(state: BuildState) -> dict[Key, object]:
    """Each record's values as bytes (records change in place), and each canonical pointer."""
    prints: dict[Key, object] = {("ref", ref): uuid for ref, uuid in state.canonical.items()}
    for kind, table in (("uuid", state.instances), ("want", state.wants), ("run", state.job_runs)):
        prints.update(((kind, ident), dumps(record.digest_values())) for ident, record in table.items())
    prints.update((("group", name), repr(group)) for name, group in state.groups.items())  # immutable records
    prints.update((("subscription", name), dumps(sub.digest_values())) for name, sub in state.subscriptions.items())
    for request_id, (uuid, _, answered) in state.check_requests.items():  # an instance shows its checks requests
        prints[("uuid", uuid)] = (prints.get(("uuid", uuid)), request_id, answered)
    for ref, uuid in state.serving.items():  # a stale instance still serving shows its successor
        prints[("uuid", uuid)] = (prints.get(("uuid", uuid)), "serving", prints[("uuid", state.canonical[ref])])
    return prints


def _affected(state: BuildState, key: Key, seen: dict[str, _Seen], waiters_before: dict[str, set[str]]) -> set[Key]:
    """The ids whose answers show the record `key`: itself, and what reads it through a relation."""
    kind, ident = key
    affected = {key}
    if kind == "ref":  # the canonical pointer moved: the wants naming the ref show its new instance
        affected.update(("want", want_id) for want_id in state.wants_by_ref.get(ident, ()))
    elif kind == "want":  # a want's tree shows its descendants' states
        parent = state.wants[ident].parent_want_id
        while parent is not None:
            affected.add(("want", parent))
            parent = state.wants[parent].parent_want_id
    elif kind == "uuid" and ident in seen:
        remembered = seen[ident]
        affected.add(("ref", remembered.ref))
        affected.update(("run", run_id) for run_id in remembered.attempts)  # a run shows its instances' refs
        near = {ident}
        for _ in range(LINEAGE_DEPTH):  # lineages show their nodes' states
            near |= {other for uuid in near if uuid in seen for other in seen[uuid].neighbours}
        affected.update(("uuid", uuid) for uuid in near)
        refs = {remembered.ref}
        for _ in range(WAITING_DEPTH):  # a want's detail shows what its refs wait for, and so on
            waiting = {u for ref in refs for u in (*state.waiters.get(ref, ()), *waiters_before.get(ref, ()))}
            refs |= {seen[uuid].ref if uuid in seen else state.instances[uuid].ref for uuid in waiting}
        affected.update(("want", want_id) for ref in refs for want_id in state.wants_by_ref.get(ref, ()))
    return affected


def _strings(message: Message) -> Iterator[str]:
    """Every string field of a protobuf message, nested ones included."""
    for field, value in message.ListFields():
        values = value if field.is_repeated else [value]
        for item in values:
            if isinstance(item, str):
                yield item
            elif isinstance(item, Message):
                yield from _strings(item)
