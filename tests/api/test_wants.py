"""/api/v1/wants over HTTP: create one or a batch, validate a batch, list and page, get, cancel."""

from __future__ import annotations

import re
import time
from typing import Any

import pytest
import sqlalchemy as sa

from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.db import WRITE_WAIT_ENV, begin_write, create_engine_for
from partbuild.state.log.events import envelope, from_job_run

from httpkit import API, WANTS, canonical, head_seq, listed, ok, problem, walk, want
from serverkit import ApiServer, graphless_api_server


def test_create_want_and_get_it(db_api_server: ApiServer) -> None:
    """201 with the seq it landed at, state idle; GET shows every field, where each ref stands, and its tree."""
    client = db_api_server.client
    before = head_seq(client)
    data_ms = int(time.time() * 1000) - 600_000  # ten minutes ago: a 60 s SLA is breached, a day's TTL is not over
    body = {
        "refs": ["agg/a/x=1", "src/b"],
        "want_id": "w-1",
        "comment": "first",
        "ttl_seconds": 86_400,
        "sla_seconds": 60,
        "data_timestamp_ms": data_ms,
    }
    created = ok(client.post(WANTS, json=body, headers={"X-Partbuild-User": "ann"}), 201)
    assert created == {"want_id": "w-1", "seq": before + 1, "state": "idle"}
    assert head_seq(client) == created["seq"]

    got = ok(client.get(f"{WANTS}/w-1", params={"min_seq": created["seq"]}))
    statuses = got.pop("refs_status")
    assert got.pop("created_ms") > 0
    assert got == {
        "want_id": "w-1",
        "refs": ["agg/a/x=1", "src/b"],
        "state": "idle",
        "created_seq": created["seq"],
        "updated_seq": created["seq"],
        "data_timestamp_ms": data_ms,
        "ttl_seconds": 86_400,
        "sla_seconds": 60,
        "expires_at_ms": data_ms + 86_400_000,
        "sla_deadline_ms": data_ms + 60_000,
        "sla_breached": True,
        "comment": "first",
        "source": "manual:ann",
        "made_by": "user:ann",  # who made it, as `made_by` filters (tests/api/test_wants_made_by.py)
        "parent_want_id": None,
        "root_want_id": "w-1",
        "children": [],
        "satisfied_by": [],
        "cancel_reason": None,
        "tree": {"want_id": "w-1", "state": "idle", "refs": ["agg/a/x=1", "src/b"], "children": []},
        "progress": {"missing": 2},  # both refs' instances, by state
        "runs": [],
        "cause": None,  # asked for by a person: no automation made it
        "failures": [],  # only a failed want names the partitions that failed it
        "as_of_seq": created["seq"],
    }
    assert [(s["ref"], s["state"], s["waiting_on"]) for s in statuses] == [
        ("agg/a/x=1", "missing", []),
        ("src/b", "missing", []),
    ]
    # Each ref's status names its canonical instance.
    for status in statuses:
        instance = ok(client.get(f"{API}/instances/{status['instance_uuid']}"))
        assert (instance["ref"], instance["state"], instance["canonical"]) == (status["ref"], "missing", True)

    # Without an id, the want gets a fresh one; without a user header, the source is anonymous.
    generated = want(client, ["src/c"])
    assert re.fullmatch(r"want-[0-9a-f]{32}", generated["want_id"]) and generated["seq"] == created["seq"] + 1
    assert ok(client.get(f"{WANTS}/{generated['want_id']}"))["source"] == "manual:anonymous"


