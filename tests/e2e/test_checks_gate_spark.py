"""The quality gate on real Spark (issue 24): an output whose blocking check fails never becomes Live.

A small graph like W1's: `raw/d={n}` source data (parquet the test writes), a `daily` job copying it
with its checks (`rows_nonzero`, blocking; `url_not_null`, a warning), and a `weekly` job reading its
dailies. The orchestrator runs in a thread behind a real uvicorn server (`orchestrated_api`), on the
session's local SparkSession; the test asks and reads over HTTP and through the CLI, as a user would.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from partbuild.orchestrator.checks import Check, CheckContext, CheckOutcome, no_nulls, row_count_at_least
from partbuild.orchestrator.context import JobContext
from partbuild.orchestrator.graph import Graph, Job, Partition, RetryPolicy, SourceDataset
from partbuild.state.database import Database

from clikit import run_cli
from httpkit import API, WANTS, canonical, ok, want
from serverkit import ApiServer, orchestrated_api
from waitkit import wait_for

WEEK = ("daily/d=1", "daily/d=2")


class Seen:
    """What the weekly job was handed: the input locations of every run."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.weekly_inputs: list[str] = []

    def add(self, locations: list[str]) -> None:
        with self.lock:
            self.weekly_inputs.extend(locations)


def write_raw(spark: Any, root: Path, n: int, urls: list[str | None]) -> None:
    """Raw day n: one row per url (an empty list writes an empty partition, schema kept)."""
    frame = spark.createDataFrame([(url,) for url in urls], "url string")
    frame.coalesce(1).write.mode("overwrite").parquet(str(root / f"d={n}"))


def check_graph(root: Path, seen: Seen, flaky_marker: Path) -> Graph:
    def locate(partition: Partition) -> str | None:
        location = root / f"d={partition['n']}"
        return str(location) if (location / "_SUCCESS").exists() else None

    def run_daily(ctx: JobContext) -> None:
        for target, location in zip(
            ctx.outputs, ctx.inputs(f"raw/d={t.partition['n']}" for t in ctx.outputs), strict=True
        ):
            ctx.spark.read.parquet(location).coalesce(1).write.mode("overwrite").parquet(target.location)

    def run_weekly(ctx: JobContext) -> None:
        locations = ctx.inputs(WEEK)
        seen.add(locations)
        for target in ctx.outputs:
            ctx.spark.read.parquet(*locations).coalesce(1).write.mode("overwrite").parquet(target.location)

    def flaky(context: CheckContext) -> CheckOutcome:
        """Raises the first time it sees daily/d=4, passes after."""
        if context.ref == "daily/d=4" and not flaky_marker.exists():
            flaky_marker.touch()
            raise RuntimeError("the metastore was unreachable")
        return CheckOutcome(True, "reachable")

    daily_checks = [
        row_count_at_least(1, name="rows_nonzero"),
        no_nulls("url", name="url_not_null", blocking=False),
        Check("flaky", flaky, blocking=False),
    ]
    return Graph(
        [
            Job(
                "daily",
                ["daily/d={n:int}"],
                run_daily,
                inputs=lambda p: [f"raw/d={p['n']}"],
                checks=daily_checks,
                retry=RetryPolicy(max_attempts=3, backoff_ms=0),
                max_concurrency=2,
            ),
            Job("weekly", ["weekly/w={w:int}"], run_weekly, inputs=lambda p: list(WEEK)),
        ],
        [SourceDataset("raw", "raw/d={n:int}", locate=locate)],
    )


@pytest.fixture
def gated(sqlite_url: str, tmp_path: Path, spark: Any) -> Iterator[tuple[ApiServer, Seen, Path]]:
    raw = tmp_path / "raw"
    seen = Seen()
    with Database.open(sqlite_url, auto_upgrade=True) as db:
        graph = check_graph(raw, seen, tmp_path / "flaky-raised")
        with orchestrated_api(db, graph, tmp_path / "warehouse", spark) as api:
            yield api, seen, raw


def ended(found: dict[str, Any]) -> dict[str, Any] | None:
    """An instance answer once its build ended (no longer waiting or building), else None."""
    return None if found["state"] in ("missing", "building", "upstream_building", "up_for_retry") else found


def wait_for_want(api: ApiServer, want_id: str, *states: str) -> dict[str, Any]:
    def ended() -> dict[str, Any] | None:
        got = ok(api.client.get(f"{WANTS}/{want_id}"))
        return got if got["state"] in states else None

    return wait_for(f"want {want_id} to end {states}", ended, 120)  # type: ignore[no-any-return]


def instance(api: ApiServer, uuid: str) -> dict[str, Any]:
    return ok(api.client.get(f"{API}/instances/{uuid}"))  # type: ignore[no-any-return]


