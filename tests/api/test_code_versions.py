"""Code versions and staleness through the API, the CLI and the web pages (api/service/partitions.py).

A real orchestrator (plain files, no Spark) builds three weeklies and their dailies under the graph of
tests/data/graphs/versioned.py at weekly version v1; the same log served with v2 shows every Live weekly
stale and no daily: on the instance, in `GET /partitions?stale=true`, in `GET /jobs/{job}/stale` (newest
partitions first, bounded, as of a seq), in `partbuild partitions instance|show|stale` and on the pages.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from partbuild.api.app import create_app
from partbuild.api.models.partitions import TaintRequest
from partbuild.api.service import Service
from partbuild.orchestrator.graph import Graph, load_graph
from partbuild.orchestrator.loop import Orchestrator
from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.database import Database
from partbuild.state.log.events import envelope, manual
from partbuild.state.log.live import LiveState
from partbuild.state.store.projector import Projector

from clikit import run_cli
from httpkit import canonical, listed, ok, problem
from serverkit import serve_service

GRAPH_FILE = Path(__file__).resolve().parents[1] / "data" / "graphs" / "versioned.py"
WEEKLIES = [f"weekly/week={week}" for week in (1, 2, 3)]


def versioned(monkeypatch: pytest.MonkeyPatch, version: str) -> Graph:
    monkeypatch.setenv("VERSIONED_CODE_VERSION", version)
    return load_graph(GRAPH_FILE)


@pytest.fixture
def built(sqlite_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Database]:
    """Three weeklies (and six dailies) Live, built by an orchestrator serving weekly version v1."""
    with Database.open(sqlite_url, auto_upgrade=True) as db:
        db.log.append([envelope(pb.WantCreate(want_id="w", partition_refs=WEEKLIES), source=manual("ann"))])
        orchestrator = Orchestrator(
            db, versioned(monkeypatch, "v1"), warehouse=str(tmp_path / "wh"), spark=None, poll_interval_s=0.01
        )
        try:
            assert orchestrator.run_until_idle(timeout_s=60)
        finally:
            orchestrator.close()
        yield db


def test_served_with_the_same_version_nothing_is_stale(built: Database, monkeypatch: pytest.MonkeyPatch) -> None:
    service = Service(built, graph=versioned(monkeypatch, "v1"))
    try:
        weekly = service.canonical(WEEKLIES[0])
        assert (weekly.state, weekly.code_version, weekly.stale) == ("live", "v1", False)
        assert service.stale("weekly").instances == [] and service.stale("weekly").stale_count == 0
        assert service.partitions(stale_filter=True).items == []
    finally:
        service.stop()


def test_a_new_version_of_the_weekly_marks_every_live_weekly_stale_and_no_daily(
    built: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    service = Service(built, graph=versioned(monkeypatch, "v2"))
    with serve_service(service) as api:
        client = api.client
        for ref in WEEKLIES:
            answer = canonical(client, ref)
            assert (answer["code_version"], answer["stale"]) == ("v1", True), ref
            instance = ok(client.get(f"/api/v1/instances/{answer['uuid']}"))
            assert (instance["code_version"], instance["stale"]) == ("v1", True)
        daily = canonical(client, "daily/day=2")
        assert (daily["code_version"], daily["stale"]) == ("d1", False)
        stale_refs = listed(client, "/api/v1/partitions", "ref", stale="true")
        assert stale_refs == WEEKLIES
        answer = ok(client.get("/api/v1/jobs/weekly/stale", params={"limit": 2}))
        assert (answer["job"], answer["code_version"], answer["stale_count"]) == ("weekly", "v2", 3)
        assert [i["ref"] for i in answer["instances"]] == [WEEKLIES[2], WEEKLIES[1]]  # newest partitions first
        assert ok(client.get("/api/v1/jobs/daily/stale"))["instances"] == []
        problem(client.get("/api/v1/jobs/nope/stale"), 404, "no job 'nope'")
        problem(client.get("/api/v1/jobs/weekly/stale", params={"limit": 0}), 422)


def rebuild_the_last_weekly(service: Service, graph: Graph, tmp_path: Path) -> None:
    """Taint the last weekly and build it again under `graph`'s version."""
    db = service.db
    service.taint(TaintRequest(ref=WEEKLIES[2], reason="code changed", only_this_ref=True))
    db.log.append([envelope(pb.WantCreate(want_id="again", partition_refs=[WEEKLIES[2]]), source=manual("ann"))])
    orchestrator = Orchestrator(db, graph, warehouse=str(tmp_path / "wh"), spark=None, poll_interval_s=0.01)
    try:
        assert orchestrator.run_until_idle(timeout_s=60)
    finally:
        orchestrator.close()
    service.refresh()


