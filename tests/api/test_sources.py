"""Source datasets through the API, the CLI and /metrics: GET /api/v1/sources, POST /api/v1/sources/{name}/scan.

States are built two ways, both on a real SQLite log served by a real uvicorn:
- by appending `SourceScanProgress` events whose cursor is a secret-looking key and token;
- by running a real `SourceScanner` over a `FilesystemConnector` tree (day directories of a
  part file and `_SUCCESS`).
Each answer is checked for its numbers, and every answer (HTTP bodies, /api/v1/events,
/metrics, CLI output in both modes) for the raw cursor bytes, which must appear nowhere.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from partbuild.api.cli import main
from partbuild.api.service import Service
from partbuild.orchestrator.graph import Graph, GraphError, SourceDataset
from partbuild.orchestrator.sources.discovery import filesystem_discovery
from partbuild.orchestrator.sources.scanner import SourceScanner
from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.database import Database
from partbuild.state.log.events import envelope, system
from partbuild.state.rules.redact import redacted

from httpkit import API, ok, problem
from serverkit import ApiServer, serve_service

SOURCES = "/api/v1/sources"
KEY_1 = b"/etc/secret-path/x"
KEY_2 = b"/etc/secret-path/y"
KEY_3 = b"/etc/secret-path/z"
TOKEN = b"token-secret-4711"
SECRETS = (KEY_1, KEY_2, KEY_3, TOKEN)
T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z
SCANNER = system("source-scanner", "test")


def progress(source: str, pass_number: int, at_ms: int, **fields: Any) -> pb.Event:
    return envelope(
        pb.SourceScanProgress(source=source, pass_number=pass_number, **fields), source=SCANNER, timestamp_ms=at_ms
    )


def seeded_events() -> list[pb.Event]:
    """`raw`: pass 1 (2 slices, done), pass 2 one slice that ended in an error; `orphan`: no graph has it."""
    return [
        progress("raw", 1, T0, last_key=KEY_1, resume_token=TOKEN, items=5, partitions=2),
        progress("raw", 1, T0 + 1000, after_key=KEY_1, last_key=KEY_2, items=3, partitions=1, done=True),
        progress(
            "raw",
            2,
            T0 + 2000,
            last_key=KEY_3,
            items=4,
            partitions=1,
            error="listing failed: 503",
            error_retryable=True,
        ),
        progress("orphan", 1, T0 + 3000, last_key=KEY_1, items=1),
    ]


def located(_: Any) -> str | None:
    return None


def graph_of(root: Path) -> Graph:
    """`raw` found by scanning the tree under `root` (and by locate), `located` by locate only."""
    discovery = filesystem_discovery(root, keys="date={date:date}")
    return Graph(
        [],
        [
            SourceDataset("raw", "raw/clicks/date={date:date}", locate=located, discovery=discovery),
            SourceDataset("located", "raw/views/date={date:date}", locate=located),
        ],
    )


def write_days(root: Path, *days: str) -> None:
    for day in days:
        folder = root / f"date={day}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "part-0").write_bytes(b"x" * 10)
        (folder / "_SUCCESS").write_bytes(b"")


def run_cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exited:
        main(list(args))
    out, err = capsys.readouterr()
    return int(exited.value.code or 0), out, err


def assert_no_secret(text: str | bytes, secrets: tuple[bytes, ...] = SECRETS) -> None:
    data = text.encode() if isinstance(text, str) else text
    for secret in secrets:
        assert secret not in data, f"raw cursor bytes {secret!r} in an answer"
        assert secret.hex() not in data.decode(errors="replace")
        assert base64.b64encode(secret) not in data  # protobuf's JSON shows bytes as base64


def by_name(body: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {source["name"]: source for source in body}


def metric(text: str, name: str, source: str) -> float:
    found = re.search(rf'^{name}\{{source="{source}"\}} (\S+)$', text, re.M)
    assert found is not None, f"{name} for {source} not in /metrics"
    return float(found.group(1))


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "raw"
    write_days(root, "2026-01-01", "2026-01-02")
    return root


@pytest.fixture
def seeded(sqlite_url: str, tree: Path) -> Iterator[ApiServer]:
    """A served graph over a log with the seeded scans."""
    with Database.open(sqlite_url, auto_upgrade=True) as db:
        log = db.log
        log.append(seeded_events())
        with serve_service(Service(db, graph=graph_of(tree))) as api:
            yield api


# ----------------------------------------------------------------- GET /api/v1/sources


def test_the_list_shows_each_source_with_its_scan_numbers_and_the_cursor_redacted(seeded: ApiServer) -> None:
    response = seeded.client.get(SOURCES)
    sources = by_name(ok(response))
    assert list(sources) == ["located", "orphan", "raw"]
    assert_no_secret(response.content)

    raw = sources["raw"]
    assert raw["pattern"] == "raw/clicks/date={date:date}"
    assert raw["found_by"] == "both"
    discovery = raw["discovery"]
    assert discovery["connector"] == {"class_name": "FilesystemConnector", "tag": "fslocal"}
    assert discovery["keys"] == "date={date:date}"
    assert discovery["complete_marker"] == "_SUCCESS"
    assert discovery["rescan_every_s"] == 60.0
    assert discovery["rewant_tainted"] is False
    assert set(discovery) == {
        "connector",
        "base_location",
        "keys",
        "complete_marker",
        "rescan_every_s",
        "rewant_tainted",
        "shards",
    }
    scan = raw["scan"]
    assert scan["pass_number"] == 2 and scan["pass_done"] is False and scan["rescan_requested"] is False
    (shard,) = scan["shards"]
    assert (shard["start"], shard["end"], shard["done"]) == ("None", "None", False)
    assert shard["cursor"] == redacted("ItemKey", KEY_3)
    assert shard["resume_token"] == "None"  # the slice that moved the cursor gave none
    assert (scan["pass_items"], scan["items_total"]) == (4, 12)
    assert (scan["pass_partitions"], scan["partitions_total"]) == (1, 4)
    assert scan["passes_done"] == 1
    assert scan["pass_started_ms"] == T0 + 2000
    assert scan["last_pass_done_ms"] == T0 + 1000
    assert (scan["last_pass_items"], scan["last_pass_partitions"]) == (8, 3)
    assert scan["errors_total"] == 1
    assert scan["last_error"] == {"message": "listing failed: 503", "retryable": True, "at_ms": T0 + 2000}
    assert scan["updated_seq"] == 3

    assert sources["located"]["found_by"] == "locate"
    assert sources["located"]["discovery"] is None and sources["located"]["scan"] is None
    orphan = sources["orphan"]
    assert orphan["pattern"] is None and orphan["found_by"] is None and orphan["discovery"] is None
    assert orphan["scan"]["shards"][0]["cursor"] == redacted("ItemKey", KEY_1)


def test_as_of_seq_answers_from_the_past_and_a_future_seq_is_a_conflict(seeded: ApiServer) -> None:
    first = by_name(ok(seeded.client.get(SOURCES, params={"as_of_seq": 1})))
    scan = first["raw"]["scan"]
    assert (scan["pass_number"], scan["pass_done"], scan["items_total"]) == (1, False, 5)
    assert scan["shards"][0]["cursor"] == redacted("ItemKey", KEY_1)
    assert scan["shards"][0]["resume_token"] == redacted("ResumeToken", TOKEN)
    assert "orphan" not in first  # declared by no graph, scanned only later
    assert ok(seeded.client.get(SOURCES, params={"as_of_seq": 0}))[1]["name"] == "raw"  # graph sources, no scans
    problem(seeded.client.get(SOURCES, params={"as_of_seq": 99}), 409)


def test_the_raw_cursor_appears_in_no_events_answer_and_no_metric(seeded: ApiServer) -> None:
    events = seeded.client.get("/api/v1/events", params={"limit": 100})
    body = ok(events)
    assert_no_secret(events.content)
    shown = body["items"][1]["event"]["source_scan_progress"]
    assert shown["after_key"] == redacted("ItemKey", KEY_1)
    assert_no_secret(seeded.client.get("/metrics").content)


# ----------------------------------------------------------------- POST /api/v1/sources/{name}/scan


def test_a_scan_request_makes_the_next_pass_due_and_is_recorded_as_the_user(seeded: ApiServer) -> None:
    client = seeded.client
    answer = ok(client.post(f"{SOURCES}/raw/scan", headers={"X-Partbuild-User": "ops"}), 201)
    assert_no_secret(str(answer))
    assert answer["seq"] == 5
    scan = answer["source"]["scan"]
    # Pass 2 is still running: the request waits for it, and changes nothing of it.
    assert (scan["pass_number"], scan["pass_done"], scan["rescan_requested"]) == (2, False, True)
    assert scan["shards"][0]["cursor"] == redacted("ItemKey", KEY_3) and scan["updated_seq"] == 5
    assert ok(client.post(f"{SOURCES}/raw/scan"), 201)["seq"] == 6  # asking again is fine

    event = ok(client.get("/api/v1/events", params={"after_seq": 4, "limit": 1}))["items"][0]["event"]
    assert event["source"] == {"manual": {"user": "ops"}}
    assert event["source_scan_request"] == {"source": "raw", "reason": "asked for by ops"}

    # A source the log scanned but the graph lacks can be rescanned too.
    assert ok(client.post(f"{SOURCES}/orphan/scan"), 201)["source"]["scan"]["rescan_requested"] is True
    listed = by_name(ok(client.get(SOURCES, params={"min_seq": 7})))
    assert listed["raw"]["scan"]["rescan_requested"] and listed["raw"]["scan"]["pass_number"] == 2


def test_a_scan_request_for_a_source_nothing_scans_is_a_404_saying_why(seeded: ApiServer) -> None:
    client = seeded.client
    head = ok(client.get("/healthz"))["head_seq"]
    problem(client.post(f"{SOURCES}/nope/scan"), 404, "no source dataset", "nope")
    problem(client.post(f"{SOURCES}/located/scan"), 404, "located", "locate only")
    assert ok(client.get("/healthz"))["head_seq"] == head


def test_a_source_name_the_fold_would_refuse_is_refused_by_the_graph(tree: Path) -> None:
    """A name over 256 characters would make every scan event a rejection: the graph refuses it up front."""
    with pytest.raises(GraphError, match="longer than 256"):
        SourceDataset("s" * 300, "raw/x/date={date:date}", discovery=filesystem_discovery(tree))


def test_a_graphless_server_rescans_what_the_log_has_and_404s_the_rest(api_server: ApiServer) -> None:
    api_server.log.append([progress("raw", 1, T0, last_key=KEY_1, items=1)])
    api_server.service.refresh()
    assert ok(api_server.client.post(f"{SOURCES}/raw/scan"), 201)["source"]["scan"]["rescan_requested"] is True
    problem(api_server.client.post(f"{SOURCES}/unknown/scan"), 404, "unknown", "no graph")


# ----------------------------------------------------------------- metrics


def test_metrics_count_what_the_scans_recorded(seeded: ApiServer) -> None:
    text = seeded.client.get("/metrics").text
    assert metric(text, "partbuild_source_items_scanned_total", "raw") == 12
    assert metric(text, "partbuild_source_partitions_found_total", "raw") == 4
    assert metric(text, "partbuild_source_scan_errors_total", "raw") == 1
    assert metric(text, "partbuild_source_scan_passes_done", "raw") == 1
    assert metric(text, "partbuild_source_scan_pass", "raw") == 2
    assert metric(text, "partbuild_source_items_scanned_total", "orphan") == 1
    assert 'source="located"' not in text  # never scanned: no series

    seeded.log.append([progress("raw", 3, T0 + 4000, last_key=KEY_1, items=2)])  # a new pass: counters go on
    seeded.service.refresh()
    after = seeded.client.get("/metrics").text
    assert metric(after, "partbuild_source_scan_pass", "raw") == 3
    assert metric(after, "partbuild_source_items_scanned_total", "raw") == 14


# ----------------------------------------------------------------- a real scanner


def scan_until_done(scanner: SourceScanner, service: Service, name: str, passes_done: int) -> None:
    for _ in range(100):
        scanner.step()
        record = service.state.sources.get(name)
        if record is not None and record.passes_done >= passes_done:
            return
    raise AssertionError(f"the scan of {name} did not finish pass {passes_done}: {service.state.sources.get(name)}")


def test_a_real_scan_is_listed_counted_and_rescanned_on_request(
    sqlite_url: str, tree: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    graph = graph_of(tree)
    with Database.open(sqlite_url, auto_upgrade=True) as db:
        log = db.log
        service = Service(db, graph=graph)
        scanner = SourceScanner(log, service.live, [graph.sources["raw"]], checkpoint_every_s=3600)
        scan_until_done(scanner, service, "raw", 1)
        cursor = service.state.sources["raw"].ranges[0].last_key
        assert cursor  # the scanner recorded a key: it must show only redacted
        with serve_service(service) as api:
            response = api.client.get(SOURCES)
            raw = by_name(ok(response))["raw"]
            assert_no_secret(response.content, (cursor,))
            scan = raw["scan"]
            assert (scan["pass_number"], scan["pass_done"], scan["passes_done"]) == (1, True, 1)
            assert (scan["items_total"], scan["partitions_total"]) == (4, 2)  # 2 days x (part-0, _SUCCESS)
            assert (scan["last_pass_items"], scan["last_pass_partitions"]) == (4, 2)
            assert scan["shards"][0]["cursor"] == redacted("ItemKey", cursor)
            assert scan["errors_total"] == 0 and scan["last_error"] is None
            live = ok(api.client.get("/api/v1/partitions", params={"prefix": "raw/clicks/"}))["items"]
            assert [item["ref"] for item in live] == ["raw/clicks/date=2026-01-01", "raw/clicks/date=2026-01-02"]

            write_days(tree, "2026-01-03")
            requested = ok(api.client.post(f"{SOURCES}/raw/scan"), 201)["source"]["scan"]
            assert (requested["pass_number"], requested["pass_done"], requested["rescan_requested"]) == (1, True, True)
            scan_until_done(scanner, service, "raw", 2)
            api.service.refresh()
            scan = by_name(ok(api.client.get(SOURCES)))["raw"]["scan"]
            assert (scan["pass_number"], scan["passes_done"], scan["last_pass_items"]) == (2, 2, 6)
            assert (scan["items_total"], scan["partitions_total"]) == (10, 5)

            text = api.client.get("/metrics").text
            assert metric(text, "partbuild_source_items_scanned_total", "raw") == 10
            assert metric(text, "partbuild_source_partitions_found_total", "raw") == 5
            assert metric(text, "partbuild_source_scan_passes_done", "raw") == 2
            assert metric(text, "partbuild_source_scan_errors_total", "raw") == 0
            new_cursor = service.state.sources["raw"].ranges[0].last_key
            for body in (text, api.client.get("/api/v1/events", params={"limit": 1000}).text):
                assert_no_secret(body, (cursor, new_cursor))

            for args in (("sources", "--server", api.url), ("sources", "list", "--json", "--server", api.url)):
                code, out, err = run_cli(capsys, *args)
                assert code == 0, err
                assert_no_secret(out, (cursor, new_cursor))
                assert "FilesystemConnector" in out


# ----------------------------------------------------------------- the CLI


@pytest.mark.parametrize("mode", ["db", "server"])
def test_cli_lists_sources_and_requests_a_scan(
    seeded: ApiServer, sqlite_url: str, tree: Path, mode: str, capsys: pytest.CaptureFixture[str]
) -> None:
    target = ["--server", seeded.url] if mode == "server" else ["--db", sqlite_url]
    code, out, err = run_cli(capsys, "sources", *target)
    assert code == 0, err
    assert_no_secret(out)
    lines = out.splitlines()
    assert lines[0].split()[:3] == ["SOURCE", "FOUND", "BY"]
    raw = next(line for line in lines if line.startswith("raw "))
    assert redacted("ItemKey", KEY_3) in raw and "running" in raw and "4/12" in raw and "1/4" in raw
    assert "listing failed: 503" in raw and "retryable" in raw
    assert ("located" in out) == (mode == "server")  # --db without --graph knows the log's sources only

    code, out, err = run_cli(capsys, "sources", "--json", *target)
    assert code == 0, err
    assert_no_secret(out)
    assert by_name(json.loads(out))["raw"]["scan"]["shards"][0]["cursor"] == redacted("ItemKey", KEY_3)

    code, out, err = run_cli(capsys, "sources", "scan", "raw", "--user", "ops", *target)
    assert code == 0, err
    assert out.strip().splitlines() == ["source raw: a new pass asked for at seq 5; it begins after pass 2 ends"]
    code, out, err = run_cli(capsys, "sources", "scan", "raw", "--json", *target)
    assert code == 0, err
    assert json.loads(out)["seq"] == 6 and json.loads(out)["source"]["scan"]["rescan_requested"] is True


@pytest.mark.parametrize("mode", ["db", "server"])
def test_cli_bad_input_is_exit_code_2_and_one_line(
    seeded: ApiServer, sqlite_url: str, mode: str, capsys: pytest.CaptureFixture[str]
) -> None:
    target = ["--server", seeded.url] if mode == "server" else ["--db", sqlite_url]
    for args in (
        ("sources", "scan", "nope", *target),
        ("sources", "--json", "scan", "raw", *target),
        ("sources", "scan", *target),
        ("sources", "--as-of", "-1", *target),
    ):
        code, out, err = run_cli(capsys, *args)
        assert code == 2, (args, out, err)
        assert len(err.strip().splitlines()) == 1 and err.startswith("partbuild: error:"), err
    code, _, err = run_cli(capsys, "sources", "--as-of", "99", *target)
    assert code == 2 and "99" in err
    with Database.open(sqlite_url) as db:
        log = db.log
        assert log.head() == 4  # bad input changed nothing


def test_cli_with_db_and_graph_lists_the_graph_sources(
    seeded: ApiServer, sqlite_url: str, tmp_path: Path, tree: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    graph_file = tmp_path / "graph.py"
    graph_file.write_text(
        "from partbuild.orchestrator.graph import Graph, SourceDataset\n"
        "from partbuild.orchestrator.sources.discovery import filesystem_discovery\n"
        f"graph = Graph([], [SourceDataset('raw', 'raw/clicks/date={{date:date}}', "
        f"discovery=filesystem_discovery({str(tree)!r}, keys='date={{date:date}}'))])\n"
    )
    code, out, err = run_cli(capsys, "sources", "--json", "--db", sqlite_url, "--graph", str(graph_file))
    assert code == 0, err
    raw = by_name(json.loads(out))["raw"]
    assert raw["found_by"] == "discovery" and raw["discovery"]["connector"]["class_name"] == "FilesystemConnector"
    code, out, err = run_cli(capsys, "sources", "--db", sqlite_url, "--graph", str(graph_file), "--server", seeded.url)
    assert code == 2


def test_sources_show_scans_redacted_and_a_scan_request_makes_a_pass_due(db_api_server: ApiServer) -> None:
    """A source the log has scans of is listed with its cursor redacted; a scan request makes the next pass due."""
    client = db_api_server.client
    assert ok(client.get(f"{API}/sources")) == []
    problem(client.post(f"{API}/sources/raw/scan"), 404, "no source dataset 'raw'")
    key = b"/secret/cursor/key"
    scanned = pb.SourceScanProgress(source="raw", pass_number=1, last_key=key, items=7, partitions=2, done=True)
    db_api_server.log.append([envelope(scanned)])
    [raw] = ok(client.get(f"{API}/sources", params={"min_seq": 1}))
    assert (raw["name"], raw["found_by"], raw["discovery"]) == ("raw", None, None)
    cursor = raw["scan"]["shards"][0]["cursor"]
    assert cursor.startswith("ItemKey(len=18, hash=") and raw["scan"]["passes_done"] == 1
    assert (raw["scan"]["items_total"], raw["scan"]["partitions_total"]) == (7, 2)
    response = client.post(f"{API}/sources/raw/scan", headers={"X-Partbuild-User": "ops"})
    answer = ok(response, 201)
    assert answer["seq"] == 2 and key not in response.content
    assert (answer["source"]["scan"]["pass_number"], answer["source"]["scan"]["rescan_requested"]) == (1, True)
    assert ok(client.get(f"{API}/sources", params={"as_of_seq": 1}))[0]["scan"]["rescan_requested"] is False


def test_a_removed_day_is_gone_in_the_api_the_cli_and_the_web(
    sqlite_url: str, tree: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import shutil

    graph = graph_of(tree)
    with Database.open(sqlite_url, auto_upgrade=True) as db:
        service = Service(db, graph=graph)
        scanner = SourceScanner(db.log, service.live, [graph.sources["raw"]], checkpoint_every_s=3600)
        scan_until_done(scanner, service, "raw", 1)
        shutil.rmtree(tree / "date=2026-01-01")
        with serve_service(service) as api:
            ok(api.client.post(f"{SOURCES}/raw/scan"), 201)
            scan_until_done(scanner, service, "raw", 2)
            api.service.refresh()
            ref = "raw/clicks/date=2026-01-01"
            gone = ok(api.client.get(f"/api/v1/partitions/canonical/{ref}"))
            assert gone["state"] == "gone" and "no longer found it" in gone["note"]
            listed = ok(api.client.get("/api/v1/partitions", params={"prefix": "raw/", "state": "gone"}))["items"]
            assert [item["ref"] for item in listed] == [ref]
            events = ok(api.client.get("/api/v1/events", params={"limit": 1000}))
            assert "partition_gone" in json.dumps(events)
            code, out, err = run_cli(capsys, "partitions", "list", "--state", "gone", "--server", api.url)
            assert code == 0, err
            assert ref in out and "gone" in out and "2026-01-02" not in out
            page = api.client.get("/partitions", params={"prefix": "raw/"})
            assert page.status_code == 200 and "state-gone" in page.text and ref in page.text
