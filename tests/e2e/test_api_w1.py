"""W1 end to end over HTTP only (real Spark, an orchestrator in the background): want the weeklies, watch them
build, read lineage and job runs, taint, rebuild."""

from __future__ import annotations

import time
from typing import Any

import httpx

from examples.clicks.pipeline import daily_ref, days_in_range, raw_ref, week_days_in_range, weekly_ref, weeks_in_range

from httpkit import API, PARTITIONS, WANTS, canonical, events, head_seq, history, listed, ok, walk, want
from serverkit import ApiServer
from sparkkit import CLICKS_DAYS, CLICKS_ROWS, CLICKS_START


def wait_for_want(client: httpx.Client, want_id: str, timeout_s: float = 120.0) -> dict[str, Any]:
    """Poll GET /wants/{id} until the want is successful; fail at once if it ends any other way."""
    deadline = time.monotonic() + timeout_s
    while True:
        got = ok(client.get(f"{WANTS}/{want_id}"))
        if got["state"] == "successful":
            return got  # type: ignore[no-any-return]
        assert got["state"] not in {"failed", "upstream_failed", "canceled", "expired"}, got
        assert time.monotonic() < deadline, f"{want_id} still {got['state']} after {timeout_s} s: {got['refs_status']}"
        time.sleep(0.1)


def tree_ids(tree: dict[str, Any]) -> list[str]:
    """The want ids of a want tree, depth first."""
    return [tree["want_id"], *(want_id for child in tree["children"] for want_id in tree_ids(child))]


def tree_refs(tree: dict[str, Any]) -> set[str]:
    return {*tree["refs"], *(ref for child in tree["children"] for ref in tree_refs(child))}


def quiet_audit(client: httpx.Client, timeout_s: float = 30.0) -> dict[str, Any]:
    """An audit of a log that stopped moving: two audits in a row at the same head."""
    deadline = time.monotonic() + timeout_s
    previous = ok(client.post(f"{API}/audit"))
    while True:
        current = ok(client.post(f"{API}/audit"))
        if current["head_seq"] == previous["head_seq"]:
            assert current["digest"] == previous["digest"]
            return current  # type: ignore[no-any-return]
        assert time.monotonic() < deadline, "the log kept moving"
        previous = current
        time.sleep(0.2)