def test_batch_of_wants_is_one_append(db_api_server: ApiServer) -> None:
    """A batch lands as consecutive seqs in one append; one bad want and none of the batch is recorded."""
    client = db_api_server.client
    before = head_seq(client)
    body = {
        "wants": [{"refs": ["b/1"], "want_id": "b-1"}, {"refs": ["b/2", "b/3"], "comment": "two"}, {"refs": ["b/1"]}]
    }
    created = ok(client.post(f"{WANTS}/batch", json=body), 201)
    assert (created["first_seq"], created["last_seq"]) == (before + 1, before + 3)
    assert [w["seq"] for w in created["wants"]] == [before + 1, before + 2, before + 3]
    assert created["wants"][0]["want_id"] == "b-1" and {w["state"] for w in created["wants"]} == {"idle"}
    assert head_seq(client) == created["last_seq"]
    got = [ok(client.get(f"{WANTS}/{w['want_id']}")) for w in created["wants"]]
    assert [w["refs"] for w in got] == [["b/1"], ["b/2", "b/3"], ["b/1"]]
    assert got[1]["comment"] == "two"
    # Two wants of one ref share its canonical instance.
    assert got[0]["refs_status"][0]["instance_uuid"] == got[2]["refs_status"][0]["instance_uuid"]

    refused = {"wants": [{"refs": ["b/4"], "want_id": "b-4"}, {"refs": ["b/5"], "want_id": "b-1"}]}
    problem(client.post(f"{WANTS}/batch", json=refused), 409, "b-1", "already exists")
    problem(client.get(f"{WANTS}/b-4"), 404, "b-4")
    assert head_seq(client) == created["last_seq"]


def test_validate_batch_checks_as_create_would_and_records_nothing(api_server: ApiServer) -> None:
    """/wants/batch/validate accepts what /wants/batch would and refuses the rest alike, appending nothing."""
    client = api_server.client
    want(client, ["v/1"], want_id="v-1")
    before = head_seq(client)
    body = {"wants": [{"refs": ["v/2", "v/3"], "want_id": "v-2"}, {"refs": ["v/4"]}]}
    assert ok(client.post(f"{WANTS}/batch/validate", json=body)) == {"wants": 2, "refs": 3}
    assert head_seq(client) == before
    problem(client.get(f"{WANTS}/v-2"), 404, "v-2")

    refused: list[tuple[dict[str, Any], int, str]] = [
        ({"wants": [{"refs": ["x"], "want_id": "v-1"}]}, 409, "v-1"),
        ({"wants": [{"refs": ["x"], "want_id": "v-9"}, {"refs": ["y"], "want_id": "v-9"}]}, 409, "v-9"),
        ({"wants": [{"refs": ["x", "y", "x"]}]}, 422, "more than once"),
        ({"wants": [{"refs": [f"r/{n}" for n in range(10_001)]}]}, 413, "10001"),
        ({"wants": [{"refs": ["ok"]}, {"refs": ["a\x00b"]}]}, 422, "body.wants.1.refs.0"),
        ({"wants": []}, 422, "body.wants"),
    ]
    for bad_body, status, word in refused:
        validated = problem(client.post(f"{WANTS}/batch/validate", json=bad_body), status, word)
        assert problem(client.post(f"{WANTS}/batch", json=bad_body), status, word) == validated
    assert head_seq(client) == before

    created = ok(client.post(f"{WANTS}/batch", json=body), 201)
    assert (created["first_seq"], created["last_seq"]) == (before + 1, before + 2)
    problem(client.post(f"{WANTS}/batch/validate", json=body), 409, "v-2", "already exists")


def test_list_wants_by_state_ref_and_root(api_server: ApiServer) -> None:
    """Wants list oldest first; filters by state, by a ref they name, by root want, and combined."""
    client = api_server.client
    for n in range(4):
        want(client, [f"l/{n}", "l/shared"], want_id=f"l-{n}")
    want(client, ["l/other"], want_id="l-other")
    ok(client.post(f"{WANTS}/l-1/cancel", json={"reason": "not needed"}))

    assert listed(client, WANTS, "want_id") == ["l-0", "l-1", "l-2", "l-3", "l-other"]
    assert listed(client, WANTS, "want_id", state="canceled") == ["l-1"]
    assert listed(client, WANTS, "want_id", state="idle") == ["l-0", "l-2", "l-3", "l-other"]
    assert listed(client, WANTS, "want_id", state="successful") == []
    assert listed(client, WANTS, "want_id", ref="l/shared") == ["l-0", "l-1", "l-2", "l-3"]
    assert listed(client, WANTS, "want_id", ref="l/other") == ["l-other"]
    assert listed(client, WANTS, "want_id", ref="l/nothing") == []
    assert listed(client, WANTS, "want_id", ref="l/shared", state="idle") == ["l-0", "l-2", "l-3"]
    # A want made by hand is its own root (derivative wants: see the W1 test).
    assert listed(client, WANTS, "want_id", root="l-2") == ["l-2"]
    assert listed(client, WANTS, "want_id", root="nobody") == []
    assert listed(client, WANTS, "cancel_reason", state="canceled") == ["not needed"]


