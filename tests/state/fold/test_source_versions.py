"""Versioned observations of source data: late or corrected data taints exactly what was built from it.

Fold stories (`foldkit.Story`): raw -> daily -> weekly, built by job runs from
observed raw partitions; a raw partition is then observed again, with the same
version or another one. Plus the API and CLI surface of `observe --version`.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.fold.records import InstanceState as I
from partbuild.state.fold.records import WantState as W
from partbuild.state.log.digest import state_digest

from foldkit import Story


def observe(s: Story, ref: str, version: str, *, location: str = "", strong: bool = False) -> str | None:
    """Observe `ref` with a version; the rejection reason or None."""
    msg = pb.PartitionObserved(
        partition_ref=ref, location=location or f"/data/{ref}", version=version, version_strong=strong
    )
    return s.apply(msg)


def two_days_and_a_week(s: Story) -> dict[str, str]:
    """raw/1, raw/2 observed (v1); daily/1, daily/2 built from them; weekly from both dailies."""
    for day in ("1", "2"):
        assert observe(s, f"raw/{day}", "v1") is None
    built = {f"raw/{day}": s.uuid(f"raw/{day}") for day in ("1", "2")}
    s.want("w-week", "daily/1", "daily/2", "weekly")
    for day in ("1", "2"):
        built[f"daily/{day}"] = s.build(f"run-d{day}", f"daily/{day}", [built[f"raw/{day}"]])
    built["weekly"] = s.build("run-w", "weekly", [built["daily/1"], built["daily/2"]])
    assert s.wstate("w-week") == W.SUCCESSFUL
    return built


def test_a_new_version_taints_what_was_built_from_the_old_data_and_nothing_else() -> None:
    s = Story()
    old = two_days_and_a_week(s)
    assert observe(s, "raw/1", "v2") is None
    new_raw = s.instance("raw/1")
    assert new_raw.uuid != old["raw/1"] and new_raw.state == I.LIVE and new_raw.version == ("v2", False)
    assert new_raw.previous_uuid == old["raw/1"]
    # The old raw instance stays Live but superseded (queryable); what it fed is tainted, with a reason.
    first = s.state.instances[old["raw/1"]]
    assert first.state == I.LIVE and first.superseded_seq == new_raw.created_seq
    for ref in ("daily/1", "weekly"):
        tainted = s.state.instances[old[ref]]
        assert (
            tainted.state == I.TAINTED
            and tainted.note == f"upstream raw/1 has new data (observed at seq {len(s.events)})"
        )
        assert s.istate(ref) == I.MISSING  # a fresh instance waits for a rebuild
    # The other day was not touched.
    assert s.uuid("daily/2") == old["daily/2"] and s.istate("daily/2") == I.LIVE
    assert s.uuid("raw/2") == old["raw/2"]
    # A user want that was satisfied stays so (it was satisfied); a new want rebuilds the tainted chain.
    assert s.wstate("w-week") == W.SUCCESSFUL
    s.want("w-again", "daily/1", "weekly")
    daily = s.build("run-d1b", "daily/1", [new_raw.uuid])
    s.build("run-wb", "weekly", [daily, old["daily/2"]])
    assert s.wstate("w-again") == W.SUCCESSFUL


def test_the_same_version_again_is_rejected_and_changes_nothing() -> None:
    s = Story()
    old = two_days_and_a_week(s)
    before = state_digest(s.state)
    reason = observe(s, "raw/1", "v1")
    assert reason == "partition 'raw/1' is already Live at '/data/raw/1' with this version"
    assert s.state.rejections[-1].reason == reason
    assert s.uuid("raw/1") == old["raw/1"] and s.istate("weekly") == I.LIVE
    # Only the head and the rejection moved: every entity is as it was.
    s.state.rejections.pop()
    s.state.head_seq -= 1
    assert state_digest(s.state) == before


def test_a_strong_version_moved_elsewhere_is_a_new_instance_that_taints_nothing() -> None:
    s = Story()
    assert observe(s, "raw/1", "etag-1", strong=True) is None
    raw = s.uuid("raw/1")
    s.want("w", "daily/1")
    daily = s.build("run", "daily/1", [raw])
    assert observe(s, "raw/1", "etag-1", location="/moved/raw/1", strong=True) is None
    assert s.uuid("raw/1") != raw and s.instance("raw/1").location == "/moved/raw/1"
    assert s.uuid("daily/1") == daily and s.istate("daily/1") == I.LIVE
    # A weak version that moved says nothing about the bytes: what was built from it is tainted.
    assert observe(s, "raw/1", "etag-1", location="/again/raw/1") is None
    assert s.state.instances[daily].state == I.TAINTED


def test_a_version_learned_for_data_observed_before_versions_changes_no_instance() -> None:
    s = Story()
    s.observe("raw/1")  # unversioned, as every log before versions
    raw = s.uuid("raw/1")
    s.want("w", "daily/1")
    daily = s.build("run", "daily/1", [raw])
    assert observe(s, "raw/1", "v1") is None  # the same location: the version is learned
    assert s.uuid("raw/1") == raw and s.instance("raw/1").version == ("v1", False)
    assert s.istate("daily/1") == I.LIVE
    assert observe(s, "raw/1", "v2") is None  # now a change is a change
    assert s.state.instances[daily].state == I.TAINTED


def test_unversioned_observations_keep_their_old_rules() -> None:
    s = Story()
    s.observe("raw/1")
    raw = s.uuid("raw/1")
    s.want("w", "daily/1")
    daily = s.build("run", "daily/1", [raw])
    assert s.apply(pb.PartitionObserved(partition_ref="raw/1", location="/data/raw/1")) is not None
    s.observe("raw/1", "/elsewhere/raw/1")  # a new instance, as before versions: nothing is tainted
    assert s.uuid("raw/1") != raw and s.state.instances[daily].state == I.LIVE


def test_a_strong_flag_without_a_version_is_rejected() -> None:
    s = Story()
    reason = s.apply(pb.PartitionObserved(partition_ref="raw/1", location="/x", version_strong=True))
    assert reason == "a strong version needs a version"


def test_a_new_version_while_a_consumer_is_being_built_taints_only_live_ones() -> None:
    s = Story()
    assert observe(s, "raw/1", "v1") is None
    raw = s.uuid("raw/1")
    s.want("w1", "daily/1")
    daily = s.build("run-1", "daily/1", [raw])
    s.want("w2", "weekly")
    s.buffer("run-2", "weekly")  # building from the old data
    assert observe(s, "raw/1", "v2") is None
    assert s.state.instances[daily].state == I.TAINTED
    assert s.istate("weekly") == I.BUILDING  # not Live yet: nothing to taint; its run goes on
    # It read the old daily: its success is recorded, but what it built is tainted, never Live.
    building = s.uuid("weekly")
    s.succeed("run-2", [daily])
    built = s.state.instances[building]
    assert built.state == I.TAINTED and built.built_by == "run-2" and built.inputs == (daily,)
    assert built.note == f"input daily/1 changed while it was built (it read instance {daily})"
    assert s.istate("weekly") == I.MISSING and s.wstate("w2") != W.SUCCESSFUL  # wanted again: rebuilt


def test_a_build_that_read_a_source_rewritten_while_it_ran_is_tainted_and_built_again() -> None:
    """The run looked up raw v1 and read it; v2 was observed before it reported: its daily must not be Live."""
    s = Story()
    assert observe(s, "raw/1", "v1") is None
    old_raw = s.uuid("raw/1")
    s.want("w", "daily/1")
    s.buffer("run-1", "daily/1")
    assert observe(s, "raw/1", "v2") is None
    stale = s.uuid("daily/1")
    s.succeed("run-1", [old_raw])
    assert s.state.instances[stale].state == I.TAINTED
    assert s.istate("daily/1") == I.MISSING and s.wstate("w") != W.SUCCESSFUL
    s.buffer("run-2", "daily/1")  # the rebuild reads the new data and goes Live
    s.succeed("run-2", [s.uuid("raw/1")])
    assert s.istate("daily/1") == I.LIVE and s.wstate("w") == W.SUCCESSFUL
    assert s.state.rejections == []


def test_a_build_that_read_an_input_tainted_while_it_ran_is_tainted_too() -> None:
    s = Story()
    assert observe(s, "raw/1", "v1") is None
    raw = s.uuid("raw/1")
    s.want("w", "daily/1")
    s.buffer("run-1", "daily/1")
    assert s.apply(pb.PartitionTaint(partition_ref="raw/1", reason="bad rows")) is None
    s.succeed("run-1", [raw])
    assert s.state.instances[s.state.instances[s.uuid("daily/1")].previous_uuid or ""].state == I.TAINTED
    assert s.istate("daily/1") == I.MISSING


def test_a_build_that_read_data_that_only_moved_with_its_strong_version_goes_live() -> None:
    s = Story()
    assert observe(s, "raw/1", "etag", strong=True) is None
    raw = s.uuid("raw/1")
    s.want("w", "daily/1")
    s.buffer("run-1", "daily/1")
    assert observe(s, "raw/1", "etag", strong=True, location="/moved/raw/1") is None
    s.succeed("run-1", [raw])
    assert s.istate("daily/1") == I.LIVE and s.wstate("w") == W.SUCCESSFUL


@given(st.lists(st.sampled_from(["v1", "v2", "v3"]), min_size=1, max_size=12))
def test_any_sequence_of_versions_keeps_one_live_canonical_raw_and_no_live_stale_daily(versions: list[str]) -> None:
    """After each observation: the canonical raw is Live with the last accepted version; a Live daily was built
    from the canonical raw (never from older data)."""
    s = Story()
    current: str | None = None
    for n, version in enumerate(versions):
        reason = observe(s, "raw/1", version)
        assert (reason is None) == (version != current), (version, current, reason)
        current = version
        raw = s.instance("raw/1")
        assert raw.state == I.LIVE and raw.version == (version, False)
        daily = s.state.canonical.get("daily/1")
        if daily is not None and s.state.instances[daily].state == I.LIVE:
            assert s.state.instances[daily].inputs == (raw.uuid,)  # never Live on older data
        else:
            s.want(f"w{n}", "daily/1")
            s.build(f"run-{n}", "daily/1", [raw.uuid])


# ----------------------------------------------------------------- API and CLI


def test_the_api_observes_versions_and_refuses_the_same_version_without_appending(api_server: Any) -> None:
    client = api_server.client
    url = "/api/v1/partitions/observe"
    strong = {"value": "v1", "strong": True}
    first = client.post(url, json={"ref": "raw/a", "location": "/d/a", "version": strong})
    assert first.status_code == 201, first.text
    again = client.post(url, json={"ref": "raw/a", "location": "/d/a", "version": {"value": "v1"}})
    assert again.status_code == 409 and "with this version" in again.text, again.text
    assert client.get("/healthz").json()["head_seq"] == first.json()["seq"]  # nothing appended, nothing rejected
    changed = client.post(url, json={"ref": "raw/a", "location": "/d/a", "version": {"value": "v2"}})
    assert changed.status_code == 201, changed.text
    instance = client.get("/api/v1/partitions/canonical/raw/a").json()
    assert instance["version"] == {"value": "v2", "strong": False}, instance
    for bad in ({"strong": True}, {"value": ""}, {"value": 10}, {"value": "v", "strong": "true"}, "v1"):
        refused = client.post(url, json={"ref": "raw/b", "location": "/d/b", "version": bad})
        assert refused.status_code == 422, (bad, refused.text)  # strict: no missing, empty or mistyped values
    assert client.get("/healthz").json()["head_seq"] == changed.json()["seq"]


@pytest.mark.parametrize("args", [["--strong"], ["--version", ""]])
def test_the_cli_refuses_a_bad_version_with_one_line(
    args: list[str], capsys: pytest.CaptureFixture[str], sqlite_url: str
) -> None:
    from clikit import run_cli

    code, _, err = run_cli(capsys, "observe", "raw/a", "--location", "/d/a", "--db", sqlite_url, *args)
    assert code == 2 and len(err.strip().splitlines()) == 1, err
