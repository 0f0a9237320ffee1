"""A partition is the unit of success (issue 34), on real Spark behind a real uvicorn server.

Eight raw days (parquet the test writes and observes with versions): day 3's file is corrupt, day 5 has a null
carrier that the daily job's blocking check refuses. The `daily` job builds eight days in one run and reads
them in one Spark job, as a batched job does; the `monthly` job reads the eight dailies and is published to a
catalog table. Both declare `on_upstream_change()`. The test asks and reads over HTTP, as a user would.
"""

from __future__ import annotations

import uuid as uuids
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from partbuild.orchestrator.checks import no_nulls
from partbuild.orchestrator.context import JobContext
from partbuild.orchestrator.graph import Graph, Job, RetryPolicy, SourceDataset
from partbuild.orchestrator.reactions import on_upstream_change
from partbuild.state.database import Database

from httpkit import PARTITIONS, WANTS, canonical, head_seq, observe, ok, want
from serverkit import ApiServer, orchestrated_api
from waitkit import wait_for

DAYS = range(1, 9)
DAILIES = [f"daily/d={n}" for n in DAYS]
MONTH = "monthly/m=1"


def write_day(spark: Any, path: Path, carriers: list[str | None]) -> str:
    spark.createDataFrame([(c, 1) for c in carriers], "carrier string, flights int").coalesce(1).write.mode(
        "overwrite"
    ).parquet(str(path))
    return str(path)


def corrupt_day(path: Path) -> str:
    path.mkdir(parents=True)
    (path / "part-00000.parquet").write_bytes(b"this is not parquet at all")
    return str(path)


def outcome_graph(table: str) -> Graph:
    def run_daily(ctx: JobContext) -> None:
        locations = ctx.inputs(f"raw/d={t.partition['n']}" for t in ctx.outputs)
        ctx.spark.read.parquet(*locations).count()  # one Spark job over the batch: one bad file fails it whole
        for target, location in zip(ctx.outputs, locations, strict=True):
            ctx.spark.read.parquet(location).coalesce(1).write.mode("overwrite").parquet(target.location)

    def run_monthly(ctx: JobContext) -> None:
        frame = ctx.spark.read.parquet(*ctx.inputs(DAILIES))
        for target in ctx.outputs:
            frame.coalesce(1).write.mode("overwrite").parquet(target.location)

    return Graph(
        [
            Job(
                "daily",
                ["daily/d={n:int}"],
                run_daily,
                inputs=lambda p: [f"raw/d={p['n']}"],
                batch_size=8,
                retry=RetryPolicy(max_attempts=1, backoff_ms=0),
                checks=[no_nulls("carrier", name="carrier_not_null")],
                reactions=[on_upstream_change()],
            ),
            Job(
                "monthly",
                ["monthly/m={m:int}"],
                run_monthly,
                inputs=lambda p: list(DAILIES),
                reactions=[on_upstream_change()],
                publish=table,
            ),
        ],
        [SourceDataset("raw", "raw/d={n:int}", locate=lambda p: None)],  # observed over HTTP by the test
    )


@pytest.fixture
def served(sqlite_url: str, tmp_path: Path, spark: Any) -> Iterator[tuple[ApiServer, str]]:
    table = f"outcomes_{uuids.uuid4().hex[:8]}.monthly"
    with (
        Database.open(sqlite_url, auto_upgrade=True) as db,
        orchestrated_api(db, outcome_graph(table), tmp_path / "warehouse", spark) as api,
    ):
        yield api, table


def settled(api: ApiServer, ref: str, *states: str) -> dict[str, Any]:
    def found() -> dict[str, Any] | None:
        response = api.client.get(f"{PARTITIONS}/canonical/{ref}")
        if response.status_code == 404:  # not wanted yet: its derivative want comes with the month's decision
            return None
        answer = ok(response)
        return answer if answer["state"] in states else None

    return wait_for(f"{ref} to be {states}", found, 180)  # type: ignore[no-any-return]


def published_flights(spark: Any, table: str) -> int | None:
    """The month's flights as the published table shows them (None: no partition, or no table yet)."""
    if not spark.catalog.tableExists(table):
        return None
    spark.sql(f"REFRESH TABLE {table}")
    return spark.sql(f"SELECT sum(flights) AS n FROM {table} WHERE m = '1'").first()["n"]  # type: ignore[no-any-return]


def publishes(spark: Any, table: str, flights: int | None) -> None:
    """Wait for the publisher (it follows the log after each step) to show `flights` for the month."""
    wait_for(f"{table} to show {flights} flights", lambda: published_flights(spark, table) == flights or None, 60)