def test_list_wants_pages_by_cursor_without_gaps_or_duplicates(db_api_server: ApiServer) -> None:
    """Walking every page, at any page size and with any filter, yields each want once, in order."""
    client = db_api_server.client
    refs = [[f"p/{n:02d}", "p/shared" if n % 2 else f"p/even/{n}"] for n in range(25)]
    batch = {"wants": [{"refs": pair, "want_id": f"p-{n:02d}"} for n, pair in enumerate(refs)]}
    ok(client.post(f"{WANTS}/batch", json=batch), 201)
    ok(client.post(f"{WANTS}/p-03/cancel"))
    every = [f"p-{n:02d}" for n in range(25)]
    for limit in (1, 7, 25, 1_000):
        pages = walk(client, WANTS, limit)
        assert [w["want_id"] for page in pages for w in page] == every
        assert all(len(page) == limit for page in pages[:-1])
    assert listed(client, WANTS, "want_id", limit=4, ref="p/shared") == [f"p-{n:02d}" for n in range(1, 25, 2)]
    assert listed(client, WANTS, "want_id", limit=6, state="idle") == [w for w in every if w != "p-03"]
    assert listed(client, WANTS, "want_id", limit=2, state="canceled") == ["p-03"]


def test_cancel_want_then_cancel_again_conflicts(api_server: ApiServer) -> None:
    """Cancel records the reason; cancelling a canceled want is a 409 that appends nothing."""
    client = api_server.client
    created = want(client, ["c/1"], want_id="c-1")
    canceled = ok(client.post(f"{WANTS}/c-1/cancel", json={"reason": "changed my mind"}))
    assert canceled == {"seq": created["seq"] + 1}
    got = ok(client.get(f"{WANTS}/c-1"))
    assert (got["state"], got["cancel_reason"], got["updated_seq"]) == ("canceled", "changed my mind", canceled["seq"])
    assert got["refs_status"][0]["state"] == "missing"

    before = head_seq(client)
    problem(client.post(f"{WANTS}/c-1/cancel"), 409, "c-1", "canceled")
    assert head_seq(client) == before

    want(client, ["c/2"], want_id="c-2")
    ok(client.post(f"{WANTS}/c-2/cancel"))  # no body: the default reason
    assert ok(client.get(f"{WANTS}/c-2"))["cancel_reason"] == "canceled"


