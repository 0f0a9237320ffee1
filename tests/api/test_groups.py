"""/api/v1/groups and /group/{name} over HTTP: ownership as of any seq, heartbeats now, group metrics."""

from __future__ import annotations

import time
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from partbuild.proto.v1 import events_pb2 as pb

from groupapikit import GROUP, append_group_history
from httpkit import API, head_seq, ok, problem
from serverkit import ApiServer

GROUPS = f"{API}/groups"


def _members(group: dict[str, Any]) -> dict[str, tuple[list[int], list[dict[str, Any]], int, bool | None]]:
    """Task -> (owned, share section, load, live) of a GET /group answer."""
    return {
        member["task_id"]: (
            member["owned"],
            member["share"],
            member["load"],
            member["heartbeat"]["live"] if member["heartbeat"] else None,
        )
        for member in group["members"]
    }


def test_worker_group_ownership_as_of_any_seq_and_heartbeats_now(db_api_server: ApiServer) -> None:
    """Two epochs, a hand-off in flight and heartbeat rows: ownership follows the seq asked, heartbeats are now."""
    client = db_api_server.client
    assert ok(client.get(GROUPS)) == []
    problem(client.get(f"{API}/group/{GROUP}"), 404, "no worker group 'g'")
    history = append_group_history(db_api_server.service.db, int(time.time() * 1000))
    head = history.head_seq

    summary = ok(client.get(GROUPS, params={"min_seq": head}))
    assert summary == [
        {
            "name": GROUP,
            "namespace": "partbuild",
            "bucket_total": 6,
            "epoch": {"epoch_id": "e2", "number": 2, "seq": history.second_epoch_seq},
            "leader_task_id": "a",
            "members": 3,
            "buckets_without_owner": 1,
        }
    ]
    first = ok(client.get(GROUPS, params={"as_of_seq": history.first_epoch_seq}))
    assert [(g["epoch"]["number"], g["members"], g["buckets_without_owner"]) for g in first] == [(1, 2, 0)]

    now = ok(client.get(f"{API}/group/{GROUP}"))
    assert (now["as_of_seq"], now["epoch"]["epoch_id"], now["leader_task_id"], now["member_timeout_s"]) == (
        head,
        "e2",
        "a",
        10,
    )
    shared = [{"bucket": history.pending, "target": "c", "picked_up": False}]
    assert _members(now) == {
        "a": (history.owned["a"], shared, len(history.owned["a"]), True),
        "b": (history.owned["b"], [], 3, True),
        "c": ([], [], 0, False),  # its last heartbeat is a minute old
    }
    assert now["buckets_without_owner"] == [{"bucket": history.pending, "from_task": "a", "to_task": "c"}]
    a = now["members"][0]
    assert a["data"] == sorted([*history.owned["a"], history.pending]) and a["leader"] and a["state_seq"] == head - 1
    beat = a["heartbeat"]
    assert beat["host"] == "host-a" and 1_000 <= beat["age_ms"] < 60_000
    assert beat["age_ms"] == now["now_ms"] - beat["last_heartbeat_ms"]
    assert [(row["task_id"], row["heartbeat"]["live"]) for row in now["other_heartbeats"]] == [("z", True)]
    patient = ok(client.get(f"{API}/group/{GROUP}", params={"member_timeout_s": 120.5}))
    assert _members(patient)["c"][3] is True and patient["member_timeout_s"] == 120.5

    # As of the first epoch: the leader holds every bucket; heartbeats are still read now.
    past = ok(client.get(f"{API}/group/{GROUP}", params={"as_of_seq": history.first_epoch_seq}))
    assert past["epoch"] == {"epoch_id": "e1", "number": 1, "seq": history.first_epoch_seq}
    assert past["as_of_seq"] == history.first_epoch_seq
    assert _members(past) == {"a": ([1, 2, 3, 4, 5, 6], [], 6, True), "b": ([], [], 0, True)}
    assert [row["task_id"] for row in past["other_heartbeats"]] == ["c", "z"]
    settled = ok(client.get(f"{API}/group/{GROUP}", params={"as_of_seq": history.settled_seq}))
    assert [m["load"] for m in settled["members"]] == [3, 3] and settled["buckets_without_owner"] == []

    problem(client.get(f"{API}/group/{GROUP}", params={"as_of_seq": 0}), 404, "no worker group 'g' as of seq 0")
    problem(client.get(f"{API}/group/other"), 404, "no worker group 'other'")
    problem(client.get(f"{API}/group/{GROUP}", params={"as_of_seq": head + 1}), 409, "as_of_seq")
    problem(client.get(GROUPS, params={"min_seq": head + 1}), 409, "min_seq")
    for bad in ("0", "-1", "86401", "abc", "nan", "inf", "true", "1_0", " 5", "0x10", ""):
        problem(client.get(f"{API}/group/{GROUP}", params={"member_timeout_s": bad}), 422, "query.member_timeout_s")
    for good in ("86400", "0.001", "1e-3", "7"):
        ok(client.get(f"{API}/group/{GROUP}", params={"member_timeout_s": good}))
    for bad in ("-1", "1.5", str(2**53)):
        problem(client.get(f"{API}/group/{GROUP}", params={"as_of_seq": bad}), 422, "query.as_of_seq")
        problem(client.get(GROUPS, params={"as_of_seq": bad}), 422, "query.as_of_seq")
    assert head_seq(client) == head


def test_worker_group_metrics_count_members_epochs_and_fenced_rejections(api_server: ApiServer) -> None:
    """/metrics: members and epochs of each group, pending hand-offs, and fenced decisions rejected by rule."""
    client = api_server.client

    def scrape() -> dict[tuple[str, str], float]:
        text = client.get("/metrics").text
        return {
            (sample.name, next(iter(sample.labels.values()), "")): sample.value
            for family in text_string_to_metric_families(text)
            if family.name.startswith("partbuild_group")
            for sample in family.samples
            if not sample.name.endswith("_created")
        }

    assert scrape() == {
        ("partbuild_group_fenced_rejections_total", kind): 0
        for kind in ("no_group", "old_epoch", "unknown_epoch", "not_member", "not_owner", "wrong_writer")
    }
    history = append_group_history(api_server.service.db, int(time.time() * 1000))
    assert head_seq(client) == history.head_seq
    ok(client.get(GROUPS, params={"min_seq": history.head_seq}))
    found = scrape()
    assert {key: value for key, value in found.items() if value} == {
        ("partbuild_group_members", GROUP): 3,
        ("partbuild_group_epochs_total", GROUP): 2,
        ("partbuild_group_buckets_without_owner", GROUP): 1,
        ("partbuild_group_fenced_rejections_total", "old_epoch"): 1,
    }
    # Counted incrementally: a later rejection (a member deciding for a bucket it does not own) adds one.
    late = pb.Event()
    late.CopyFrom(history.events[-1])
    late.job_run_buffer.job_run_id = "late-run-2"
    late.job_run_buffer.fence.epoch_id = "e2"
    late.job_run_buffer.fence.task_id = "c"
    late.source.system.worker = "c"
    late.event_id = "late-event-2"
    api_server.log.append([late])
    ok(client.get(GROUPS, params={"min_seq": history.head_seq + 1}))
    again = scrape()
    assert again[("partbuild_group_fenced_rejections_total", "not_owner")] == 1
    assert again[("partbuild_group_fenced_rejections_total", "old_epoch")] == 1