def test_a_bad_day_fails_alone_comes_back_by_itself_and_a_late_day_keeps_its_month_readable(
    served: tuple[ApiServer, str], spark: Any, tmp_path: Path
) -> None:
    api, table = served
    raw = tmp_path / "raw"
    for n in DAYS:
        carriers: list[str | None] = ["AA", "UA"] if n != 5 else ["AA", None]
        location = corrupt_day(raw / f"d={n}") if n == 3 else write_day(spark, raw / f"d={n}", carriers)
        observe(api.client, f"raw/d={n}", location, version={"value": "v1", "strong": True})
    want(api.client, [MONTH], want_id="june")

    # The batch failed as a whole, was split, and each day ran alone: six Live, each retried once.
    bad_file, bad_check = settled(api, "daily/d=3", "failed"), settled(api, "daily/d=5", "failed")
    good = [settled(api, ref, "live") for ref in DAILIES if ref not in ("daily/d=3", "daily/d=5")]
    assert all(len(day["attempts"]) == 2 for day in good), [day["attempts"] for day in good]
    assert "not a Parquet file" in bad_file["note"] and "carrier" not in bad_file["note"]
    assert "An error occurred while calling" not in bad_file["note"]
    assert bad_check["note"].startswith("check carrier_not_null failed on daily/d=5")
    assert not any("Parquet" in (day["note"] or "") or "carrier" in (day["note"] or "") for day in good)
    assert settled(api, MONTH, "upstream_failed")["state"] == "upstream_failed"
    failed = ok(api.client.get(f"{WANTS}/june"))
    assert failed["state"] in ("failed", "upstream_failed")
    assert {failure["ref"] for failure in failed["failures"]} <= {"daily/d=3", "daily/d=5"}

    # Fixed inputs: both days are rebuilt, and the month after them, with no person asking.
    before_fix = head_seq(api.client)
    for n in (3, 5):
        fixed = write_day(spark, raw / f"d={n}-fixed", ["AA", "UA"])
        observe(api.client, f"raw/d={n}", fixed, version={"value": "v2", "strong": True})
    month = settled(api, MONTH, "live")
    assert month["serving"] and not month["stale"]
    publishes(spark, table, 16)
    since = [w for w in ok(api.client.get(WANTS, params={"limit": 100}))["items"] if w["created_seq"] > before_fix]
    assert since and not [w["want_id"] for w in since if w["source"].startswith("manual:")]

    # A late, bad day 1: the day and its month go stale and keep serving while the day's rebuild is blocked.
    late = write_day(spark, raw / "d=1-late", ["AA", "UA", None])
    late_seq = observe(api.client, "raw/d=1", late, version={"value": "v3", "strong": True})
    stale_day = wait_for(
        "day 1's successor to fail", lambda: _with_successor(canonical(api.client, "daily/d=1"), "failed"), 180
    )
    assert stale_day["stale"] and stale_day["serving"] and stale_day["state"] == "live"
    stale_month = canonical(api.client, MONTH)
    assert (stale_month["uuid"], stale_month["stale"], stale_month["serving"]) == (month["uuid"], True, True)
    assert stale_month["location"] == month["location"] and published_flights(spark, table) == 16
    assert canonical(api.client, MONTH, as_of_seq=late_seq - 1)["stale"] is False

    # Fixed: the day's rebuild passes, then the month's, and readers move in the month's success event.
    observe(api.client, "raw/d=1", write_day(spark, raw / "d=1-v4", ["AA", "UA", "DL"]), version={"value": "v4"})
    rebuilt = wait_for("a new month", lambda: _replaced(canonical(api.client, MONTH), month["uuid"]), 180)
    switched = rebuilt["updated_seq"]
    assert canonical(api.client, MONTH, as_of_seq=switched - 1)["uuid"] == month["uuid"]
    assert canonical(api.client, MONTH, as_of_seq=switched)["uuid"] == rebuilt["uuid"]
    publishes(spark, table, 17)

    # A person's taint still withdraws: nothing is read until a rebuild.
    ok(api.client.post(f"{PARTITIONS}/taint", json={"ref": MONTH, "reason": "wrong totals"}), 201)
    withdrawn = canonical(api.client, MONTH)
    assert not withdrawn["serving"] and withdrawn["location"] is None
    publishes(spark, table, None)


def _with_successor(answer: dict[str, Any], state: str) -> dict[str, Any] | None:
    successor = answer.get("successor")
    return answer if successor is not None and successor["state"] == state else None


def _replaced(answer: dict[str, Any], old: str) -> dict[str, Any] | None:
    return answer if answer["uuid"] != old and answer["state"] == "live" else None
