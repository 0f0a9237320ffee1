"""Driving a `SourceScanner` in tests: one over a log, stepped until passes are done, and the events of one
kind the scans appended."""

from __future__ import annotations

from typing import Any

from partbuild.orchestrator.graph import SourceDataset
from partbuild.orchestrator.sources.scanner import SourceScanner
from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.log.live import LiveState
from partbuild.state.log.store import EventLog, parse_event


def scanner(log: EventLog, *sources: SourceDataset, **options: Any) -> tuple[SourceScanner, LiveState]:
    live = LiveState(log)
    options.setdefault("checkpoint_every_s", 0.0)
    return SourceScanner(log, live, list(sources), **options), live


def drain(scan: SourceScanner, live: LiveState, passes: int = 1, limit: int = 500) -> None:
    """Step until `passes` more passes of every source have ended here (recorded or quiet)."""
    live.catch_up()
    goal = {each.name: each.passes_ended + passes for each in scan._scans}
    for _ in range(limit):
        for each in scan._scans:  # no waiting in real time: a pass is due by the scanner's clock
            each.next_due = 0.0
        scan.step()
        if all(each.passes_ended >= goal[each.name] for each in scan._scans):
            live.catch_up()
            return
    raise AssertionError(f"no pass finished in {limit} slices: {live.state.sources}")


def events(log: EventLog, kind: str) -> list[pb.Event]:
    return [parse_event(row.payload) for row in log.read(0, 10_000) if row.event_type == kind]