def test_rebuilt_weeklies_stop_being_stale_and_the_past_still_says_they_were(
    built: Database, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A weekly tainted and rebuilt under v2 is no longer stale; as of before, its old instance was."""
    graph = versioned(monkeypatch, "v2")
    service = Service(built, graph=graph)
    try:
        before = service.live.head_seq
        old = service.canonical(WEEKLIES[2]).uuid
        rebuild_the_last_weekly(service, graph, tmp_path)
        rebuilt = service.canonical(WEEKLIES[2])
        assert (rebuilt.state, rebuilt.code_version, rebuilt.stale) == ("live", "v2", False)
        assert service.canonical("daily/day=6").state == "live"  # nothing upstream was rebuilt
        now = service.stale("weekly")
        assert [i.ref for i in now.instances] == WEEKLIES[1::-1] and now.stale_count == 2
        past = service.stale("weekly", as_of_seq=before)
        assert past.instances[0].uuid == old and past.stale_count == 3
        assert service.instance(old, as_of_seq=before).stale and not service.instance(old).stale  # tainted now
    finally:
        service.stop()


def test_without_a_graph_nothing_is_stale_and_the_stale_reads_say_why(built: Database) -> None:
    service = Service(built)
    with serve_service(service) as api:
        assert canonical(api.client, WEEKLIES[0])["stale"] is False
        problem(api.client.get("/api/v1/jobs/weekly/stale"), 409, "serves no graph")
        problem(api.client.get("/api/v1/partitions", params={"stale": "true"}), 409, "serves no graph")


def test_the_cli_shows_the_code_version_and_lists_the_stale(
    built: Database, sqlite_url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("VERSIONED_CODE_VERSION", "v2")
    graph = ("--db", sqlite_url, "--graph", str(GRAPH_FILE))
    code, out, err = run_cli(capsys, "partitions", "show", WEEKLIES[0], *graph)
    assert code == 0, err
    assert "code version" in out and "v1 (stale: its job's code changed)" in out
    code, out, _ = run_cli(capsys, "partitions", "show", "daily/day=2", *graph)
    assert code == 0 and "d1" in out and "stale" not in out
    code, out, err = run_cli(capsys, "partitions", "stale", "weekly", "--limit", "2", *graph, "--json")
    assert code == 0, err
    answer = json.loads(out)
    assert answer["stale_count"] == 3 and [i["ref"] for i in answer["instances"]] == [WEEKLIES[2], WEEKLIES[1]]
    code, out, _ = run_cli(capsys, "partitions", "stale", "weekly", *graph)
    assert code == 0 and all(ref in out for ref in WEEKLIES) and "v1" in out
    code, out, err = run_cli(capsys, "partitions", "stale", "nope", *graph)
    assert code == 2 and "no job 'nope'" in err and len(err.strip().splitlines()) == 1
    code, out, err = run_cli(capsys, "partitions", "stale", "weekly", "--db", sqlite_url)
    assert code == 2 and "serves no graph" in err


def test_the_pages_show_a_stale_badge(built: Database, monkeypatch: pytest.MonkeyPatch) -> None:
    service = Service(built, graph=versioned(monkeypatch, "v2"))
    try:
        with TestClient(create_app(service)) as client:
            weekly = service.canonical(WEEKLIES[0])
            html = client.get(f"/instances/{weekly.uuid}").text
            assert 'data-testid="stale-badge"' in html and 'data-testid="instance-code-version"' in html
            assert "<code>v1</code>" in html
            daily = client.get(f"/instances/{service.canonical('daily/day=2').uuid}").text
            assert 'data-testid="stale-badge"' not in daily and "<code>d1</code>" in daily
            listing = client.get("/partitions?prefix=weekly/").text
            assert listing.count('data-testid="stale-badge"') == 3
            assert client.get("/partitions?prefix=daily/").text.count('data-testid="stale-badge"') == 0
    finally:
        service.stop()


def test_a_replicas_stale_partitions_are_the_folding_servers_as_of_every_seq_reading_only_other_versions_runs(
    built: Database, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A replica finds the runs that may be stale from their code versions' rows (state/store/run_versions.py):
    under each current version, the same stale partitions and counts as the folding server, as of every seq;
    one index asked under a new current version reads again; the current version's runs are never read."""
    writer = Service(built, graph=versioned(monkeypatch, "v2"))
    try:
        rebuild_the_last_weekly(writer, versioned(monkeypatch, "v2"), tmp_path)  # runs of v1, v2 and d1 now
    finally:
        writer.stop()
    Projector(LiveState(built.log), built.changes).project()
    head = built.log.head()
    index = None
    for version in ("v2", "v1", "v3"):
        graph = versioned(monkeypatch, version)
        live, replica = Service(built, graph=graph), Service(built, graph=graph, replica=True)
        try:
            if index is not None:
                replica.stale_index = index  # the last replica's, asked under another current version
            index = replica.stale_index
            for seq in [*range(1, head + 1), None]:
                for job in ("weekly", "daily"):
                    expected = live.stale(job, as_of_seq=seq)
                    assert replica.stale(job, as_of_seq=seq) == expected, (version, seq, job)
            assert [i.ref for i in replica.stale("weekly").instances] == {
                "v2": WEEKLIES[1::-1],
                "v1": [WEEKLIES[2]],
                "v3": WEEKLIES[::-1],
            }[version]
            taken = {run for runs in index._runs.get("weekly", {}).values() for run in runs}
            versions = {live.state.job_runs[run].code_version for run in taken}
            assert version not in versions and versions == {"v1", "v2"} - {version}
        finally:
            live.stop()
            replica.stop()
