"""Reactions on real Spark (issue 25, W1's Done-when): a new version of a raw day is observed, and with
`on_upstream_change` on the daily and the weekly both are rebuilt without any want from a person; each
want's answer names the instance change that caused it.

A small graph like W1's: `raw/d={n}` source data (parquet the test writes, observed over HTTP with a
version, as a connector reports it), a `daily` job copying a day, a `weekly` job reading two dailies. The
orchestrator runs in a thread behind a real uvicorn server (`orchestrated_api`) on the session's SparkSession.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from partbuild.orchestrator.context import JobContext
from partbuild.orchestrator.graph import Graph, Job, SourceDataset
from partbuild.orchestrator.reactions import on_upstream_change
from partbuild.state.database import Database

from clikit import run_cli
from httpkit import WANTS, canonical, observe, ok, walk, want
from serverkit import ApiServer, orchestrated_api
from waitkit import wait_for

WEEK = ("daily/d=1", "daily/d=2")


def write_raw(spark: Any, path: Path, urls: list[str]) -> str:
    spark.createDataFrame([(url,) for url in urls], "url string").coalesce(1).write.parquet(str(path))
    return str(path)


def reacting_graph() -> Graph:
    def run_daily(ctx: JobContext) -> None:
        for target, location in zip(
            ctx.outputs, ctx.inputs(f"raw/d={t.partition['n']}" for t in ctx.outputs), strict=True
        ):
            ctx.spark.read.parquet(location).coalesce(1).write.mode("overwrite").parquet(target.location)

    def run_weekly(ctx: JobContext) -> None:
        locations = ctx.inputs(WEEK)
        for target in ctx.outputs:
            ctx.spark.read.parquet(*locations).coalesce(1).write.mode("overwrite").parquet(target.location)

    react = [on_upstream_change()]
    return Graph(
        [
            Job("daily", ["daily/d={n:int}"], run_daily, inputs=lambda p: [f"raw/d={p['n']}"], reactions=react),
            Job("weekly", ["weekly/w={w:int}"], run_weekly, inputs=lambda p: list(WEEK), reactions=react),
        ],
        [SourceDataset("raw", "raw/d={n:int}", locate=lambda p: None)],  # observed by the test, as a connector
    )


@pytest.fixture
def reacting(sqlite_url: str, tmp_path: Path, spark: Any) -> Iterator[ApiServer]:
    with (
        Database.open(sqlite_url, auto_upgrade=True) as db,
        orchestrated_api(db, reacting_graph(), tmp_path / "warehouse", spark) as api,
    ):
        yield api


def rebuilt(api: ApiServer, ref: str, old_uuid: str) -> dict[str, Any] | None:
    found = canonical(api.client, ref)
    return found if found["state"] == "live" and found["uuid"] != old_uuid else None


def test_a_new_raw_version_rebuilds_the_daily_and_the_weekly_with_no_want_from_a_person(
    reacting: ApiServer, spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    api = reacting
    raw = tmp_path / "raw"
    for n in (1, 2):
        location = write_raw(spark, raw / f"v1/d={n}", ["/a"] * n)
        observe(api.client, f"raw/d={n}", location, version={"value": "v1", "strong": True})
    want(api.client, ["weekly/w=1"], want_id="first")
    wait_for("the first week", lambda: ok(api.client.get(f"{WANTS}/first"))["state"] == "successful" or None, 180)
    daily, weekly = canonical(api.client, "daily/d=1"), canonical(api.client, "weekly/w=1")
    assert spark.read.parquet(weekly["location"]).count() == 3

    # raw/d=1 has a new version: four rows where there was one.
    old_raw = canonical(api.client, "raw/d=1")["uuid"]
    location = write_raw(spark, raw / "v2/d=1", ["/b"] * 4)
    observe(api.client, "raw/d=1", location, version={"value": "v2", "strong": True})
    new_raw = canonical(api.client, "raw/d=1")["uuid"]
    new_weekly = wait_for("the weekly rebuilt", lambda: rebuilt(api, "weekly/w=1", weekly["uuid"]), 180)
    new_daily = canonical(api.client, "daily/d=1")
    assert new_daily["state"] == "live" and new_daily["uuid"] != daily["uuid"]
    assert new_daily["inputs"] == [new_raw] and new_daily["uuid"] in new_weekly["inputs"]
    assert spark.read.parquet(new_weekly["location"]).count() == 6  # the new day's four rows and day 2's two

    # Nobody wanted them: each rebuild has a reaction's want, whose answer names the change that caused it.
    roots = [w for page in walk(api.client, WANTS, 1_000) for w in page if w["parent_want_id"] is None]
    reacted = sorted(w["want_id"] for w in roots if w["want_id"] != "first")
    assert [want_id.split(":")[:3] for want_id in reacted] == [
        ["reaction", "daily", "on_upstream_change"],
        ["reaction", "weekly", "on_upstream_change"],
    ]
    daily_want, weekly_want = (ok(api.client.get(f"{WANTS}/{want_id}")) for want_id in reacted)
    assert daily_want["refs"] == ["daily/d=1"] and weekly_want["refs"] == ["weekly/w=1"]
    assert daily_want["cause"] == (
        f"reaction on_upstream_change of job daily: raw/d=1 got instance {new_raw} (was {old_raw})"
    )
    assert weekly_want["cause"] == (
        f"reaction on_upstream_change of job weekly: daily/d=1 got instance {new_daily['uuid']} (was {daily['uuid']})"
    )
    assert daily_want["source"] == weekly_want["source"] == "system:orchestrator"
    code, out, _ = run_cli(capsys, "wants", "show", reacted[1], "--server", api.url)
    assert code == 0 and f"daily/d=1 got instance {new_daily['uuid']}" in out
    # Each was built once: day 2 and the other partitions were not touched.
    assert canonical(api.client, "daily/d=2")["uuid"] == weekly["inputs"][1]
    assert len(new_weekly["attempts"]) == 1 and len(new_daily["attempts"]) == 1
