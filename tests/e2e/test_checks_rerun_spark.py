"""Checks run again on what is already Live, on real Spark (issue 24, item 3).

A small graph like W1's: `raw/d={n}` source data (parquet the test writes), a `daily` job copying it, a
`weekly` job reading both dailies. Everything goes Live under a graph whose daily checks only that it is not
empty; then an orchestrator with a new graph, where the daily must hold at least 3 rows (a changed check),
answers the requests made over HTTP: the daily of 3 rows passes and stays Live; the daily of 2 rows is tainted
naming the check, and so is the weekly built from it. The orchestrator runs in a thread behind a real uvicorn
server (`orchestrated_api`) on the session's local SparkSession.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from partbuild.orchestrator.checks import Check, row_count_at_least
from partbuild.orchestrator.context import JobContext
from partbuild.orchestrator.graph import Graph, Job, Partition, SourceDataset
from partbuild.state.database import Database

from httpkit import API, WANTS, canonical, ok, problem, want
from serverkit import ApiServer, orchestrated_api
from waitkit import wait_for

WEEK = ("daily/d=1", "daily/d=2")


def write_raw(spark: Any, root: Path, n: int, urls: list[str]) -> None:
    frame = spark.createDataFrame([(url,) for url in urls], "url string")
    frame.coalesce(1).write.mode("overwrite").parquet(str(root / f"d={n}"))


def rerun_graph(root: Path, daily_checks: Sequence[Check]) -> Graph:
    def locate(partition: Partition) -> str | None:
        location = root / f"d={partition['n']}"
        return str(location) if (location / "_SUCCESS").exists() else None

    def run_daily(ctx: JobContext) -> None:
        for target in ctx.outputs:
            source = ctx.input(f"raw/d={target.partition['n']}")
            ctx.spark.read.parquet(source).coalesce(1).write.mode("overwrite").parquet(target.location)

    def run_weekly(ctx: JobContext) -> None:
        locations = ctx.inputs(WEEK)
        for target in ctx.outputs:
            ctx.spark.read.parquet(*locations).coalesce(1).write.mode("overwrite").parquet(target.location)

    return Graph(
        [
            Job("daily", ["daily/d={n:int}"], run_daily, inputs=lambda p: [f"raw/d={p['n']}"], checks=daily_checks),
            Job("weekly", ["weekly/w={w:int}"], run_weekly, inputs=lambda p: list(WEEK)),
        ],
        [SourceDataset("raw", "raw/d={n:int}", locate=locate)],
    )


def instance(api: ApiServer, uuid: str) -> dict[str, Any]:
    return ok(api.client.get(f"{API}/instances/{uuid}"))  # type: ignore[no-any-return]


def rechecked(api: ApiServer, uuid: str) -> dict[str, Any]:
    """Ask for the instance's checks to run again; its answer once an orchestrator answered."""
    asked = ok(api.client.post(f"{API}/instances/{uuid}/checks", json={"comment": "the check changed"}), 202)

    def answered() -> dict[str, Any] | None:
        found = ok(api.client.get(asked["link"]))
        done = [r for r in found["checks_requests"] if r["request_id"] == asked["request_id"] and r["answered_seq"]]
        return found if done else None

    return wait_for(f"checks request {asked['request_id']} to be answered", answered, 120)  # type: ignore[no-any-return]


def test_a_changed_blocking_check_run_again_taints_what_fails_it_and_what_was_built_from_it(
    sqlite_url: str, tmp_path: Path, spark: Any
) -> None:
    raw, warehouse = tmp_path / "raw", tmp_path / "warehouse"
    write_raw(spark, raw, 1, ["/a", "/b", "/c"])
    write_raw(spark, raw, 2, ["/a", "/b"])
    with Database.open(sqlite_url, auto_upgrade=True) as db:
        with orchestrated_api(
            db, rerun_graph(raw, [row_count_at_least(1, name="rows_nonzero")]), warehouse, spark
        ) as api:
            want(api.client, ["weekly/w=1"], want_id="week")
            wait_for("the week to be built", lambda: ok(api.client.get(f"{WANTS}/week"))["state"] == "successful", 120)
            live = {ref: canonical(api.client, ref) for ref in (*WEEK, "weekly/w=1")}
        assert {ref: found["state"] for ref, found in live.items()} == dict.fromkeys(live, "live")
        d1, d2, weekly = (live[ref]["uuid"] for ref in (*WEEK, "weekly/w=1"))

        changed = rerun_graph(raw, [row_count_at_least(3, name="rows_at_least_3")])
        with orchestrated_api(db, changed, warehouse, spark) as api:
            problem(api.client.post(f"{API}/instances/{weekly}/checks"), 409, "job 'weekly' declares no checks")

            passed = rechecked(api, d1)  # 3 rows: passes, taints nothing
            assert passed["state"] == "live" and [(c["name"], c["passed"]) for c in passed["checks"]] == [
                ("rows_at_least_3", True)
            ]
            assert passed["checks"][0]["metrics"] == {"rows": 3.0}
            assert instance(api, weekly)["state"] == "live"

            failed = rechecked(api, d2)  # 2 rows: the changed check fails on data already Live
            assert failed["state"] == "tainted" and not failed["canonical"]
            assert failed["note"].startswith("check rows_at_least_3 failed on daily/d=2: 2 rows (at least 3 wanted)")
            assert [(c["name"], c["passed"], c["blocking"]) for c in failed["checks"]] == [
                ("rows_at_least_3", False, True)
            ]
            downstream = instance(api, weekly)
            assert downstream["state"] == "tainted"
            assert downstream["note"].startswith("upstream daily/d=2 tainted: check rows_at_least_3 failed")
            assert instance(api, d1)["state"] == "live"
            assert canonical(api.client, "daily/d=2")["previous_uuid"] == d2
