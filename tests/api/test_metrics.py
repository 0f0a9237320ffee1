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
from partbuild.state.database import Database

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
