"""/api/v1/audit over HTTP: a stable digest, counts, rejected events, as of a seq, verified."""

from __future__ import annotations

import re

from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.log.events import envelope

from httpkit import API, PARTITIONS, head_seq, observe, ok, problem, want
from serverkit import ApiServer


def test_audit_digest_is_stable_and_lists_rejected_events(api_server: ApiServer) -> None:
    """Two audits of one log agree; the audit counts the state and lists events the fold rejected."""
    client = api_server.client
    want(client, ["a/1"], want_id="a-1")
    observe(client, "a/src", "/data/a")
    at_two = ok(client.post(f"{API}/audit"))
    assert (at_two["head_seq"], at_two["verified"], at_two["problems"]) == (2, None, [])
    # Observing the same data again is not a valid next step: refused, and nothing is appended.
    problem(client.post(f"{PARTITIONS}/observe", json={"ref": "a/src", "location": "/data/a"}), 409, "already live")
    assert head_seq(client) == 2
    # A writer that does not check first (an older client, a script) can still append an event the
    # fold rejects: the audit lists it.
    api_server.log.append([envelope(pb.WantCancel(want_id="no-such-want"))])

    first = ok(client.post(f"{API}/audit"))
    second = ok(client.post(f"{API}/audit"))
    assert re.fullmatch(r"[0-9a-f]{64}", first["digest"]) and second["digest"] == first["digest"]
    assert first["head_seq"] == first["state_seq"] == head_seq(client) == 3
    assert first["rejected_total"] == 1 and len(first["rejected"]) == 1
    rejected = first["rejected"][0]
    assert (rejected["seq"], rejected["event_type"]) == (3, "want_cancel")
    assert "no-such-want" in rejected["reason"] and "does not exist" in rejected["reason"]
    assert first["counts"]["wants"]["idle"] == 1
    assert (first["counts"]["instances"]["missing"], first["counts"]["instances"]["live"]) == (1, 1)
    assert first["snapshot_seq"] + first["replayed_events"] == first["head_seq"] and first["seconds"] >= 0

    quiet = ok(client.post(f"{API}/audit", params={"rejected": 0}))
    assert (quiet["rejected"], quiet["rejected_total"], quiet["digest"]) == ([], 1, first["digest"])
    verified = ok(client.post(f"{API}/audit", params={"verify": True}))
    assert (verified["verified"], verified["problems"], verified["digest"]) == (True, [], first["digest"])
    # As of seq 2, the audit is the one made when the head was 2.
    past = ok(client.post(f"{API}/audit", params={"as_of_seq": 2, "verify": True}))
    assert (past["head_seq"], past["state_seq"], past["rejected_total"]) == (3, 2, 0)
    assert (past["digest"], past["counts"], past["verified"]) == (at_two["digest"], at_two["counts"], True)
    want(client, ["a/2"])
    moved = ok(client.post(f"{API}/audit"))
    assert moved["head_seq"] == 4 and moved["digest"] != first["digest"]