def test_w1_weekly_wants_build_over_http(w1_api_server: ApiServer) -> None:
    """W1 through the API: want the weeklies, watch them build, read lineage and job runs, taint, rebuild."""
    client = w1_api_server.client
    weeks = weeks_in_range(CLICKS_DAYS, CLICKS_START)
    all_days = days_in_range(CLICKS_DAYS, CLICKS_START)
    created = want(client, [weekly_ref(week) for week in weeks], want_id="w1-weekly", comment="W1 over HTTP")
    assert created["seq"] in (1, 2)  # the orchestrator's first step may have noted its reactions' cursor first

    done = wait_for_want(client, "w1-weekly")
    assert [(s["ref"], s["state"]) for s in done["refs_status"]] == [(weekly_ref(w), "live") for w in weeks]
    # The dailies were wanted as derivative wants of the weekly one; all of them are done.
    tree = done["tree"]
    assert tree["want_id"] == "w1-weekly" and tree["children"]
    assert {daily_ref(day) for day in all_days} <= tree_refs(tree)
    assert sorted(listed(client, WANTS, "want_id", limit=3, root="w1-weekly")) == sorted(tree_ids(tree))
    for derived in listed(client, WANTS, "want_id", root="w1-weekly")[1:]:
        got = ok(client.get(f"{WANTS}/{derived}"))
        assert got["root_want_id"] == "w1-weekly" and got["parent_want_id"] and got["state"] == "successful"

    # Each weekly is Live, built from its week's dailies, each built from that day's raw partition.
    weeklies = {}
    for week in weeks:
        days = week_days_in_range(week, CLICKS_DAYS, CLICKS_START)
        weekly = canonical(client, weekly_ref(week))
        assert (weekly["state"], weekly["canonical"]) == ("live", True) and weekly["uuid"] in weekly["location"]
        # W1's checks passed before it went Live: its total is the sum of its dailies' (R rows a day).
        (total,) = weekly["checks"]
        assert (total["name"], total["passed"], total["blocking"]) == ("weekly_total_matches_dailies", True, True)
        assert total["metrics"] == {"total": CLICKS_ROWS * len(days), "dailies": CLICKS_ROWS * len(days)}
        daily = canonical(client, daily_ref(days[0]))
        # The daily's check and its row count were observed as `ctx.write` wrote it: 50 urls, R clicks.
        assert [(c["name"], c["passed"], c["metrics"]) for c in daily["checks"]] == [
            ("daily_not_empty", True, {"rows": 50, "clicks": CLICKS_ROWS})
        ]
        assert daily["row_count"] == 50 and weekly["row_count"] == 50
        weeklies[week] = weekly
        lineage = ok(
            client.get(f"{API}/instances/{weekly['uuid']}/lineage", params={"direction": "upstream", "depth": 2})
        )
        assert lineage["root"] == weekly["uuid"] and weekly["updated_seq"] <= lineage["as_of_seq"] <= head_seq(client)
        nodes = {node["ref"]: node for node in lineage["nodes"]}
        assert len(nodes) == len(lineage["nodes"]) == 1 + 2 * len(days)
        assert {ref: n["depth"] for ref, n in nodes.items()} == {
            weekly_ref(week): 0,
            **{daily_ref(day): 1 for day in days},
            **{raw_ref(day): 2 for day in days},
        }
        assert {n["state"] for n in nodes.values()} == {"live"}
        assert all(nodes[daily_ref(day)]["built_by"] for day in days)
        assert all(nodes[raw_ref(day)]["built_by"] is None for day in days)  # observed source data
        uuid = {ref: n["uuid"] for ref, n in nodes.items()}
        assert {(e["input"], e["output"]) for e in lineage["edges"]} == {
            *((uuid[daily_ref(day)], weekly["uuid"]) for day in days),
            *((uuid[raw_ref(day)], uuid[daily_ref(day)]) for day in days),
        }
        assert weekly["inputs"] == [uuid[daily_ref(day)] for day in days]
        # Depth bounds the walk; downstream from a raw partition reaches its daily and the weekly.
        shallow = ok(
            client.get(f"{API}/instances/{weekly['uuid']}/lineage", params={"direction": "upstream", "depth": 1})
        )
        assert sorted(n["ref"] for n in shallow["nodes"]) == sorted([weekly_ref(week), *map(daily_ref, days)])
        down = ok(
            client.get(
                f"{API}/instances/{uuid[raw_ref(days[0])]}/lineage", params={"direction": "downstream", "depth": 5}
            )
        )
        assert {n["ref"]: n["depth"] for n in down["nodes"]} == {
            raw_ref(days[0]): 0,
            daily_ref(days[0]): 1,
            weekly_ref(week): 2,
        }
        both = ok(client.get(f"{API}/instances/{uuid[daily_ref(days[0])]}/lineage", params={"direction": "both"}))
        assert {n["ref"] for n in both["nodes"]} == {daily_ref(days[0]), raw_ref(days[0]), weekly_ref(week)}

    # Job runs: all succeeded; the dailies were built in batches, each weekly by one run.
    runs = [run for page in walk(client, f"{API}/job-runs", 2) for run in page]
    ids = [run["job_run_id"] for run in runs]
    assert len(set(ids)) == len(ids) and [r["created_seq"] for r in runs] == sorted(r["created_seq"] for r in runs)
    assert {run["state"] for run in runs} == {"succeeded"}
    assert listed(client, f"{API}/job-runs", "job_run_id", limit=3, state="succeeded") == ids
    assert sorted(ref for r in runs if r["job_label"] == "daily_clicks" for ref in r["refs"]) == sorted(
        map(daily_ref, all_days)
    )
    weekly_runs = listed(client, f"{API}/job-runs", "job_run_id", job="weekly_clicks")
    assert sorted(weeklies[w]["built_by"] for w in weeks) == sorted(weekly_runs)
    for run in runs:
        detail = ok(client.get(f"{API}/job-runs/{run['job_run_id']}"))
        assert detail.pop("as_of_seq") >= run["updated_seq"] and detail == run
        assert run["attempt"] == 1 and run["error_class"] is None and len(run["instance_uuids"]) == len(run["refs"])
    assert listed(client, f"{API}/job-runs", "job_run_id", state="failed") == []
    first_audit = quiet_audit(client)
    assert first_audit["rejected_total"] == 0 and first_audit["counts"]["job_runs"]["succeeded"] == len(runs)

    # Taint one daily: it and the weekly built from it are replaced; wanting the weekly again rebuilds both.
    week = weeks[0]
    days = week_days_in_range(week, CLICKS_DAYS, CLICKS_START)
    old_daily, old_weekly, untouched = (
        canonical(client, daily_ref(days[1])),
        weeklies[week],
        canonical(client, daily_ref(days[0])),
    )
    ok(client.post(f"{PARTITIONS}/taint", json={"ref": daily_ref(days[1]), "reason": "late clicks"}), 201)
    for old in (old_daily, old_weekly):
        assert ok(client.get(f"{API}/instances/{old['uuid']}"))["state"] == "tainted"
    want(client, [weekly_ref(week)], want_id="w1-again")
    wait_for_want(client, "w1-again")

    new_daily, new_weekly = canonical(client, daily_ref(days[1])), canonical(client, weekly_ref(week))
    assert new_daily["uuid"] != old_daily["uuid"] and new_weekly["uuid"] != old_weekly["uuid"]
    assert new_daily["state"] == new_weekly["state"] == "live"
    assert new_daily["uuid"] in new_weekly["inputs"] and old_daily["uuid"] not in new_weekly["inputs"]
    assert canonical(client, daily_ref(days[0]))["uuid"] == untouched["uuid"]  # reused, not rebuilt
    for ref, new, old in ((weekly_ref(week), new_weekly, old_weekly), (daily_ref(days[1]), new_daily, old_daily)):
        past = history(client, ref)
        assert [(i["uuid"], i["state"]) for i in past] == [(new["uuid"], "live"), (old["uuid"], "tainted")]
        assert past[1]["note"] and not past[1]["canonical"]
    # The other week was not touched.
    assert canonical(client, weekly_ref(weeks[1]))["uuid"] == weeklies[weeks[1]]["uuid"]

    final = quiet_audit(client)
    assert final["head_seq"] > first_audit["head_seq"] and final["digest"] != first_audit["digest"]
    verified = ok(client.post(f"{API}/audit", params={"verify": True, "as_of_seq": final["head_seq"]}))
    assert (verified["verified"], verified["problems"], verified["digest"]) == (True, [], final["digest"])
    assert final["rejected_total"] == 0 and final["head_seq"] == final["state_seq"] == head_seq(client)
    log = events(client, 500)
    assert [e["seq"] for e in log] == list(range(1, final["head_seq"] + 1))
    assert {"want_create", "partition_observed", "job_run_buffer", "job_run_success", "partition_taint"} <= {
        e["event_type"] for e in log
    }