def test_wants_as_of_a_seq_show_the_states_wants_and_tree_of_then(api_server: ApiServer) -> None:
    """A want, its ref waiting upstream, a derivative want, then a cancel: as of each seq, the list, the
    filters, the detail (state, why it waits, the derivative tree) and the cursors are as they were."""
    client = api_server.client
    created = want(client, ["t/out"], want_id="root")["seq"]
    uuid = ok(client.get(f"{API}/partitions/canonical/t/out"))["uuid"]
    log = api_server.log
    buffered = log.append([envelope(pb.JobRunBuffer(job_run_id="run-1", job_label="j", instance_uuids=[uuid]))])
    waiting = log.append([envelope(pb.JobRunMissingDeps(job_run_id="run-1", missing_refs=["t/in"]))])
    child = pb.WantCreate(want_id="child", partition_refs=["t/in"], parent_want_id="root")
    derived = log.append([envelope(child, source=from_job_run("run-1"))]).last_seq
    canceled = ok(client.post(f"{WANTS}/root/cancel", json={"reason": "enough"}))["seq"]

    def detail(seq: int) -> dict[str, Any]:
        return ok(client.get(f"{WANTS}/root", params={"as_of_seq": seq}))

    first = detail(created)
    assert (first["state"], first["as_of_seq"], first["updated_seq"]) == ("idle", created, created)
    assert (first["cancel_reason"], first["children"], first["tree"]["children"]) == (None, [], [])
    assert [(s["ref"], s["state"], s["waiting_on"]) for s in first["refs_status"]] == [("t/out", "missing", [])]
    assert detail(buffered.last_seq)["state"] == "building"
    assert detail(waiting.last_seq)["state"] == "upstream_building"
    grown = detail(derived)
    (status,) = grown["refs_status"]
    assert (status["state"], [(w["ref"], w["state"]) for w in status["waiting_on"]]) == (
        "upstream_building",
        [("t/in", "missing")],
    )
    assert grown["tree"]["children"] == [{"want_id": "child", "state": "idle", "refs": ["t/in"], "children": []}]
    now = ok(client.get(f"{WANTS}/root"))
    assert (now["state"], now["cancel_reason"], now["as_of_seq"]) == ("canceled", "enough", canceled)
    assert now["tree"]["children"][0]["state"] == "canceled"
    problem(
        client.get(f"{WANTS}/child", params={"as_of_seq": waiting.last_seq}),
        404,
        "child",
        f"as of seq {waiting.last_seq}",
    )

    def page(**params: Any) -> dict[str, Any]:
        return ok(client.get(WANTS, params=params))

    assert [w["want_id"] for w in page(as_of_seq=waiting.last_seq)["items"]] == ["root"]
    assert page(as_of_seq=created - 1) == {"items": [], "next_cursor": None, "as_of_seq": created - 1}
    assert [(w["want_id"], w["state"]) for w in page(as_of_seq=derived)["items"]] == [
        ("root", "upstream_building"),
        ("child", "idle"),
    ]
    assert [w["want_id"] for w in page(as_of_seq=derived, state="idle")["items"]] == ["child"]
    assert page(state="idle")["items"] == []
    assert [w["want_id"] for w in page(as_of_seq=derived, ref="t/in")["items"]] == ["child"]
    assert page(as_of_seq=waiting.last_seq, ref="t/in")["items"] == []
    assert [w["want_id"] for w in page(as_of_seq=derived, root="root")["items"]] == ["root", "child"]
    assert listed(client, WANTS, "state", limit=1, as_of_seq=derived) == ["upstream_building", "idle"]
    # A cursor a page as of a seq gave pages that list; one naming a later want is no cursor of it.
    cursor = page(as_of_seq=waiting.last_seq, limit=1)["next_cursor"]
    assert cursor == str(created) and page(as_of_seq=waiting.last_seq, cursor=cursor)["items"] == []
    later = page(limit=1, cursor=cursor)["next_cursor"]
    assert later == str(derived)
    problem(client.get(WANTS, params={"as_of_seq": waiting.last_seq, "cursor": later}), 404, "cursor")


def _fail(api: ApiServer, run_id: str, uuid: str, message: str, *checks: pb.CheckResult) -> int:
    """Buffer a run of one instance and fail it for good; the seq of the failure."""
    api.log.append([envelope(pb.JobRunBuffer(job_run_id=run_id, job_label="j", instance_uuids=[uuid]))])
    checked = [pb.InstanceChecks(instance_uuid=uuid, results=list(checks))] if checks else []
    failure = pb.JobRunFailure(job_run_id=run_id, error_class=pb.ERROR_CLASS_PERMANENT, message=message, checks=checked)
    return api.log.append([envelope(failure)]).last_seq


def _wait_upstream(api: ApiServer, run_id: str, uuid: str, upstream: str) -> int:
    """Buffer a run of one instance that finds `upstream` missing: the instance waits for it."""
    api.log.append([envelope(pb.JobRunBuffer(job_run_id=run_id, job_label="j", instance_uuids=[uuid]))])
    return api.log.append([envelope(pb.JobRunMissingDeps(job_run_id=run_id, missing_refs=[upstream]))]).last_seq


def test_a_failed_want_names_the_partition_that_failed_it_its_error_and_its_check(api_server: ApiServer) -> None:
    """A want whose own ref failed: that instance, the run's message, the failed blocking check (not the
    non-blocking one); none while it builds, as of a seq before the failure."""
    client = api_server.client
    created = want(client, ["t/a", "t/b"], want_id="direct")["seq"]
    uuid = canonical(client, "t/a", min_seq=created)["uuid"]
    message = "check rows failed on t/a: 0 rows\n" + "\n".join(f"\tat Foo.bar(Foo.java:{n})" for n in range(30))
    rows = pb.CheckResult(name="rows", passed=False, blocking=True, description="0 rows", duration_ms=5)
    style = pb.CheckResult(name="style", passed=False, blocking=False)
    failed = _fail(api_server, "run-a", uuid, message, style, rows)

    got = ok(client.get(f"{WANTS}/direct", params={"min_seq": failed}))
    assert got["state"] == "failed"
    assert got["failures"] == [
        {"ref": "t/a", "instance_uuid": uuid, "state": "failed", "reason": message, "check": "rows", "via": None}
    ]
    assert ok(client.get(f"{WANTS}/direct", params={"as_of_seq": failed - 1}))["failures"] == []
    assert ok(client.get(f"{WANTS}/direct", params={"as_of_seq": failed}))["failures"] == got["failures"]


