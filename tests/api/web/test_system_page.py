"""The system page's source scans (`/system`): partitions found are those of one pass, not a running total over
passes (a source of 2 partitions scanned three times has 2, not 6)."""

from __future__ import annotations

import re
from pathlib import Path

from fastapi.testclient import TestClient

from partbuild.api.app import create_app
from partbuild.api.service import Service
from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.database import Database
from partbuild.state.log.events import envelope, system

T0 = 1_767_225_600_000


def passes(done: int, running: bool) -> list[pb.Event]:
    """`done` complete passes of `raw` finding 2 partitions each, then one running pass that found 1 so far."""
    events = []
    for number in range(1, done + 1):
        scan = pb.SourceScanProgress(source="raw", pass_number=number, items=4, partitions=2, done=True)
        events.append(envelope(scan, source=system("source-scanner"), timestamp_ms=T0 + number))
    if running:
        scan = pb.SourceScanProgress(source="raw", pass_number=done + 1, last_key=b"k", items=1, partitions=1)
        events.append(envelope(scan, source=system("source-scanner"), timestamp_ms=T0 + 100))
    return events


def shown(tmp_path: Path, events: list[pb.Event]) -> str:
    with Database.open(f"sqlite:///{tmp_path / 'pb.db'}", auto_upgrade=True) as db:
        db.log.append(events)
        with TestClient(create_app(Service(db))) as client:
            html = client.get("/system").text
    cell = re.search(r'data-testid="source-partitions">(.*?)</td>', html, re.S)
    assert cell is not None
    return re.sub(r"<[^>]+>", "", cell.group(1))


def test_partitions_found_are_those_of_the_last_complete_pass(tmp_path: Path) -> None:
    assert shown(tmp_path, passes(3, running=True)) == "2 (last complete pass)"


def test_before_any_pass_completes_they_are_those_found_so_far(tmp_path: Path) -> None:
    assert shown(tmp_path, passes(0, running=True)) == "1 (so far)"
