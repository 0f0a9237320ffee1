"""Prometheus metrics of subscriptions: delivered, retried, dead-lettered, queued, lag."""

from __future__ import annotations

import re
import time
from pathlib import Path

from prometheus_client import generate_latest

from partbuild.api.models.subscriptions import SubscriptionRequest
from partbuild.api.models.wants import WantRequest
from partbuild.api.service import Service
from partbuild.api.webhook_payloads import render
from partbuild.orchestrator.delivery.deliverer import Deliverer
from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.database import Database
from partbuild.state.log.events import envelope

from golden_log import check_events, checks_rerun_events
from receiverkit import Receiver, failing_groups

SECRET = "whsec_" + "c2VjcmV0LXNlY3JldC1zZWNyZXQ="


def metric(text: str, name: str, labels: str) -> float:
    found = re.search(rf"^{name}\{{{labels}\}} (\S+)$", text, re.M)
    assert found is not None, f"{name}{{{labels}}} not in the metrics"
    return float(found.group(1))


def test_metrics_follow_deliveries_failures_and_lag(tmp_path: Path) -> None:
    with (
        Database.open(f"sqlite:///{tmp_path / 'pb.db'}") as db,
        Receiver(SECRET, failing_groups({"bad/1"}, 400)) as hook,
    ):
        service = Service(db)
        request = SubscriptionRequest(name="hooks", endpoint=hook.url, secret=SECRET)
        service.create_subscription(request)
        service.pause_subscription("hooks")
        for n in range(3):
            service.create_want(WantRequest(refs=[f"good/{n}", "bad/1"]))
        paused = generate_latest(service.registry).decode()
        assert metric(paused, "partbuild_subscription_lag_events", 'subscription="hooks"') == 4  # the pause and 3 wants
        service.resume_subscription("hooks")
        deliverer = Deliverer(service.live, db.deliveries, render).start()
        try:
            hook.wait_for(lambda got: {r.group for r in got} >= {"good/0", "good/1", "good/2"}, timeout_s=20)
            service.live.catch_up()
            for _ in range(200):
                text = generate_latest(service.registry).decode()
                if metric(text, "partbuild_subscription_lag_events", 'subscription="hooks"') == 0:
                    break
                time.sleep(0.05)
        finally:
            deliverer.stop()
    labels = 'subscription="hooks"'
    assert metric(text, "partbuild_subscription_delivered_total", labels) == 3
    # Every letter counts, the failed head and the two that followed it into the DLQ.
    assert metric(text, "partbuild_subscription_dead_lettered_total", labels) == 3
    assert metric(text, "partbuild_subscription_queued", 'queue="dlq",subscription="hooks"') == 3
    assert metric(text, "partbuild_subscription_queued", 'queue="rq",subscription="hooks"') == 0
    assert metric(text, "partbuild_subscription_lag_events", labels) == 0


def _check_counts(service: Service) -> dict[tuple[str, str, str], float]:
    text = generate_latest(service.registry).decode()
    found = re.findall(
        r'^partbuild_check_results_total\{check="([^"]+)",job="([^"]+)",result="([^"]+)"\} (\S+)$', text, re.M
    )
    return {(job, check, result): float(count) for check, job, result, count in found}


def test_check_results_are_counted_once_per_outcome_by_job_check_and_result(tmp_path: Path) -> None:
    """Over the checks golden log: nothing while r1 runs; then each outcome's checks once, however often scraped;
    a restarted process counts the same; a later outcome adds its own."""
    events = check_events()
    url = f"sqlite:///{tmp_path / 'pb.db'}"
    expected = {
        ("d", "rows_nonzero", "passed"): 2.0,  # r1 and r4
        ("d", "url_not_null", "warning"): 1.0,  # r1: Live with a warning
        ("d", "rows_nonzero", "errored"): 1.0,  # r2
        ("d", "rows_nonzero", "failed"): 1.0,  # r3
        ("d", "url_not_null", "passed"): 1.0,  # r3
    }
    with Database.open(url) as db:
        service = Service(db)
        service.log.append(events[:4])  # r1 buffered and heartbeating
        service.refresh()
        assert _check_counts(service) == {}
        service.log.append(events[4:])
        service.refresh()
        assert _check_counts(service) == expected
        assert _check_counts(service) == expected  # a second scrape counts nothing again
    with Database.open(url) as db:
        restarted = Service(db)
        assert _check_counts(restarted) == expected
        restarted.log.append([envelope(pb.WantCreate(want_id="w2", partition_refs=["e/1"]))])
        restarted.refresh()
        e1 = restarted.state.canonical["e/1"]
        restarted.log.append([envelope(pb.JobRunBuffer(job_run_id="r5", job_label="e", instance_uuids=[e1]))])
        restarted.refresh()
        assert _check_counts(restarted) == expected  # r5 runs: nothing yet
        warned = pb.CheckResult(name="url_not_null", passed=False, blocking=False)
        checked = pb.InstanceChecks(instance_uuid=e1, results=[warned])
        restarted.log.append([envelope(pb.JobRunSuccess(job_run_id="r5", checks=[checked]))])
        restarted.refresh()
        assert restarted.instance(e1).state == "live"
        assert _check_counts(restarted) == {**expected, ("e", "url_not_null", "warning"): 1.0}


def test_checks_run_again_are_counted_once_each_when_answered(tmp_path: Path) -> None:
    """Over the checks-rerun golden log: q1 passes, q2 skips (nothing), q3 fails; a pending request counts nothing."""
    events = checks_rerun_events()
    with Database.open(f"sqlite:///{tmp_path / 'pb.db'}") as db:
        service = Service(db)
        service.log.append(events[:7])  # d/1 and wk/1 built without checks; q1 asked, not answered
        service.refresh()
        assert _check_counts(service) == {}
        service.log.append(events[7:])
        service.refresh()
        expected = {("d", "rows_nonzero", "passed"): 1.0, ("d", "rows_nonzero", "failed"): 1.0}
        assert _check_counts(service) == expected
        assert _check_counts(service) == expected  # scraped again: nothing counted twice


def test_check_results_stay_counted_after_retention_drops_the_instances_they_were_recorded_on(
    tmp_path: Path,
) -> None:
    """A counter never goes back: the fold keeps the tally, so a process started after retention dropped a
    checked instance (and its results) counts what one started before it counted."""
    url = f"sqlite:///{tmp_path / 'pb.db'}"
    with Database.open(url) as db:
        service = Service(db)
        service.log.append(check_events())
        service.refresh()
        counted = _check_counts(service)
        d1 = service.state.canonical["d/1"]
        assert service.state.check_results[d1] and counted[("d", "url_not_null", "warning")] == 1.0
        taint = pb.PartitionTaint(partition_ref="d/1", reason="rewritten", instance_uuid=d1)
        tainted = service.log.append([envelope(taint)]).last_seq
        service.log.append([envelope(pb.InstanceRetention(drop_superseded_before_seq=tainted + 1))])
        service.refresh()
        assert d1 not in service.state.instances and d1 not in service.state.check_results
        assert _check_counts(service) == counted
    with Database.open(url) as db:
        assert _check_counts(Service(db)) == counted