def checks_by_name(answer: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {check["name"]: check for check in answer["checks"]}


def test_a_blocking_check_keeps_bad_data_from_going_live_and_a_fixed_rebuild_passes(
    gated: tuple[ApiServer, Seen, Path], spark: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    api, seen, raw = gated
    write_raw(spark, raw, 1, ["/a", "/b", None])  # a null url: a warning, not a block
    write_raw(spark, raw, 2, [])  # empty: rows_nonzero fails
    want(api.client, ["weekly/w=1"], want_id="week")
    wait_for_want(api, "week", "upstream_failed", "failed")

    bad = canonical(api.client, "daily/d=2")
    assert bad["state"] == "failed"
    assert bad["note"].startswith("check rows_nonzero failed on daily/d=2: 0 rows")
    failed = checks_by_name(bad)["rows_nonzero"]
    assert (failed["passed"], failed["blocking"], failed["errored"], failed["metrics"]) == (
        False,
        True,
        False,
        {"rows": 0},
    )
    assert canonical(api.client, "weekly/w=1")["state"] == "upstream_failed"
    # The weekly never ran: no job was handed the location of the instance that failed its check.
    assert seen.weekly_inputs == [] and bad["location"] not in seen.weekly_inputs
    run = ok(api.client.get(f"{API}/job-runs/{bad['attempts'][-1]}"))
    assert run["state"] == "failed" and "check rows_nonzero failed" in run["error_message"]

    # The warning: daily/d=1 goes Live, its non-blocking failure recorded and shown over HTTP and the CLI. Its run
    # may still be going when the want fails (the failed daily ends the want), so wait for its outcome.
    warned = wait_for("daily/d=1 to end", lambda: ended(canonical(api.client, "daily/d=1")), 120)
    assert warned["state"] == "live"
    by_name = checks_by_name(warned)
    assert by_name["url_not_null"]["passed"] is False and by_name["url_not_null"]["blocking"] is False
    assert by_name["url_not_null"]["metrics"] == {"nulls.url": 1} and by_name["rows_nonzero"]["passed"]
    assert by_name["rows_nonzero"]["seq"] == warned["updated_seq"]
    code, out, _ = run_cli(capsys, "partitions", "instance", warned["uuid"], "--server", api.url)
    assert code == 0 and "warning url_not_null" in out and "passed rows_nonzero" in out
    code, out, _ = run_cli(capsys, "partitions", "instance", bad["uuid"], "--server", api.url, "--json")
    assert code == 0 and json.loads(out)["checks"] == bad["checks"]
    # And in the run's answer, the web UI's instance page and /metrics (issue 24's "seen everywhere").
    (recorded,) = ok(api.client.get(f"{API}/job-runs/{warned['built_by']}"))["checks"]
    assert recorded["instance_uuid"] == warned["uuid"] and recorded["checks"] == warned["checks"]
    assert {c["name"]: c["result"] for c in warned["checks"]}["url_not_null"] == "warning"
    code, out, _ = run_cli(capsys, "runs", "show", warned["built_by"], "--server", api.url)
    assert code == 0 and "warning url_not_null" in out
    page = api.client.get(f"/instances/{warned['uuid']}").text
    assert f'data-name="url_not_null" data-result="warning" data-seq="{warned["updated_seq"]}"' in page
    counted = r'^partbuild_check_results_total\{check="url_not_null",job="daily",result="warning"\} [1-9]'
    assert re.search(counted, api.client.get("/metrics").text, re.M)

    # Fix the data, want again: a new instance passes its checks, goes Live, and the weekly reads it.
    write_raw(spark, raw, 2, ["/c"])
    want(api.client, ["weekly/w=1"], want_id="week-again")
    wait_for_want(api, "week-again", "successful")
    fixed = canonical(api.client, "daily/d=2")
    assert fixed["uuid"] != bad["uuid"] and fixed["state"] == "live" and fixed["previous_uuid"] == bad["uuid"]
    assert checks_by_name(fixed)["rows_nonzero"]["metrics"] == {"rows": 1}
    assert seen.weekly_inputs == [warned["location"], fixed["location"]]
    assert instance(api, bad["uuid"])["state"] == "failed"  # kept in history, never Live
    weekly = canonical(api.client, "weekly/w=1")
    assert weekly["state"] == "live" and weekly["checks"] == [] and weekly["inputs"] == [warned["uuid"], fixed["uuid"]]


def test_a_check_that_raises_is_a_retryable_check_error_and_the_retry_passes(
    gated: tuple[ApiServer, Seen, Path], spark: Any
) -> None:
    api, _, raw = gated
    write_raw(spark, raw, 4, ["/a"])
    want(api.client, ["daily/d=4"], want_id="day")
    wait_for_want(api, "day", "successful")
    live = canonical(api.client, "daily/d=4")
    assert live["state"] == "live" and len(live["attempts"]) == 2
    first = ok(api.client.get(f"{API}/job-runs/{live['attempts'][0]}"))
    assert first["state"] == "failed" and first["error_class"] == "retryable"
    assert first["error_message"] == "check flaky errored on daily/d=4: RuntimeError: the metastore was unreachable"
    assert {check["name"]: check["passed"] for check in live["checks"]} == {
        "rows_nonzero": True,
        "url_not_null": True,
        "flaky": True,
    }
    # As of the failed attempt's outcome, the instance shows the errored check (the results so far).
    then = ok(api.client.get(f"{API}/instances/{live['uuid']}", params={"as_of_seq": first["updated_seq"]}))
    assert then["state"] == "up_for_retry"
    errored = checks_by_name(then)["flaky"]
    assert errored["errored"] and not errored["passed"] and "RuntimeError" in errored["description"]
    assert [check["name"] for check in then["checks"]] == ["rows_nonzero", "url_not_null", "flaky"]