def test_an_upstream_failed_want_names_the_upstream_partition_that_really_failed(api_server: ApiServer) -> None:
    """top waits for mid, mid waits for low (a derivative want), low's run fails: top and mid name low with
    its error (via their own ref), low's want names it directly; still so once low is wanted and rebuilt."""
    client, log = api_server.client, api_server.log
    want(client, ["t/mid"], want_id="mid")
    mid_waits = _wait_upstream(api_server, "run-mid", canonical(client, "t/mid")["uuid"], "t/low")
    seq = want(client, ["t/top"], want_id="top")["seq"]
    _wait_upstream(api_server, "run-top", canonical(client, "t/top", min_seq=seq)["uuid"], "t/mid")
    child = pb.WantCreate(want_id="low", partition_refs=["t/low"], parent_want_id="mid")
    seq = log.append([envelope(child, source=from_job_run("run-mid"))]).last_seq
    low = canonical(client, "t/low", min_seq=seq)["uuid"]
    failed = _fail(api_server, "run-low", low, "OSError: disk full")

    named = {"ref": "t/low", "instance_uuid": low, "state": "failed", "reason": "OSError: disk full", "check": None}
    for want_id, state, via in (("top", "upstream_failed", "t/top"), ("mid", "upstream_failed", "t/mid")):
        got = ok(client.get(f"{WANTS}/{want_id}", params={"min_seq": failed}))
        assert (got["state"], got["failures"]) == (state, [{**named, "via": via}]), want_id
    assert ok(client.get(f"{WANTS}/low"))["failures"] == [{**named, "via": None}]
    assert ok(client.get(f"{WANTS}/top", params={"as_of_seq": failed - 1}))["failures"] == []
    assert ok(client.get(f"{WANTS}/mid", params={"as_of_seq": mid_waits}))["failures"] == []

    # Asked again, low gets a new instance: the failed wants still name the one that failed them.
    again = want(client, ["t/low"], want_id="again")["seq"]
    assert canonical(client, "t/low", min_seq=again)["uuid"] != low
    assert ok(client.get(f"{WANTS}/top"))["failures"] == [{**named, "via": "t/top"}]
    assert ok(client.get(f"{WANTS}/again"))["failures"] == []


def test_wants_as_of_a_seq_after_the_head_or_not_a_seq_are_refused(api_server: ApiServer) -> None:
    client = api_server.client
    head = want(client, ["r/1"], want_id="r-1")["seq"]
    for path in (WANTS, f"{WANTS}/r-1"):
        problem(client.get(path, params={"as_of_seq": head + 1}), 409, f"as_of_seq {head + 1} is after the log head")
        for bad in (-1, "ten", "1e1", "1.0", " 1", "true"):
            problem(client.get(path, params={"as_of_seq": bad}), 422, "query.as_of_seq")


def test_a_want_while_another_writer_holds_the_append_lock_too_long_is_503_and_writes_nothing(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The wait bound: 503 with Retry-After and why, never a hang; the same want goes in once the lock is free."""
    monkeypatch.setenv(WRITE_WAIT_ENV, "1")
    with graphless_api_server(db_url) as api:
        holder_engine = create_engine_for(db_url)
        try:
            with begin_write(holder_engine) as holder:  # another writer, holding the append lock
                holder.execute(sa.text("UPDATE log_head SET head_seq = head_seq WHERE id = 1"))
                answer = api.client.post(WANTS, json={"refs": ["r/1"], "want_id": "held"})
            assert (answer.status_code, answer.headers["retry-after"]) == (503, "1")
            assert answer.json()["title"] == "Service Unavailable"
            assert "write lock stayed held by another writer" in answer.json()["detail"]
            assert head_seq(api.client) == 0
            assert want(api.client, ["r/1"], want_id="held")["seq"] == 1
        finally:
            holder_engine.dispose()
