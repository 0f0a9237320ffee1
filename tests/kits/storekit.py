"""The state store's tests: a log appended a few events at a time, each time folded and projected."""

from __future__ import annotations

from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.database import Database
from partbuild.state.log.live import LiveState
from partbuild.state.store.projector import Projector


def projected_while_growing(database: Database, events: list[pb.Event], step: int = 7, span: int = 3) -> LiveState:
    """Append `events` `step` at a time, each time folded and projected in spans of `span` seqs (the touched
    passes after the first); the live state at the end."""
    live = LiveState(database.log)
    projector = Projector(live, database.changes, span=span)
    for start in range(0, len(events), step):
        database.log.append(events[start : start + step])
        live.catch_up()
        assert projector.project() == live.head_seq == database.changes.watermark()
    return live
