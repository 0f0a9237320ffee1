"""/api/v1/changes over HTTP: what changed between two seqs, paged; bad ranges and cursors refused."""

from __future__ import annotations

from typing import Any

import pytest

from partbuild.state.store.projector import Projector

from httpkit import API, PARTITIONS, canonical, head_seq, ok, problem, walk, want
from serverkit import ApiServer

CHANGES = f"{API}/changes"


def _item(seq: int, kind: str, id_: str, ref: str | None, **fields: Any) -> dict[str, Any]:
    return {"seq": seq, "kind": kind, "id": id_, "ref": ref, "from_state": None, "to_state": None} | {
        "from_uuid": None,
        "to_uuid": None,
        **fields,
    }


@pytest.mark.parametrize("read_from", ["live state", "state store"])
def test_changes_of_a_taint_and_its_new_data_paged(db_api_server: ApiServer, read_from: str) -> None:
    """The same pages from the live state's histories and, once projected, from the state store."""
    api_server = db_api_server
    client = api_server.client
    ok(client.post(f"{PARTITIONS}/observe", json={"ref": "c/src", "location": "/data/c1"}), 201)  # seq 1
    first = canonical(client, "c/src")["uuid"]
    want(client, ["c/src", "c/out"], want_id="c-1")  # seq 2
    out = canonical(client, "c/out")["uuid"]
    ok(client.post(f"{PARTITIONS}/taint", json={"ref": "c/src", "reason": "bad"}), 201)  # seq 3
    second = canonical(client, "c/src")["uuid"]
    ok(client.post(f"{PARTITIONS}/observe", json={"ref": "c/src", "location": "/data/c2"}), 201)  # seq 4
    assert head_seq(client) == 4
    if read_from == "state store":
        assert Projector(api_server.service.live, api_server.service.db.changes).project() == 4

    expected = [
        _item(2, "instance_created", out, "c/out", to_state="missing"),
        _item(2, "want_state", "c-1", None, to_state="idle"),
        _item(2, "canonical_moved", "c/out", "c/out", to_uuid=out),
        _item(3, "instance_created", second, "c/src", to_state="missing"),
        _item(3, "instance_state", first, "c/src", from_state="live", to_state="tainted"),
        _item(3, "canonical_moved", "c/src", "c/src", from_uuid=first, to_uuid=second),
        _item(4, "instance_state", second, "c/src", from_state="missing", to_state="live"),
    ]
    whole = ok(client.get(CHANGES, params={"from_seq": 1}))
    assert whole == {"items": expected, "next_cursor": None, "as_of_seq": 4}
    for limit in (1, 2, 3, 7):
        pages = walk(client, CHANGES, limit, from_seq=1, to_seq=4)
        assert [item for page in pages for item in page] == expected
    up_to_3 = ok(client.get(CHANGES, params={"from_seq": 2, "to_seq": 3}))
    assert up_to_3 == {"items": expected[3:6], "next_cursor": None, "as_of_seq": 3}
    # The first seq's own changes are not "after" it; from 0 they are.
    assert [i["seq"] for i in ok(client.get(CHANGES, params={"from_seq": 0, "to_seq": 1}))["items"]] == [1, 1]


def test_bad_ranges_and_cursors_are_refused(api_server: ApiServer) -> None:
    client = api_server.client
    want(client, ["d/1"], want_id="d-1")
    want(client, ["d/2"], want_id="d-2")
    head = head_seq(client)
    problem(client.get(CHANGES, params={"from_seq": 2, "to_seq": 1}), 422, "from_seq", "must not be after")
    for params in ({"from_seq": 2, "to_seq": 2}, {"from_seq": head}):  # from a seq to itself nothing changed
        assert ok(client.get(CHANGES, params=params)) == {
            "items": [],
            "next_cursor": None,
            "as_of_seq": params.get("to_seq", head),
        }
    problem(client.get(CHANGES, params={"from_seq": -1}), 422, "from_seq")
    problem(client.get(CHANGES, params={"from_seq": 0, "to_seq": -2}), 422, "to_seq")
    problem(client.get(CHANGES, params={"from_seq": "1.0"}), 422, "from_seq")
    problem(client.get(CHANGES, params={}), 422, "from_seq")
    problem(client.get(CHANGES, params={"from_seq": 0, "to_seq": head + 1}), 409, "after the log head")
    problem(client.get(CHANGES, params={"from_seq": head + 1}), 409, "after the log head")
    page = ok(client.get(CHANGES, params={"from_seq": 0, "to_seq": head, "limit": 1}))
    cursor = page["next_cursor"]
    assert cursor is not None
    problem(client.get(CHANGES, params={"from_seq": 1, "to_seq": head, "cursor": cursor}), 404, "cursor")
    for forged in ("x", "1:nothing:a", "1:want_state:", "99:want_state:d-1"):
        problem(client.get(CHANGES, params={"from_seq": 0, "to_seq": head, "cursor": forged}), 404, "cursor")
